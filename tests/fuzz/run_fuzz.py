#!/usr/bin/python3
"""Differential graph fuzzer: random graphs (gen_graph.py) on every executor.

    run_fuzz.py --seeds A:B [--executors aten,host,nvptx] [--bin DIR]
                [--out DIR] [--jobs J] [--no-train] [--timeout S]
                [--time-limit S] [--no-fd] [--no-threads]

For each seed: generate the graph, verify it (`fusejit-opt FILE`; a graph
that does not verify is a generator bug, counted as `reject`), then run it on
each executor with `fusejit-run --check=f64 --json --output-dir` (nvptx on the
emulator, FUSEJIT_NVPTX_DEVICE=emulator), and again with `--train` where the
graph is differentiable. --check=f64 (IR.md §5) judges every output and
gradient against the f64 reference; on top of it the runner compares each
executor's .npy files with aten's (numpy), which does not trust the check's
own code.

Two more checks (numpy), each counted in the summary:
  threads   every host run is repeated with FUSEJIT_THREADS=1, 2 and 5; the
            .npy files must be bit-identical to the plan's own choice (all
            cores). A per-graph disk cache folder makes the repeats loads.
  fd        gradients against finite differences, in f64: the graph with
            every float type made f64 (its params, casts and types) runs on
            aten at x +- h v and x +- (h/2) v, h = 1e-6, along a random
            direction v over the float params; the central differences,
            contracted with the tangents t, must match <grad, v> of the same
            graph's --train on aten (tangents t given by file). The two step
            sizes' disagreement T = |fd(h) - fd(h/2)| bounds the truncation
            error; when it is large (T > 1e-4 M, M the sum of the terms'
            magnitudes: a kink of relu/abs/max/clamp/floor or a comparison's
            jump within h of an input), the inputs are redrawn
            (fd.kink_redraws) up to 3 times, then the graph is left out
            (fd.kinky). Else |fd(h/2) - <grad, v>| must be at most
            4 T + 1e-6 M + 1e-13 S / (h/2), S = sum |t f(x)| (f64 rounding).

Failure kinds (each failing graph goes to OUT/<kind>-<seed>-<executor>.fj,
with the command and its output in a .log beside it):
  crash     a signal, a sanitizer report, or an exit code other than 0 and 1
  timeout   the run took longer than --timeout
  mismatch  --check=f64 failed (exit 1 with a FAIL output), or an executor's
            output differs grossly from aten's
  error     exit 1 with an error on an executor where aten ran the graph
            (a valid graph refused), or a message that is not a diagnostic
  threads   host outputs that differ between thread counts
  fdgrad    a gradient that disagrees with finite differences
  suspect   a mismatch in a graph whose outputs depend discontinuously on
            rounding (comparisons, floor/round/sign, argmax, casts to
            integers: IR.md §5 "what it does not absorb"); reported, never
            counted as a failure
Exit status: 1 when a crash, timeout, mismatch, error, reject, threads or
fdgrad failure was found.
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

FAILING = ("crash", "timeout", "mismatch", "error", "reject", "harness", "threads", "fdgrad")
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


F64_TYPES = re.compile(r"\b(f32|f16|bf16)\b")
PARAM = re.compile(r"%(\w+): (\w+)\[([^\]]*)\]")
FD_H = 1e-6          # the finite differences' step (and half of it)
FD_TRIES = 4         # draws of (x, v) before a kinky graph is left out
THREADS = ("1", "2", "5")


def bit_diffs(ref_dir, dir_, outputs):
    """The outputs whose .npy files differ in any bit from ref_dir's."""
    bad = []
    for o in outputs:
        name = os.path.basename(o.get("file", ""))
        if not name:
            continue
        p1, p2 = os.path.join(ref_dir, name), os.path.join(dir_, name)
        if not os.path.exists(p1) or not os.path.exists(p2):
            bad.append(name + ": missing")
            continue
        with open(p1, "rb") as f1, open(p2, "rb") as f2:
            if f1.read() == f2.read():
                continue
        a, b = load_npy(p1), load_npy(p2)
        if a is not None and b is not None and a.shape == b.shape and a.dtype.kind == "f":
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            d = np.abs(a64 - b64)
            d = d[np.isfinite(d)]
            bad.append("%s: %d of %d elements differ, max |diff| %.3g" %
                       (name, int(np.sum(a != b)), a.size, float(d.max()) if d.size else float("nan")))
        else:
            bad.append(name + ": bytes differ")
    return bad


