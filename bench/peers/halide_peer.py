#!/usr/bin/python3
"""halide_peer.py NAMES REPS THREADS: Halide JIT (Debian's python3-halide) versions of
the pointwise and row-normalization forwards of bench/graphs at [8192,4096] f32:
rows parallel, 16-lane vectors, each row's reductions computed at the row.
Prints "name median_ms" per function it has; exits 1 when Halide is missing."""
import os
import statistics
import sys
import time

names, reps, threads = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3]
os.environ["HL_NUM_THREADS"] = threads
import halide as hl  # noqa: E402

N, D = 8192, 4096
x, y = hl.Var("x"), hl.Var("y")


def f32(v):
    return hl.f32(v)


def inbuf(seed):
    b = hl.Buffer(hl.Float(32), [D, N])
    g = hl.Func("gen%d" % seed)
    g[x, y] = hl.sin(hl.cast(hl.Float(32), x * 7 + y * 13 + seed))  # in [-1, 1]
    g.parallel(y).vectorize(x, 16)
    g.realize(b)
    return b


def pointwise(fn):
    b = inbuf(1)
    out = hl.Func("out")
    out[x, y] = fn(b[x, y])
    out.parallel(y).vectorize(x, 16)
    return out, [D, N]


def gelu(v):
    return f32(0.5) * v * (f32(1) + hl.tanh(f32(0.7978845608028654) * (v + f32(0.044715) * v * v * v)))


def silu(v):
    return v / (f32(1) + hl.exp(-v))


def sigmoid(v):
    return f32(1) / (f32(1) + hl.exp(-v))


def chain(v):
    return hl.sin((sigmoid(hl.log(f32(1) + hl.exp(hl.tanh(v * f32(2) + f32(1)) * v))) - f32(0.5)) * v)


def rowwise(kind):
    b = inbuf(1)
    w, bias = hl.Buffer(hl.Float(32), [D]), hl.Buffer(hl.Float(32), [D])
    for buf in (w, bias):
        g = hl.Func()
        g[x] = f32(1)
        g.realize(buf)
    r = hl.RDom([hl.Range(0, D)])
    out = hl.Func("out")
    fs = []
    if kind == "softmax" or kind == "log_softmax":
        mx, e, s = hl.Func("mx"), hl.Func("e"), hl.Func("s")
        mx[y] = hl.maximum(b[r.x, y])
        e[x, y] = hl.exp(b[x, y] - mx[y])
        s[y] = hl.sum(e[r.x, y])
        if kind == "softmax":
            out[x, y] = e[x, y] / s[y]
        else:
            out[x, y] = b[x, y] - mx[y] - hl.log(s[y])
        fs = [mx, s]
        e.compute_at(out, y).vectorize(x, 16)
    elif kind == "layer_norm":
        s1, s2 = hl.Func("s1"), hl.Func("s2")
        s1[y] = hl.sum(b[r.x, y])
        mean = s1[y] / f32(D)
        s2[y] = hl.sum((b[r.x, y] - mean) * (b[r.x, y] - mean))
        out[x, y] = (b[x, y] - mean) / hl.sqrt(s2[y] / f32(D) + f32(1e-5)) * w[x] + bias[x]
        fs = [s1, s2]
    elif kind == "rms_norm":
        s2 = hl.Func("s2")
        s2[y] = hl.sum(b[r.x, y] * b[r.x, y])
        out[x, y] = b[x, y] / hl.sqrt(s2[y] / f32(D) + f32(1e-6)) * w[x]
        fs = [s2]
    out.parallel(y).vectorize(x, 16)
    for f in fs:
        f.compute_at(out, y)
    return out, [D, N]


BUILD = {
    "gelu": lambda: pointwise(gelu), "silu": lambda: pointwise(silu), "chain": lambda: pointwise(chain),
    "softmax": lambda: rowwise("softmax"), "log_softmax": lambda: rowwise("log_softmax"),
    "layer_norm": lambda: rowwise("layer_norm"), "rms_norm": lambda: rowwise("rms_norm"),
}

for name in names:
    if name not in BUILD:
        continue
    out, shape = BUILD[name]()
    t = hl.get_jit_target_from_environment()
    out.compile_jit(t)
    ob = hl.Buffer(hl.Float(32), shape)
    out.realize(ob)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out.realize(ob)
        ts.append((time.perf_counter() - t0) * 1e3)
    print(name, "%.4f" % statistics.median(ts))
    sys.stdout.flush()
