#!/usr/bin/python3
"""Differential graph fuzzer: random graphs (gen_graph.py) on every executor.

    run_fuzz.py --seeds A:B [--executors aten,host,nvptx] [--bin DIR]
                [--out DIR] [--jobs J] [--no-train] [--timeout S]

For each seed: generate the graph, verify it (`fusejit-opt FILE`; a graph
that does not verify is a generator bug, counted as `reject`), then run it on
each executor with `fusejit-run --check=f64 --json --output-dir` (nvptx on the
emulator, FUSEJIT_NVPTX_DEVICE=emulator), and again with `--train` where the
graph is differentiable. --check=f64 (IR.md §5) judges every output and
gradient against the f64 reference; on top of it the runner compares each
executor's .npy files with aten's (numpy), which does not trust the check's
own code.

Failure kinds (each failing graph goes to OUT/<kind>-<seed>-<executor>.fj,
with the command and its output in a .log beside it):
  crash     a signal, a sanitizer report, or an exit code other than 0 and 1
  timeout   the run took longer than --timeout
  mismatch  --check=f64 failed (exit 1 with a FAIL output), or an executor's
            output differs grossly from aten's
  error     exit 1 with an error on an executor where aten ran the graph
            (a valid graph refused), or a message that is not a diagnostic
  suspect   a mismatch in a graph whose outputs depend discontinuously on
            rounding (comparisons, floor/round/sign, argmax, casts to
            integers: IR.md §5 "what it does not absorb"); reported, never
            counted as a failure
Exit status: 1 when a crash, timeout, mismatch, error or reject was found.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_graph  # noqa: E402

try:
    import numpy as np
except ImportError:      # the cross-executor comparison needs numpy
    np = None

FAILING = ("crash", "timeout", "mismatch", "error", "reject", "harness")
DISCONTINUOUS = re.compile(r"aten\.(floor|ceil|round|trunc|sign|lt|le|gt|ge|eq|ne|argmax|argmin"
                           r"|_to_copy\([^)]*\) \{dtype=(i64|i32|bool))\b")
SANITIZER = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:"
                       r"|malloc\(\)|corrupted|double free|free\(\): invalid")
DIAGNOSTIC = re.compile(r"(^|\n)(\S+\.fj:\d+:\d+: error: |fusejit-run: error: )")
TOL = {"f64": 1e-12, "f32": 1e-5, "f16": 1e-2, "bf16": 5e-2}


def find_tool(bindir, name):
    for d in (bindir, os.path.join(bindir, "tools")):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    sys.exit("run_fuzz: %s not found under %s (--bin)" % (name, bindir))


def run(cmd, env, timeout):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, text=True, errors="replace")
        return p.returncode, p.stdout, p.stderr, time.time() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out, "timeout after %ds" % timeout, time.time() - t0


def load_npy(path):
    if np is None or not os.path.exists(path):
        return None
    try:
        return np.load(path, allow_pickle=False)
    except Exception:
        return None


def compare_dirs(ref_dir, dir_, outputs):
    """Gross differences of an executor's .npy files from aten's: a wrong
    result changes an output by about its own size."""
    worst = []
    for o in outputs:
        name = os.path.basename(o.get("file", ""))
        a, b = load_npy(os.path.join(dir_, name)), load_npy(os.path.join(ref_dir, name))
        if a is None or b is None:
            continue
        if a.shape != b.shape:
            worst.append("%s: shape %s vs aten %s" % (name, a.shape, b.shape))
            continue
        if o["dtype"] == "bf16" or o["dtype"] in TOL:
            if o["dtype"] == "bf16":
                a = (a.reshape(-1).astype(np.uint32) << 16).view(np.float32)
                b = (b.reshape(-1).astype(np.uint32) << 16).view(np.float32)
            a, b = a.astype(np.float64), b.astype(np.float64)
            fin = np.isfinite(a) & np.isfinite(b)
            if not np.array_equal(np.isnan(a), np.isnan(b)):
                continue       # NaN placement is the f64 check's business
            d = np.linalg.norm((a - b)[fin])
            n = max(np.linalg.norm(a[fin]), np.linalg.norm(b[fin]))
            scale = o.get("f64_scale", 0.0) or 0.0
            if d > 0.1 * (n + scale) and d > 1e-6:
                worst.append("%s: |out-aten| %.3g vs |aten| %.3g" % (name, d, n))
        elif not np.array_equal(a, b):
            worst.append("%s: %d of %d elements differ from aten" % (name, int(np.sum(a != b)), a.size))
    return worst


class Fuzzer:
    def __init__(self, a):
        self.a = a
        self.opt = find_tool(a.bin, "fusejit-opt")
        self.run = find_tool(a.bin, "fusejit-run")
        self.stats = {}
        self.findings = []
        self.sizes = []

    def count(self, key, n=1):
        self.stats[key] = self.stats.get(key, 0) + n

    def record(self, kind, seed, ex, text, cmd, out, err, why):
        self.findings.append((kind, seed, ex, why))
        if not self.a.out:
            return
        os.makedirs(self.a.out, exist_ok=True)
        base = os.path.join(self.a.out, "%s-%d-%s" % (kind, seed, ex))
        with open(base + ".fj", "w") as f:
            f.write(text)
        with open(base + ".log", "w") as f:
            f.write("$ %s\n%s\n--- stdout\n%s\n--- stderr\n%s\n" % (" ".join(cmd), why, out, err))

    def one(self, seed):
        try:
            self.one_graph(seed)
        except Exception:        # a bug of the fuzzer: say so, keep going
            import traceback
            self.count("harness")
            self.findings.append(("harness", seed, "-", traceback.format_exc()[-400:]))

    def one_graph(self, seed):
        text = gen_graph.generate(seed, self.a.nodes)
        m = re.search(r"nodes=(\d+) train=(\d)", text)
        nodes, train = int(m.group(1)), m.group(2) == "1" and not self.a.no_train
        disc = bool(DISCONTINUOUS.search(text))
        dims = re.findall(r"// DIMS: (\w+)=(\d+)", text)
        tmp = tempfile.mkdtemp(prefix="fjfuzz%d." % seed)
        try:
            path = os.path.join(tmp, "g.fj")
            with open(path, "w") as f:
                f.write(text)
            rc, out, err, _ = run([self.opt, path], None, self.a.timeout)
            if rc != 0:
                self.count("reject")
                self.record("reject", seed, "opt", text, [self.opt, path], out, err, err.strip()[:300])
                return
            self.sizes.append(nodes)
            modes = [False, True] if train else [False]
            for tr in modes:
                self.differential(seed, text, path, tmp, dims, tr, disc)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def differential(self, seed, text, path, tmp, dims, train, disc):
        mode = "train" if train else "fwd"
        res = {}
        for ex in self.a.executors.split(","):
            d = os.path.join(tmp, "%s-%s" % (mode, ex))
            cmd = [self.run, path, "--executor=" + ex, "--check=f64", "--json", "--output-dir=" + d]
            for kv in dims:
                cmd += ["--dim", "%s=%s" % kv]
            if train:
                cmd.append("--train")
            env = dict(os.environ)
            if ex == "nvptx":
                env["FUSEJIT_NVPTX_DEVICE"] = "emulator"
            rc, out, err, secs = run(cmd, env, self.a.timeout)
            key = "%s.%s" % (ex, mode)
            self.count(key + ".runs")
            tag = ex + ("-train" if train else "")
            res[ex] = (rc, out, err, d)
            if rc is None:
                self.count(key + ".timeout")
                self.record("timeout", seed, tag, text, cmd, out, err, err)
                continue
            if rc not in (0, 1) or SANITIZER.search(err):
                self.count(key + ".crash")
                self.record("crash", seed, tag, text, cmd, out, err, "exit %d: %s" % (rc, err.strip()[-300:]))
                continue
            js = None
            try:
                js = json.loads(out) if out.strip() else None
            except ValueError:
                pass
            if rc == 0 and js:
                self.count(key + ".ok")
                if train:
                    self.count(key + ".grads", sum(1 for o in js["outputs"] if o["name"].startswith("grad_")))
                continue
            fails = [o for o in (js or {}).get("outputs", [])
                     if o.get("f64_err", 0) > o.get("f64_tolerance", 1e300)]
            if fails or "FAIL" in out:
                why = "; ".join("%s f64_err %.3g > %.3g" % (o["name"], o["f64_err"], o["f64_tolerance"])
                                for o in fails) or err.strip()[:300]
                kind = "suspect" if disc else "mismatch"
                self.count(key + "." + kind)
                self.record(kind, seed, tag, text, cmd, out, err, why)
                continue
            msg = err.strip()
            if not DIAGNOSTIC.search(msg):
                self.count(key + ".unclear")
                self.record("error", seed, tag, text, cmd, out, err, "not a diagnostic: " + msg[:300])
            elif ex != "aten" and res.get("aten", (1,))[0] == 0:
                self.count(key + ".error")
                self.record("error", seed, tag, text, cmd, out, err, msg[:300])
            else:
                self.count(key + ".refused")   # refused everywhere: a clear diagnostic
                self.count("refused: " + re.sub(r"^\S+:\d+:\d+: ", "", msg.splitlines()[0])[:90])
        ref = res.get("aten")
        if not ref or ref[0] != 0:
            return
        for ex, (rc, out, err, d) in res.items():
            if ex == "aten" or rc != 0:
                continue
            try:
                outputs = json.loads(out)["outputs"]
            except (ValueError, KeyError):
                continue
            diffs = compare_dirs(ref[3], d, outputs)
            if diffs:
                kind = "suspect" if disc else "mismatch"
                tag = ex + ("-train" if train else "")
                self.count("%s.%s.xdiff" % (ex, mode))
                self.record(kind, seed, tag, text, ["(npy vs aten)"], out, "", "; ".join(diffs)[:400])

    def report(self, seeds, secs):
        print("run_fuzz: seeds %d:%d, %d graphs in %.0f s" % (seeds[0], seeds[-1] + 1, len(seeds), secs))
        if self.sizes:
            s = sorted(self.sizes)
            big = sum(1 for n in s if n > 500)
            print("  nodes: min %d, median %d, p90 %d, max %d; %d of %d over 500" %
                  (s[0], s[len(s) // 2], s[int(len(s) * 0.9)], s[-1], big, len(s)))
        for k in sorted(self.stats):
            print("  %-60s %d" % (k, self.stats[k]))
        if np is None:
            print("  (no numpy in this python: outputs not compared with aten's .npy files)")
        bad = [f for f in self.findings if f[0] in FAILING]
        for kind, seed, ex, why in sorted(self.findings):
            print("  %s seed %d %s: %s" % (kind.upper(), seed, ex, why.replace("\n", " ")[:240]))
        print("run_fuzz: %d failures, %d suspects" % (len(bad), len(self.findings) - len(bad)))
        return 1 if bad else 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0:20", help="A:B, B excluded")
    ap.add_argument("--quick-seeds", help="the seeds when FJ_TEST_QUICK=1 (the sanitizer build)")
    ap.add_argument("--executors", default="aten,host,nvptx")
    ap.add_argument("--bin", default=os.path.join(here, "..", "..", "build"))
    ap.add_argument("--out", help="folder for failing graphs")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--nodes", type=int, help="force the node count")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--no-train", action="store_true")
    a = ap.parse_args()
    if a.quick_seeds and os.environ.get("FJ_TEST_QUICK") == "1":
        a.seeds = a.quick_seeds
    lo, hi = (int(x) for x in a.seeds.split(":"))
    ex = a.executors.split(",")
    if "aten" in ex:     # aten first: the others are judged against it
        a.executors = ",".join(["aten"] + [e for e in ex if e != "aten"])
    fz = Fuzzer(a)
    seeds = list(range(lo, hi))
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        list(pool.map(fz.one, seeds))
    sys.exit(fz.report(seeds, time.time() - t0))


if __name__ == "__main__":
    main()