def graph_params(text, dims):
    """[(name, dtype, shape)] of @main's parameters, symbols bound by dims."""
    head = re.search(r"graph @main\((.*)\) \{", text).group(1)
    dm = dict(dims)
    out = []
    for name, dt, shp in PARAM.findall(head):
        shape = tuple(int(dm.get(d.strip(), d.strip())) for d in shp.split(",") if d.strip())
        out.append((name, dt, shape))
    return out


class Fuzzer:
    def __init__(self, a):
        self.a = a
        self.opt = find_tool(a.bin, "fusejit-opt")
        self.run = find_tool(a.bin, "fusejit-run")
        self.stats = {}
        self.findings = []
        self.sizes = []
        self.graphs = 0
        self.deadline = time.time() + (a.time_limit or 0)

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
        if self.a.time_limit and time.time() > self.deadline:
            self.count("seeds left (--time-limit)")
            return
        self.graphs += 1
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
            if train and not self.a.no_fd and np is not None:
                self.fd_check(seed, text, tmp, dims)
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
            if ex == "host" and not self.a.no_threads:   # the thread repeats load its kernels
                env["FUSEJIT_CACHE_DIR"] = os.path.join(tmp, "cache")
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
                if ex == "host" and not self.a.no_threads:
                    self.thread_check(seed, text, cmd, env, d, js["outputs"], tag, key)
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

    def thread_check(self, seed, text, cmd, env, d, outputs, tag, key):
        """The host run again with 1, 2 and 5 threads: the same bits."""
        for t in THREADS:
            dt = "%s.t%s" % (d, t)
            c = [x for x in cmd if x != "--check=f64" and not x.startswith("--output-dir=")]
            c.append("--output-dir=" + dt)
            e = dict(env, FUSEJIT_THREADS=t)
            rc, out, err, _ = run(c, e, self.a.timeout)
            self.count(key + ".thread_runs")
            if rc != 0:
                kind = "timeout" if rc is None else "crash" if rc not in (0, 1) else "error"
                self.record(kind, seed, "%s-t%s" % (tag, t), text, c, out, err,
                            "FUSEJIT_THREADS=%s: %s" % (t, err.strip()[-300:]))
                continue
            bad = bit_diffs(d, dt, outputs)
            if bad:
                self.count(key + ".thread_diffs")
                self.record("threads", seed, "%s-t%s" % (tag, t), text, c, out, err,
                            "FUSEJIT_THREADS=%s vs all cores: %s" % (t, "; ".join(bad))[:400])
            else:
                self.count(key + ".thread_identical")

    def fd_run(self, cmd, what, env):
        rc, out, err, _ = run(cmd, env, self.a.timeout)
        if rc != 0:
            return None, err, cmd
        try:
            return json.loads(out)["outputs"], err, cmd
        except (ValueError, KeyError):
            return None, "no JSON from " + what, cmd

    def fd_check(self, seed, text, tmp, dims):
        """Gradients of the graph's f64 copy (aten) against central
        differences along a random direction (see the module's text)."""
        t64 = F64_TYPES.sub("f64", text)
        path = os.path.join(tmp, "g64.fj")
        with open(path, "w") as f:
            f.write(t64)
        if run([self.opt, path], None, self.a.timeout)[0] != 0:
            self.count("fd.no_f64_copy")
            return
        floats = [(n, shp) for n, dt, shp in graph_params(t64, dims) if dt == "f64"]
        if not floats:
            return
        base = [self.run, path, "--executor=aten", "--json"]
        for kv in dims:
            base += ["--dim", "%s=%s" % kv]
        rng = np.random.default_rng(seed)
        fdir = os.path.join(tmp, "fd")
        os.makedirs(fdir, exist_ok=True)
        env = dict(os.environ, FUSEJIT_CACHE_DIR=os.path.join(fdir, "cache"))   # the runs after the first load

        def inputs(x, tag):
            args = []
            for n, _ in floats:
                fn = os.path.join(fdir, "%s_%s.npy" % (tag, n))
                np.save(fn, x[n])
                args.append("--input=%s=%s" % (n, fn))
            return args

        for attempt in range(FD_TRIES):
            x = {n: rng.uniform(-1.0, 1.0, shp) for n, shp in floats}
            v = {n: rng.standard_normal(shp) for n, shp in floats}
            f = {}
            outs = None
            for h in (FD_H, FD_H / 2):
                for sg in (1, -1):
                    xs = {n: x[n] + sg * h * v[n] for n in x}
                    od = os.path.join(fdir, "f%g_%d" % (h, sg))
                    res, err, c = self.fd_run(base + inputs(xs, "x%g_%d" % (h, sg)) + ["--output-dir=" + od],
                                              "fd forward", env)
                    if res is None:
                        self.count("fd.f64_refused")
                        return
                    outs = res
                    f[(h, sg)] = {os.path.basename(o["file"])[:-4]: load_npy(os.path.join(od, os.path.basename(o["file"])))
                                  for o in res if o.get("file") and o["dtype"] == "f64"}
            if not outs or not f[(FD_H, 1)]:
                return
            if not all(np.all(np.isfinite(a)) for fh in f.values() for a in fh.values()):
                self.count("fd.nonfinite")
                return
            tang = {k: rng.standard_normal(a.shape) for k, a in f[(FD_H, 1)].items()}
            gd = os.path.join(fdir, "grad")
            xin = inputs(x, "x")
            while True:
                targs = []
                for k, t in tang.items():
                    fn = os.path.join(fdir, "t_%s.npy" % k)
                    np.save(fn, t)
                    targs.append("--tangent=%s=%s" % (k, fn))
                c = base + xin + targs + ["--train", "--output-dir=" + gd]
                rc, tout, terr, _ = run(c, env, self.a.timeout)
                m = re.search(r"--tangent (\w+): @\w+ has no floating-point output named", terr)
                if rc != 0 and m and m.group(1) in tang:
                    del tang[m.group(1)]      # an output without a tangent: out of the contraction
                    continue
                break
            if rc != 0:
                self.count("fd.train_refused")
                return
            grads = {n: load_npy(os.path.join(gd, "grad_%s.npy" % n)) for n, _ in floats}
            grads = {n: gr for n, gr in grads.items() if gr is not None}
            if not grads or not tang:
                self.count("fd.no_gradient")
                return
            if not all(np.all(np.isfinite(gr)) for gr in grads.values()):
                self.count("fd.nonfinite")
                return
            g = sum(float(np.sum(grads[n] * v[n])) for n in grads)
            gmag = sum(float(np.sum(np.abs(grads[n] * v[n]))) for n in grads)
            fd, fmag = {}, 0.0
            for h in (FD_H, FD_H / 2):
                terms = [tang[k] * (f[(h, 1)][k] - f[(h, -1)][k]) / (2 * h) for k in tang]
                fd[h] = sum(float(np.sum(t)) for t in terms)
                fmag = max(fmag, sum(float(np.sum(np.abs(t))) for t in terms))
            size = sum(float(np.sum(np.abs(tang[k] * f[(FD_H, 1)][k]))) for k in tang)
            mag = max(gmag, fmag)
            noise = 1e-13 * size / (FD_H / 2)        # f64 rounding of f, over the step
            trunc = abs(fd[FD_H] - fd[FD_H / 2])
            if trunc > 1e-4 * mag + noise:
                self.count("fd.kink_redraws")      # a kink or a jump within h: draw again
                continue
            err = abs(fd[FD_H / 2] - g)
            tol = 4 * trunc + 1e-6 * mag + noise
            self.count("fd.graphs_checked")
            self.count("fd.grads_checked", len(grads))
            if err > tol:
                self.count("fd.mismatch")
                self.record("fdgrad", seed, "aten-f64", t64, c, tout, terr,
                            "<grad,v> %.10g vs finite differences %.10g (h: %.10g): |diff| %.3g > tol %.3g"
                            % (g, fd[FD_H / 2], fd[FD_H], abs(fd[FD_H / 2] - g), tol))
            return
        self.count("fd.kinky")

    def report(self, seeds, secs):
        print("run_fuzz: seeds %d:%d, %d graphs in %.0f s" % (seeds[0], seeds[-1] + 1, self.graphs, secs))
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
    ap.add_argument("--time-limit", type=int, help="start no seed after this many seconds")
    ap.add_argument("--no-fd", action="store_true", help="no finite-difference check of gradients")
    ap.add_argument("--no-threads", action="store_true", help="no thread-count bit-identity check")
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
