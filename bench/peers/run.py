#!/usr/bin/env python3
"""bench/peers/run.py [--fusejit FILE.json] [--only NAME,...] [--no-train] [--no-compile] [--reps N]

Runs the functions of bench/graphs/*.fj in the peers, at the same sizes, on
this machine with 2 threads (PEER_THREADS), and prints them beside fusejit's
numbers read from `bench/run --json FILE` (--fusejit FILE):
  torch eager       PyTorch eager (forward; fwd+bwd with --train rows)
  torch.compile     torch.compile(fn) (inductor, CPU; forward only unless
                    --compile-train: compiling takes ~10 s per function)
  jax.jit           JAX jit (forward; fwd+bwd through jax.vjp)
  halide            Halide JIT (Debian's python3-halide, run by /usr/bin/python3
                    bench/peers/halide_peer.py): pointwise and row-normalization
                    forwards, rows parallel, 16-lane vectors
Each peer that is not installed is skipped with a note. Times: median of
--reps runs after warm-up, inputs preallocated; GB/s with fusejit's byte count
(every input read once + every output written once) for the same graph.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
THREADS = int(os.environ.get("PEER_THREADS", "2"))
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")

N, D = 8192, 4096
SIZES = {
    "gelu": "[8192,4096] f32", "silu": "[8192,4096] f32", "chain": "[8192,4096] f32",
    "layer_norm": "[8192,4096] f32", "rms_norm": "[8192,4096] f32", "softmax": "[8192,4096] f32",
    "log_softmax": "[8192,4096] f32", "ln_residual_f16": "[8192,4096] f16",
    "cross_entropy": "[1024,32000] f32", "mlp": "[512,512] h2048 f32", "attention": "8x[512,64] f32",
}
ORDER = list(SIZES)


def timeit(fn, reps, sync=lambda r: r):
    sync(fn())
    sync(fn())
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        sync(fn())
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


# ---- PyTorch ----

def torch_fns(torch):
    F = torch.nn.functional

    def mk(shape, dtype=torch.float32, grad=False):
        return (torch.rand(shape, dtype=torch.float32) * 2 - 1).to(dtype).requires_grad_(grad)

    def cases(grad):
        c = {}
        x = mk((N, D), grad=grad)
        c["gelu"] = (lambda x: F.gelu(x, approximate="tanh"), [x])
        c["silu"] = (F.silu, [x])
        c["chain"] = (lambda x: torch.sin((torch.sigmoid(torch.log1p(torch.exp(torch.tanh(x * 2 + 1) * x))) - 0.5) * x), [x])
        w, b = mk((D,), grad=grad), mk((D,), grad=grad)
        c["layer_norm"] = (lambda x, w, b: F.layer_norm(x, (D,), w, b, 1e-5), [x, w, b])
        c["rms_norm"] = (lambda x, w: F.rms_norm(x, (D,), w, 1e-6), [x, w])
        c["softmax"] = (lambda x: torch.softmax(x, 1), [x])
        c["log_softmax"] = (lambda x: torch.log_softmax(x, 1), [x])
        h = [mk((N, D), torch.float16, grad), mk((D,), torch.float16, grad), mk((N, D), torch.float16, grad),
             mk((D,), torch.float16, grad), mk((D,), torch.float16, grad)]
        c["ln_residual_f16"] = (lambda x, bias, res, w, b: F.layer_norm(x + bias + res, (D,), w, b, 1e-5), h)
        lg = mk((1024, 32000), grad=grad)
        t = torch.randint(0, 32000, (1024,))
        c["cross_entropy"] = (lambda x: F.cross_entropy(x, t), [lg])
        m = [mk((512, 512), grad=grad), mk((512,), grad=grad), mk((512,), grad=grad), mk((2048, 512), grad=grad),
             mk((2048,), grad=grad), mk((512, 2048), grad=grad), mk((512,), grad=grad)]
        c["mlp"] = (lambda x, lw, lb, w1, b1, w2, b2: F.linear(F.gelu(F.linear(F.layer_norm(x, (512,), lw, lb, 1e-5), w1, b1),
                                                                       approximate="tanh"), w2, b2) + x, m)
        q, k, v = (mk((8, 512, 64), grad=grad) for _ in range(3))
        c["attention"] = (lambda q, k, v: torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)) / 8.0, -1), v), [q, k, v])
        return c

    return cases


def run_torch(names, reps, train, compile_, compile_train, out):
    try:
        import torch
    except ImportError as e:
        print("torch: skipped (%s)" % e)
        return
    torch.set_num_threads(THREADS)
    cases = torch_fns(torch)
    with torch.no_grad():
        fw = cases(False)
        for n in names:
            f, args = fw[n]
            out[(n, "fwd", "torch eager")] = timeit(lambda: f(*args), reps)
            if compile_:
                try:
                    cf = torch.compile(f)
                    t0 = time.perf_counter()
                    cf(*args)
                    out[(n, "fwd", "torch.compile")] = timeit(lambda: cf(*args), reps)
                    out[(n, "fwd", "torch.compile cold_ms")] = (time.perf_counter() - t0) * 1e3
                except Exception as e:  # inductor needs a C++ compiler
                    print("torch.compile %s: skipped (%s)" % (n, str(e).splitlines()[0][:100]))
                    compile_ = False
        del fw
    if train:
        tr = cases(True)
        for n in names:
            f, args = tr[n]

            def step(f=f, args=args):
                y = f(*args)
                torch.autograd.grad(y, [a for a in args if a.requires_grad], torch.ones_like(y))
            out[(n, "train", "torch eager")] = timeit(step, max(3, reps // 2))
            if compile_ and compile_train:
                cf = torch.compile(f)

                def cstep(cf=cf, args=args):
                    y = cf(*args)
                    torch.autograd.grad(y, [a for a in args if a.requires_grad], torch.ones_like(y))
                try:
                    out[(n, "train", "torch.compile")] = timeit(cstep, max(3, reps // 2))
                except Exception as e:
                    print("torch.compile train %s: skipped (%s)" % (n, str(e).splitlines()[0][:100]))


# ---- JAX ----

def run_jax(names, reps, train, out):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        print("jax: skipped (%s)" % e)
        return
    key = jax.random.PRNGKey(0)

    def mk(shape, dtype=jnp.float32):
        return (jax.random.uniform(key, shape, jnp.float32, -1, 1)).astype(dtype)

    def ln(x, w, b, eps=1e-5):
        xf = x.astype(jnp.float32)
        m = xf.mean(-1, keepdims=True)
        v = ((xf - m) ** 2).mean(-1, keepdims=True)
        return ((xf - m) * jax.lax.rsqrt(v + eps) * w + b).astype(x.dtype)

    gelu = lambda x: jax.nn.gelu(x, approximate=True)
    x = mk((N, D))
    w, b = mk((D,)), mk((D,))
    c = {
        "gelu": (gelu, [x]),
        "silu": (jax.nn.silu, [x]),
        "chain": (lambda x: jnp.sin((jax.nn.sigmoid(jnp.log1p(jnp.exp(jnp.tanh(x * 2 + 1) * x))) - 0.5) * x), [x]),
        "layer_norm": (ln, [x, w, b]),
        "rms_norm": (lambda x, w: x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w, [x, w]),
        "softmax": (lambda x: jax.nn.softmax(x, axis=1), [x]),
        "log_softmax": (lambda x: jax.nn.log_softmax(x, axis=1), [x]),
        "ln_residual_f16": (lambda x, bias, res, w, b: ln(x + bias + res, w, b),
                            [mk((N, D), jnp.float16), mk((D,), jnp.float16), mk((N, D), jnp.float16),
                             mk((D,), jnp.float16), mk((D,), jnp.float16)]),
    }
    lg = mk((1024, 32000))
    t = jax.random.randint(key, (1024,), 0, 32000)
    c["cross_entropy"] = (lambda x: -jnp.take_along_axis(jax.nn.log_softmax(x, -1), t[:, None], 1).mean(), [lg])
    c["mlp"] = (lambda x, lw, lb, w1, b1, w2, b2: gelu(ln(x, lw, lb) @ w1.T + b1) @ w2.T + b2 + x,
                [mk((512, 512)), mk((512,)), mk((512,)), mk((2048, 512)), mk((2048,)), mk((512, 2048)), mk((512,))])
    c["attention"] = (lambda q, k, v: jax.nn.softmax(q @ k.transpose(0, 2, 1) / 8.0, -1) @ v,
                      [mk((8, 512, 64)), mk((8, 512, 64)), mk((8, 512, 64))])
    sync = lambda r: jax.block_until_ready(r)
    for n in names:
        f, args = c[n]
        jf = jax.jit(f)
        out[(n, "fwd", "jax.jit")] = timeit(lambda: jf(*args), reps, sync)
        if train:
            def fb(*a, f=f):
                y, vjp = jax.vjp(f, *a)
                return vjp(jnp.ones_like(y))
            jfb = jax.jit(fb)
            out[(n, "train", "jax.jit")] = timeit(lambda: jfb(*args), max(3, reps // 2), sync)


# ---- Halide (a separate interpreter: Debian's python3-halide) ----

def run_halide(names, reps, out):
    script = os.path.join(HERE, "halide_peer.py")
    try:
        p = subprocess.run(["/usr/bin/python3", script, ",".join(names), str(reps), str(THREADS)],
                           capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        print("halide: skipped (%s)" % e)
        return
    if p.returncode != 0:
        print("halide: skipped (%s)" % ((p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:100]))
        return
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[(parts[0], "fwd", "halide")] = float(parts[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fusejit", metavar="FILE", help="bench/run --json output")
    ap.add_argument("--only", help="comma-separated graph names")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--compile-train", action="store_true", help="also torch.compile fwd+bwd")
    ap.add_argument("--peers", default="torch,jax,halide")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    names = [n for n in ORDER if not args.only or n in args.only.split(",")]
    peers = args.peers.split(",")
    out = {}
    fj = {}
    if args.fusejit:
        try:
            with open(args.fusejit) as f:
                for r in json.load(f)["records"]:
                    if r.get("status") == "ok":
                        fj[(r["graph"], "fwd" if r["pass"] == "fwd" else "train", r["executor"])] = r
        except (OSError, ValueError, KeyError) as e:
            print("fusejit numbers: not read (%s)" % e)
    t0 = time.time()
    if "torch" in peers:
        run_torch(names, args.reps, not args.no_train, not args.no_compile, args.compile_train, out)
    if "jax" in peers:
        run_jax(names, args.reps, not args.no_train, out)
    if "halide" in peers:
        run_halide(names, args.reps, out)
    cols = ["fusejit host", "fusejit aten", "torch eager", "torch.compile", "jax.jit", "halide"]
    print("peers, %d threads (ms, median; GB/s with fusejit's bytes in brackets)" % THREADS)
    print("%-16s %-5s " % ("graph", "pass") + " ".join("%18s" % c for c in cols))
    for n in names:
        for ps in ("fwd", "train"):
            cells, any_ = [], False
            ref = fj.get((n, ps, "host"))
            nbytes = ref["bytes"] if ref else None
            for c in cols:
                if c.startswith("fusejit"):
                    r = fj.get((n, ps, c.split()[1]))
                    ms = r["median_ms"] if r else None
                else:
                    ms = out.get((n, ps, c))
                if ms is None:
                    cells.append("%18s" % "-")
                    continue
                any_ = any_ or not c.startswith("fusejit")
                gb = " (%5.1f)" % (nbytes / ms / 1e6) if nbytes else ""
                cells.append("%18s" % ("%.2f%s" % (ms, gb)))
            if any_ or (ref and ps == "fwd"):
                print("%-16s %-5s " % (n, ps) + " ".join(cells))
    print("peers: %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
