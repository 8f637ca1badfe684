#!/usr/bin/env python3
"""bench/peers/run.py [--only NAME,...] [--rounds N] [--peers LIST] [--no-train] ...

A like-for-like comparison of fusejit's fused host executor with its peers on
the functions of bench/graphs/*.fj (and bench/peers/mlp_wide.fj: the CPU speed
issue's MLP), at the same sizes, on this machine with
PEER_THREADS threads (default 2; on a bigger machine every process is pinned
to the same first PEER_THREADS CPUs):
  fusejit        build/fusejit-run FILE --executor=host --bench --json [--train]
                 (FUSEJIT_THREADS = PEER_THREADS)
  torch eager    PyTorch eager
  torch.compile  torch.compile(fn, dynamic=False) (inductor, CPU: needs a C++
                 compiler; train compiles forward + backward through AOTAutograd)
  jax.jit        jax.jit of the forward; of jax.vjp for training
  halide         Halide JIT (bench/peers/halide_peer.py): the pointwise and
                 row-normalization forwards only, rows parallel, 16-lane vectors

The same work everywhere:
  fwd    the graph's outputs, from preallocated random inputs (floats uniform
         in [-1, 1), integer targets valid).
  train  the forward outputs PLUS the gradient of every floating-point input,
         for a random tangent of each output that is an input of the timed
         function (made once, outside the timing: not a constant such as
         ones_like that a compiler could fold). This is what fusejit-run
         --train times (IR.md section 5): its forward, which also writes the
         values saved for the backward, then its backward on those and the
         random tangents; the time is the sum of the two phases' medians.

Fair timing: the systems alternate in the same minutes. Each round runs, for
each graph, its --rounds rounds (default 3) back to back, and in each round
per pass fusejit and then every peer (the order reversed every other round):
a graph's systems are measured in the same minutes, and each keeps its best
median over the rounds. Every median follows fusejit-run --bench's rule: warm-up
(up to 3 runs or 200 ms), then as many timed runs as fit in about 0.5 s (5 to
1000; --reps N: exactly N everywhere), inputs and tangents preallocated.
Compilation (fusejit's, torch.compile's, XLA's, Halide's) happens outside the
timing: peers compile once, in a long-lived worker process per interpreter
that keeps a graph's inputs and compiled functions across its rounds and
drops them when the next graph comes (kept for every graph, they grew the
torch worker to ~15 GB, and the OOM killer ended it on a 23 GB machine).

Outputs: fusejit-run and Halide write into preallocated outputs; PyTorch and
XLA allocate theirs on every call, and with glibc's defaults each 128 MB
block is mmap'd fresh and page-faulted in (on a VM that alone can cost more
than the kernel: torch's x + 1 on [8192,4096] took ~160 ms instead of ~24).
So every process runs with GLIBC_TUNABLES set to REUSE_MALLOC below (no mmap,
no trimming, one arena: freed blocks are reused, as a caching allocator
would); --malloc=default measures with glibc's defaults.

The table prints per graph and pass fusejit's best median, its run-to-run noise
(max/min - 1 over its rounds' medians), its GB/s (every input read once +
every output written once), each peer's best median, the best peer and
fusejit / best peer (below 1: fusejit is faster).

Where the peers come from (each missing one is skipped with a note):
  torch   --torch-python, else $FJ_TORCH_PYTHON, else the pinned PyTorch 2.x
          venv of scripts/torch2-env.sh (~/.cache/fusejit-py/torch-*/), else
          this interpreter.
  jax     --jax-python, else $FJ_JAX_PYTHON, else ~/.cache/fusejit-py/jax,
          a venv made once for measuring (not used by any test):
            python3 -m venv ~/.cache/fusejit-py/jax
            ~/.cache/fusejit-py/jax/bin/pip install jax      # CPU wheels
  halide  Debian's python3-halide under /usr/bin/python3
          (scripts/install-deps.sh installs it; or apt-get install python3-halide)

Example: bench/peers/run.py --only gelu,softmax,layer_norm,mlp
"""
import argparse
import gc
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
THREADS = int(os.environ.get("PEER_THREADS", "2"))
for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "HL_NUM_THREADS"):
    os.environ.setdefault(_v, str(THREADS))

