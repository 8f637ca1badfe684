#!/usr/bin/python3
"""halide_peer.py: the Halide peer of bench/peers/run.py, a worker speaking its
protocol (run.serve: one JSON request a line on stdin, one answer a line on
stdout). Halide JIT (Debian's python3-halide: apt-get install python3-halide,
or scripts/install-deps.sh) versions of the pointwise and row-normalization
forwards of bench/graphs at [8192,4096] f32: rows parallel, 16-lane vectors,
each row's reductions computed at the row, into a preallocated output. No
training (the other graphs and every train pass answer "skip"). Threads:
HL_NUM_THREADS (run.py sets it to PEER_THREADS)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import Skip, serve  # noqa: E402  (sets HL_NUM_THREADS first)
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


def tanh(v):
    # Halide 14's hl.tanh does not vectorize (~30x slower on gelu): exp does
    return f32(1) - f32(2) / (hl.exp(f32(2) * v) + f32(1))


def gelu(v):
    return f32(0.5) * v * (f32(1) + tanh(f32(0.7978845608028654) * (v + f32(0.044715) * v * v * v)))


def silu(v):
    return v / (f32(1) + hl.exp(-v))


def sigmoid(v):
    return f32(1) / (f32(1) + hl.exp(-v))


def chain(v):
    return hl.sin((sigmoid(hl.log(f32(1) + hl.exp(tanh(v * f32(2) + f32(1)) * v))) - f32(0.5)) * v)


def rowwise(kind):
    b = inbuf(1)
    w, bias = hl.Buffer(hl.Float(32), [D]), hl.Buffer(hl.Float(32), [D])
    for seed, buf in ((2, w), (3, bias)):
        g = hl.Func("gen%d" % seed)
        g[x] = hl.sin(hl.cast(hl.Float(32), x * 7 + seed))  # in [-1, 1]
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


def build(peer, name, ps):
    if peer != "halide":
        raise Skip("not the halide peer")
    if ps != "fwd":
        raise Skip("no training in the Halide peer")
    if name not in BUILD:
        raise Skip("no Halide version of %s" % name)
    out, shape = BUILD[name]()
    out.compile_jit(hl.get_jit_target_from_environment())
    ob = hl.Buffer(hl.Float(32), shape)
    return (lambda: out.realize(ob)), (lambda r: r)


if __name__ == "__main__":
    serve(build)
