#!/usr/bin/python3
"""bench_targets.py BENCH_TARGETS: bench/targets --judge on made-up results.

Writes the four JSON files that bench/targets reads (the formats of
bench/matmul/run, bench/run and bench/peers/run.py) into a temporary folder:
first results that meet every target, then each target missed in turn, and
checks the exit status and the PASS/FAIL line of that target. No benchmark
runs. Standard library only.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

ROWS = ("gelu", "silu", "layer_norm", "rms_norm", "softmax", "log_softmax")


def bench_run():
    recs = []
    for g in ROWS + ("chain",):  # chain: no target
        for ps, r in (("fwd", 0.9), ("fwd+bwd", 0.8)):
            v = 0.1 if g == "chain" else r
            recs.append({"graph": g, "pass": ps, "executor": "host", "status": "ok", "memcpy_ratio": v,
                         "round_ratios": [v - 0.05, v]})
    return {"records": recs}


def matmul():
    recs = []
    for path, isa in (("native", "avx512"), ("avx2", "avx2")):
        for shape, lay in (([1024, 1024, 1024], "nn"), ([768, 1024, 3072], "tn")):
            recs.append({"shape": shape, "layout": lay, "path": path, "isa": isa, "gflops_1t": 87.0, "gflops_2t": 170.0,
                         "peak_1t": 100.0, "peak_2t": 200.0, "scaling": 0.98})
    return {"cpu": "Made-up CPU", "records": recs}


def peers():
    recs = []
    for g, ps, fj, best in (("gelu", "fwd", [8.0, 8.4], 13.0), ("softmax", "train", [25.0, 35.0], 23.0),
                            ("mlp_wide", "train", [106.0, 109.0], 100.0)):
        recs.append({"graph": g, "pass": ps, "system": "fusejit", "round_ms": fj, "bytes": 1})
        recs.append({"graph": g, "pass": ps, "system": "torch eager", "round_ms": [best, best * 1.1], "bytes": 1})
        recs.append({"graph": g, "pass": ps, "system": "jax.jit", "round_ms": [], "bytes": 1})
    return {"records": recs}


def judge(tool, files):
    with tempfile.TemporaryDirectory(prefix="fj-targets-test.") as d:
        for name, obj in files.items():
            with open(os.path.join(d, name + ".json"), "w") as f:
                json.dump(obj, f)
        p = subprocess.run([sys.executable, tool, "--judge", d], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    tool = sys.argv[1]
    good = {"matmul": matmul(), "run-native": bench_run(), "run-avx2": bench_run(), "peers": peers()}
    fails = []

    def expect(what, files, rc, line):
        got, out = judge(tool, files)
        if got != rc or line not in out:
            fails.append("%s: expected exit %d and %r, got exit %d:\n%s" % (what, rc, line, got, out))

    expect("all met", good, 0, "PASS  peers: fusejit fastest on 1 of 3 rows; ties within its noise: softmax train 1.09 (noise 40 %)")
    expect("all met", good, 0, "matmul-bound within 1.1x: mlp_wide train 1.06")
    expect("all met", good, 0, "PASS  memcpy ratio, AVX2 training >= 0.75: lowest 0.800")
    # one target missed at a time
    f = copy.deepcopy(good)
    next(r for r in f["run-avx2"]["records"] if r["graph"] == "softmax" and r["pass"] == "fwd")["memcpy_ratio"] = 0.84
    expect("AVX2 softmax forward 0.84", f, 1, "FAIL  memcpy ratio, AVX2 forward >= 0.85: below: softmax 0.840")
    f = copy.deepcopy(good)
    f["run-native"]["records"] = [r for r in f["run-native"]["records"] if r["graph"] != "rms_norm"]
    expect("rms_norm missing", f, 1, "FAIL  memcpy ratio, AVX-512 training >= 0.75: below: rms_norm missing")
    f = copy.deepcopy(good)
    f["run-native"]["records"][0]["status"] = "error"
    expect("gelu failed", f, 1, "below: gelu missing")
    f = copy.deepcopy(good)
    f["matmul"]["records"][1]["gflops_1t"] = 84.0
    expect("matmul 84 %", f, 1, "FAIL  matmul native (avx512), one thread >= 85 % of the FMA peak: below: 768x1024x3072 tn 84 %")
    f = copy.deepcopy(good)
    f["matmul"]["records"][2]["scaling"] = 0.85
    expect("scaling 0.85", f, 1, "FAIL  matmul avx2, two-thread scaling >= 0.9: below: 1024x1024x1024 nn 0.85")
    f = copy.deepcopy(good)
    f["peers"]["records"][0]["round_ms"] = [14.0, 14.2]  # gelu fwd 14.0 against 13.0, noise 1.4 %
    expect("gelu slower", f, 1, "slower: gelu fwd 1.08 of torch eager")
    f = copy.deepcopy(good)
    f["peers"]["records"][6]["round_ms"] = [112.0, 113.0]  # mlp_wide 1.12: over 1.1
    expect("mlp_wide 1.12", f, 1, "slower: mlp_wide train 1.12 of torch eager")
    if fails:
        sys.exit("\n\n".join(fails))
    print("bench/targets judged 9 made-up results as expected")


if __name__ == "__main__":
    main()