N, D = 8192, 4096
SIZES = {
    "gelu": "[8192,4096] f32", "silu": "[8192,4096] f32", "chain": "[8192,4096] f32",
    "layer_norm": "[8192,4096] f32", "rms_norm": "[8192,4096] f32", "softmax": "[8192,4096] f32",
    "log_softmax": "[8192,4096] f32", "ln_residual_f16": "[8192,4096] f16",
    "cross_entropy": "[1024,32000] f32", "mlp": "[512,512] h2048 f32", "attention": "8x[512,64] f32",
    "mlp_wide": "[1024,768] h3072 f32, exact gelu",
}
# graphs of bench/peers/ rather than bench/graphs/ (no one-thread aten reference)
PEER_GRAPHS = ("mlp_wide",)
ORDER = list(SIZES)
PEERS = ["torch eager", "torch.compile", "jax.jit", "halide"]
REUSE_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736:glibc.malloc.arena_max=1"


class Skip(Exception):
    """A peer that does not have this graph or pass."""


# ---- timing: fusejit-run --bench's rule, shared by every peer ----

def median_ms(step, sync=lambda r: r, reps=0):
    """Median wall time of step() in ms: warm-up (up to 3 runs or 200 ms),
    then reps timed runs (0: as many as fit in about 0.5 s, 5 to 1000)."""
    t0 = time.perf_counter()
    warm = 0
    while True:
        sync(step())
        warm += 1
        if warm >= 3 or time.perf_counter() - t0 >= 0.2:
            break
    if reps <= 0:
        one = (time.perf_counter() - t0) * 1e3 / warm
        reps = min(1000, max(5, int(500.0 / one) if one > 0 else 1000))
    ts = []
    for _ in range(reps):
        a = time.perf_counter()
        sync(step())
        ts.append((time.perf_counter() - a) * 1e3)
    return statistics.median(ts), reps


def serve(build):
    """A peer worker: reads one JSON request a line on stdin ({"peer", "graph",
    "pass", "reps"}), answers one JSON line ({"ms", "reps"} or {"skip"}).
    build(peer, graph, pass) returns (step, sync) or raises Skip; the steps
    are kept for later rounds. Library chatter goes to stderr."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    steps = {}
    proto.write(json.dumps({"ready": True}) + "\n")
    proto.flush()
    for line in sys.stdin:
        req = json.loads(line)
        key = (req["peer"], req["graph"], req["pass"])
        if any(k[1] != key[1] for k in steps):  # a new graph: steps hold one graph's, free them
            steps.clear()
            gc.collect()
        try:
            if key not in steps:
                steps[key] = build(*key)
            if isinstance(steps[key], str):
                raise Skip(steps[key])
            ms, reps = median_ms(*steps[key], reps=req.get("reps", 0))
            ans = {"ms": ms, "reps": reps}
        except Skip as e:
            ans = {"skip": str(e)}
        except Exception as e:  # e.g. inductor without a C++ compiler
            steps[key] = "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:100])
            ans = {"skip": steps[key]}
        proto.write(json.dumps(ans) + "\n")
        proto.flush()


# ---- PyTorch worker (torch eager, torch.compile) ----

def torch_worker():
    import torch
    F = torch.nn.functional
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)

    def mk(shape, dtype=torch.float32):
        return (torch.rand(shape, dtype=torch.float32) * 2 - 1).to(dtype)

    def case(name):
        """(fn, inputs): the graph of bench/graphs/NAME.fj."""
        if name in ("gelu", "silu", "chain", "softmax", "log_softmax"):
            fn = {"gelu": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
                  "chain": lambda x: torch.sin((torch.sigmoid(torch.log1p(torch.exp(torch.tanh(x * 2 + 1) * x)))
                                                - 0.5) * x),
                  "softmax": lambda x: torch.softmax(x, 1), "log_softmax": lambda x: torch.log_softmax(x, 1)}[name]
            return fn, [mk((N, D))]
        if name == "layer_norm":
            return (lambda x, w, b: F.layer_norm(x, (D,), w, b, 1e-5)), [mk((N, D)), mk((D,)), mk((D,))]
        if name == "rms_norm":
            return (lambda x, w: F.rms_norm(x, (D,), w, 1e-6)), [mk((N, D)), mk((D,))]
        if name == "ln_residual_f16":
            h = torch.float16
            return ((lambda x, bias, res, w, b: F.layer_norm(x + bias + res, (D,), w, b, 1e-5)),
                    [mk((N, D), h), mk((D,), h), mk((N, D), h), mk((D,), h), mk((D,), h)])
        if name == "cross_entropy":
            return (lambda x, t: F.cross_entropy(x, t)), [mk((1024, 32000)), torch.randint(0, 32000, (1024,))]
        if name == "mlp":
            return ((lambda x, lw, lb, w1, b1, w2, b2:
                     F.linear(F.gelu(F.linear(F.layer_norm(x, (512,), lw, lb, 1e-5), w1, b1), approximate="tanh"),
                              w2, b2) + x),
                    [mk((512, 512)), mk((512,)), mk((512,)), mk((2048, 512)), mk((2048,)), mk((512, 2048)),
                     mk((512,))])
        if name == "mlp_wide":
            return ((lambda x, lw, lb, w1, b1, w2, b2:
                     F.linear(F.gelu(F.linear(F.layer_norm(x, (768,), lw, lb, 1e-5), w1, b1)), w2, b2) + x),
                    [mk((1024, 768)), mk((768,)), mk((768,)), mk((3072, 768)), mk((3072,)), mk((768, 3072)),
                     mk((768,))])
        if name == "attention":
            return ((lambda q, k, v: torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)) / 8.0, -1), v)),
                    [mk((8, 512, 64)) for _ in range(3)])
        raise Skip("no such graph")

    def build(peer, name, ps):
        fn, args = case(name)
        if peer == "torch.compile":
            fn = torch.compile(fn, dynamic=False)
        elif peer != "torch eager":
            raise Skip("not a torch peer")
        if ps == "fwd":
            def fwd():
                with torch.no_grad():
                    return fn(*args)
            return fwd, lambda r: r
        diff = [a.requires_grad_(True) for a in args if a.is_floating_point()]
        with torch.no_grad():
            y = fn(*args)
        tangent = mk(y.shape, y.dtype)  # an input of the step: nothing to fold

        def train():  # forward outputs + the gradient of every float input
            y = fn(*args)
            return y, torch.autograd.grad(y, diff, tangent)
        return train, lambda r: r

    serve(build)


# ---- JAX worker ----

def jax_worker():
    import jax
    import jax.numpy as jnp
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 4096))  # every input of every graph and pass

    def mk(shape, dtype=jnp.float32):
        return jax.random.uniform(next(keys), shape, jnp.float32, -1, 1).astype(dtype)

    def ln(x, w, b, eps=1e-5):
        xf = x.astype(jnp.float32)
        m = xf.mean(-1, keepdims=True)
        v = ((xf - m) ** 2).mean(-1, keepdims=True)
        return ((xf - m) * jax.lax.rsqrt(v + eps) * w + b).astype(x.dtype)

    gelu = lambda x: jax.nn.gelu(x, approximate=True)

    def case(name):
        if name in ("gelu", "silu", "chain", "softmax", "log_softmax"):
            fn = {"gelu": gelu, "silu": jax.nn.silu,
                  "chain": lambda x: jnp.sin((jax.nn.sigmoid(jnp.log1p(jnp.exp(jnp.tanh(x * 2 + 1) * x))) - 0.5) * x),
                  "softmax": lambda x: jax.nn.softmax(x, axis=1),
                  "log_softmax": lambda x: jax.nn.log_softmax(x, axis=1)}[name]
            return fn, [mk((N, D))]
        if name == "layer_norm":
            return ln, [mk((N, D)), mk((D,)), mk((D,))]
        if name == "rms_norm":
            return (lambda x, w: x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w), [mk((N, D)), mk((D,))]
        if name == "ln_residual_f16":
            h = jnp.float16
            return ((lambda x, bias, res, w, b: ln(x + bias + res, w, b)),
                    [mk((N, D), h), mk((D,), h), mk((N, D), h), mk((D,), h), mk((D,), h)])
        if name == "cross_entropy":
            return ((lambda x, t: -jnp.take_along_axis(jax.nn.log_softmax(x, -1), t[:, None], 1).mean()),
                    [mk((1024, 32000)), jax.random.randint(next(keys), (1024,), 0, 32000)])
        if name == "mlp":
            return ((lambda x, lw, lb, w1, b1, w2, b2: gelu(ln(x, lw, lb) @ w1.T + b1) @ w2.T + b2 + x),
                    [mk((512, 512)), mk((512,)), mk((512,)), mk((2048, 512)), mk((2048,)), mk((512, 2048)),
                     mk((512,))])
        if name == "mlp_wide":
            return ((lambda x, lw, lb, w1, b1, w2, b2:
                     jax.nn.gelu(ln(x, lw, lb) @ w1.T + b1, approximate=False) @ w2.T + b2 + x),
                    [mk((1024, 768)), mk((768,)), mk((768,)), mk((3072, 768)), mk((3072,)), mk((768, 3072)),
                     mk((768,))])
        if name == "attention":
            return ((lambda q, k, v: jax.nn.softmax(q @ k.transpose(0, 2, 1) / 8.0, -1) @ v),
                    [mk((8, 512, 64)) for _ in range(3)])
        raise Skip("no such graph")

    def build(peer, name, ps):
        if peer != "jax.jit":
            raise Skip("not a jax peer")
        fn, args = case(name)
        sync = jax.block_until_ready
        if ps == "fwd":
            jf = jax.jit(fn)
            return (lambda: jf(*args)), sync
        di = [i for i, a in enumerate(args) if jnp.issubdtype(a.dtype, jnp.floating)]

        def fb(args, tangent):  # forward outputs + the gradient of every float input
            def g(*d):
                full = list(args)
                for i, v in zip(di, d):
                    full[i] = v
                return fn(*full)
            y, vjp = jax.vjp(g, *[args[i] for i in di])
            return y, vjp(tangent)
        y = jax.eval_shape(fn, *args)
        tangent = mk(y.shape, y.dtype)  # an input of the jitted function: nothing to fold
        jfb = jax.jit(fb)
        return (lambda: jfb(args, tangent)), sync

    serve(build)


# ---- the orchestrator ----

def exit_text(rc):
    """A worker's exit status in words; SIGKILL is most often the OOM killer."""
    if rc is not None and rc < 0:
        return "killed by signal %d%s" % (-rc, ", the OOM killer? see dmesg" if rc == -9 else "")
    return "exit %s" % rc


def last_error(err):
    """The last line of a worker's stderr that is not a library warning."""
    lines = [l for l in err.strip().splitlines() if l.strip() and not re.match(r"\s*[IW]\d{4} ", l) and
             "Warning" not in l and "warn(" not in l]  # glog's I/W lines (torch), Python's warnings
    return lines[-1][:160] if lines else "no message"


class Worker:
    """A long-lived peer process speaking serve()'s protocol."""

    def __init__(self, what, cmd):
        self.what, self.why = what, None
        try:
            self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
            line = self.p.stdout.readline()
            if not line:
                self.why = "%s: %s" % (exit_text(self.p.wait()), last_error(self.p.stderr.read()))
        except OSError as e:
            self.why = str(e)

    def ask(self, peer, graph, ps, reps):
        if self.why:
            return {"skip": self.why}
        try:
            self.p.stdin.write(json.dumps({"peer": peer, "graph": graph, "pass": ps, "reps": reps}) + "\n")
            self.p.stdin.flush()
            line = self.p.stdout.readline()
        except OSError:  # it died between two questions (the kernel's OOM killer: see dmesg)
            line = ""
        if not line:
            self.why = "%s worker died (%s): %s" % (self.what, exit_text(self.p.wait()),
                                                     last_error(self.p.stderr.read()))
            return {"skip": self.why}
        return json.loads(line)

    def close(self):
        if not self.why:
            try:
                self.p.stdin.close()
            except OSError:
                pass
            self.p.wait()
            self.why = "closed"


def find_python(opt, env, venv_glob):
    if opt:
        return opt
    if os.environ.get(env):
        return os.environ[env]
    home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    cands = sorted(glob.glob(os.path.join(home, "fusejit-py", venv_glob, "bin", "python")))
    return cands[-1] if cands else sys.executable


def find_fusejit_run(build):
    cands = [build] if build else []
    cands += [os.environ.get("FUSEJIT_BUILD")] + [os.path.join(ROOT, d) for d in ("build", "build-perf")]
    for c in cands:
        if c and os.access(os.path.join(c, "fusejit-run"), os.X_OK):
            return os.path.join(os.path.abspath(c), "fusejit-run")
    sys.exit("bench/peers/run.py: no fusejit-run found (give --build DIR)")


def run_fusejit(exe, name, ps, reps, cache):
    cmd = [exe, os.path.join(ROOT, "bench", "peers" if name in PEER_GRAPHS else "graphs", name + ".fj"), "--executor=host", "--bench", "--json"]
    if ps == "train":
        cmd.append("--train")
    env = dict(os.environ, FUSEJIT_THREADS=str(THREADS), FUSEJIT_CACHE_DIR=cache)
    if reps:
        env["FUSEJIT_BENCH_REPS"] = str(reps)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return {"skip": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:120]}
    b = json.loads(p.stdout.strip().splitlines()[-1])["bench"]
    return {"ms": b["median_ms"], "bytes": b["bytes"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated graph names (default: all)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--reps", type=int, default=0, help="exactly N timed runs per median (default: ~0.5 s)")
    ap.add_argument("--no-train", action="store_true", help="forward only")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated, from: " + ", ".join(PEERS))
    ap.add_argument("--no-compile-train", action="store_true", help="no torch.compile training (slow to compile)")
    ap.add_argument("--build", help="build directory holding fusejit-run (default: build, build-perf)")
    ap.add_argument("--torch-python", help="interpreter with PyTorch 2.x")
    ap.add_argument("--jax-python", help="interpreter with JAX")
    ap.add_argument("--malloc", choices=["reuse", "default"], default="reuse",
                    help="reuse: glibc keeps freed blocks (REUSE_MALLOC); default: glibc's defaults")
    ap.add_argument("--json", metavar="FILE", help="also write every round's numbers as JSON")
    args = ap.parse_args()
    names = [n for n in ORDER if not args.only or n in args.only.split(",")]
    passes = ["fwd"] if args.no_train else ["fwd", "train"]
    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        if p not in PEERS:
            sys.exit("unknown peer %r (have: %s)" % (p, ", ".join(PEERS)))
    if THREADS < os.cpu_count():  # every process (fusejit and peers) on the same THREADS CPUs
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:THREADS])
    exe = find_fusejit_run(args.build)
    if args.malloc == "reuse":  # inherited by fusejit-run and every worker
        os.environ["GLIBC_TUNABLES"] = ":".join(filter(None, [os.environ.get("GLIBC_TUNABLES"), REUSE_MALLOC]))

    me = os.path.abspath(__file__)
    workers = {}
    if {"torch eager", "torch.compile"} & set(peers):
        workers["torch"] = Worker("torch", [find_python(args.torch_python, "FJ_TORCH_PYTHON", "torch-*"), me,
                                            "--worker", "torch"])
    if "jax.jit" in peers:
        workers["jax"] = Worker("jax", [find_python(args.jax_python, "FJ_JAX_PYTHON", "jax"), me, "--worker", "jax"])
    if "halide" in peers:
        workers["halide"] = Worker("halide", ["/usr/bin/python3", os.path.join(HERE, "halide_peer.py")])
    owner = {"torch eager": "torch", "torch.compile": "torch", "jax.jit": "jax", "halide": "halide"}
    for w in workers.values():
        if w.why:
            print("%s: skipped (%s)" % (w.what, w.why))

    cpu = "?"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print("peers: %s, %d threads, %d rounds, malloc %s, %s" % (cpu, THREADS, args.rounds, args.malloc, exe))
    load = [os.getloadavg()[0]]
    cache = tempfile.mkdtemp(prefix="fj-peers-cache.")
    ms = {}       # (graph, pass, system) -> [median per round]
    nbytes = {}   # (graph, pass) -> fusejit's byte count
    notes = {}    # (graph, pass, system) -> why skipped
    t_start = time.time()
    try:
        for name in names:
            for r in range(args.rounds):
                for ps in passes:
                    systems = ["fusejit"] + [p for p in peers if not (ps == "train" and p == "torch.compile"
                                                                     and args.no_compile_train)]
                    if r % 2:
                        systems.reverse()
                    for s in systems:
                        if (name, ps, s) in notes:
                            continue
                        if s == "fusejit":
                            ans = run_fusejit(exe, name, ps, args.reps, cache)
                            if "bytes" in ans:
                                nbytes[(name, ps)] = ans["bytes"]
                        else:
                            ans = workers[owner[s]].ask(s, name, ps, args.reps)
                        if "ms" in ans:
                            ms.setdefault((name, ps, s), []).append(ans["ms"])
                        else:
                            notes[(name, ps, s)] = ans.get("skip", "?")
                        time.sleep(0.1)  # let the last system's spinning threads go idle
            print("%s done, %.0f s" % (name, time.time() - t_start))
            sys.stdout.flush()
    finally:
        for w in workers.values():
            w.close()
        shutil.rmtree(cache, ignore_errors=True)

    shown = [p for p in peers if any((n, ps, p) in ms for n in names for ps in passes)]
    print()
    print("ms: best median over %d rounds; noise: fusejit's max/min - 1 over its rounds; "
          "fj/best < 1: fusejit faster" % args.rounds)
    hdr = "%-16s %-5s %9s %6s %6s " % ("graph", "pass", "fusejit", "noise", "GB/s") + \
        "".join("%14s" % p for p in shown) + "  %-14s %7s" % ("best peer", "fj/best")
    print(hdr)
    print("-" * len(hdr))
    for name in names:
        for ps in passes:
            fj = ms.get((name, ps, "fusejit"))
            best = min(((min(ms[(name, ps, p)]), p) for p in shown if (name, ps, p) in ms), default=None)
            if not fj and not best:
                continue
            row = "%-16s %-5s " % (name, ps)
            if fj:
                gb = nbytes.get((name, ps))
                row += "%9.3f %5.1f%% %6s " % (min(fj), (max(fj) / min(fj) - 1) * 100,
                                               "%.1f" % (gb / min(fj) / 1e6) if gb else "-")
            else:
                row += "%9s %6s %6s " % ("-", "", "")
            row += "".join("%14s" % ("%.3f" % min(ms[(name, ps, p)]) if (name, ps, p) in ms else "-") for p in shown)
            if best:
                row += "  %-14s %7s" % (best[1], "%.2f" % (min(fj) / best[0]) if fj else "-")
            print(row)
    if notes:
        print("\nnot measured:")
        for (name, ps, s), why in sorted(notes.items()):
            done = len(ms.get((name, ps, s), []))
            print("  %-16s %-5s %-14s %s%s" % (name, ps, s, "after %d of %d rounds: " % (done, args.rounds)
                                                if done else "", why))
    load.append(os.getloadavg()[0])
    print("total %.0f s; load average %.1f at the start, %.1f at the end%s" % (
        time.time() - t_start, load[0], load[1],
        " (other work shared the CPUs: trust the ratios more than the times)" if max(load) > THREADS + 0.5 else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "threads": THREADS, "rounds": args.rounds, "malloc": args.malloc, "load": load,
                       "records": [{"graph": n, "pass": ps, "system": s, "round_ms": v, "bytes": nbytes.get((n, ps))}
                                   for (n, ps, s), v in ms.items()],
                       "skipped": [{"graph": n, "pass": ps, "system": s, "why": w}
                                   for (n, ps, s), w in notes.items()]}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        {"torch": torch_worker, "jax": jax_worker}[sys.argv[2]]()
    else:
        main()
