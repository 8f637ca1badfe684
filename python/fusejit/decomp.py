"""ATen ops the bridge expresses in fusejit's op set (IR.md §3) by a few lines
of fusejit text each: views PyTorch 2.x emits that fusejit has no op for
(select, split, unbind ...), and scaled dot product attention, forward and
backward, in the math form (QK^T * scale, masks, softmax through logsumexp,
PV). Each rule takes the Converter, the FX node and its arguments bound by
their ATen schema names, sets conv.names[node] (a name, or a list for a
multi-output op) and returns the lines. A rule raises UnsupportedOp (with the
reason) for a case it does not cover; the node then stays in PyTorch."""
import math

import torch


class _Emit:
    def __init__(self, conv, n):
        self.conv, self.n, self.lines, self.k = conv, n, [], 0

    def tmp(self):
        self.k += 1
        return "%%%s.d%d" % (self.n.name, self.k)

    def op(self, op, operands, attrs=None, out=None):
        from .fx import fmt_attr
        out = out or self.tmp()
        a = ""
        if attrs:
            a = " {" + ", ".join("%s=%s" % (k, fmt_attr(v)) for k, v in attrs.items()) + "}"
        self.lines.append("%s = %s(%s)%s" % (out, op, ", ".join(operands), a))
        return out


def _shape(conv, v):
    from .fx import UnsupportedOp, node_type
    t = node_type(conv.gm, v) if isinstance(v, torch.fx.Node) else None
    if t is None:
        raise UnsupportedOp(["an operand of unknown shape"])
    return t


def _dim(d, rank):
    return d + rank if d < 0 else d


def select(conv, n, b):
    dt, shape = _shape(conv, b["self"])
    d = _dim(b["dim"], len(shape))
    i = b["index"]
    if not isinstance(i, int):
        from .fx import UnsupportedOp
        raise UnsupportedOp(["select at a symbolic index"])
    i = i + shape[d] if i < 0 else i
    e = _Emit(conv, n)
    s = e.op("aten.slice", [conv.operand(b["self"], "aten.select")], {"dim": d, "start": i, "end": i + 1})
    conv.names[n] = e.op("aten.squeeze", [s], {"dims": [d]}, out="%" + n.name)
    return e.lines


def select_backward(conv, n, b):
    sizes = list(b["input_sizes"])
    d = _dim(b["dim"], len(sizes))
    i = b["index"]
    i = i + sizes[d] if i < 0 else i
    g = conv.operand(b["grad_output"], "aten.select_backward")
    e = _Emit(conv, n)
    u = e.op("aten.unsqueeze", [g], {"dim": d})
    parts = []
    if i > 0:
        parts.append(e.op("aten.new_zeros", [g], {"shape": sizes[:d] + [i] + sizes[d + 1:]}))
    parts.append(u)
    if i < sizes[d] - 1:
        parts.append(e.op("aten.new_zeros", [g], {"shape": sizes[:d] + [sizes[d] - 1 - i] + sizes[d + 1:]}))
    conv.names[n] = e.op("aten.cat", parts, {"dim": d}, out="%" + n.name) if len(parts) > 1 else \
        e.op("aten.clone", [u], out="%" + n.name)
    return e.lines


def lift_fresh_copy(conv, n, b):
    e = _Emit(conv, n)
    conv.names[n] = e.op("aten.clone", [conv.operand(b["self"], "aten.lift_fresh_copy")], out="%" + n.name)
    return e.lines


def _pieces(conv, n, x, d, sizes):
    e = _Emit(conv, n)
    xs = conv.operand(x, "aten.split")
    outs, at = [], 0
    for k, s in enumerate(sizes):
        outs.append(e.op("aten.slice", [xs], {"dim": d, "start": at, "end": at + s}, out="%%%s.%d" % (n.name, k)))
        at += s
    conv.names[n] = outs
    return e.lines


def split(conv, n, b):
    dt, shape = _shape(conv, b["self"])
    d = _dim(b.get("dim", 0), len(shape))
    size = b["split_size"]
    if isinstance(size, (list, tuple)):
        return _pieces(conv, n, b["self"], d, list(size))
    total = shape[d]
    sizes = [min(size, total - at) for at in range(0, total, size)] if size > 0 else [total]
    return _pieces(conv, n, b["self"], d, sizes or [0])


def split_with_sizes(conv, n, b):
    dt, shape = _shape(conv, b["self"])
    return _pieces(conv, n, b["self"], _dim(b.get("dim", 0), len(shape)), list(b["split_sizes"]))


def unbind(conv, n, b):
    dt, shape = _shape(conv, b["self"])
    d = _dim(b.get("dim", 0), len(shape))
    xs = conv.operand(b["self"], "aten.unbind")
    e = _Emit(conv, n)
    outs = []
    for k in range(shape[d]):
        s = e.op("aten.slice", [xs], {"dim": d, "start": k, "end": k + 1})
        outs.append(e.op("aten.squeeze", [s], {"dims": [d]}, out="%%%s.%d" % (n.name, k)))
    conv.names[n] = outs
    return e.lines


def cat(conv, n, b):
    """PyTorch's cat skips legacy 1-D empty operands ([0]) beside others."""
    ts = list(b["tensors"])
    keep = [t for t in ts if _shape(conv, t)[1] != (0,)] or ts[:1]
    if len(keep) == len(ts):
        raise _Plain()
    e = _Emit(conv, n)
    d = _dim(b.get("dim", 0), len(_shape(conv, keep[0])[1]))
    ops = [conv.operand(t, "aten.cat") for t in keep]
    if len(ops) == 1:
        conv.names[n] = e.op("aten.clone", ops, out="%" + n.name)
    else:
        conv.names[n] = e.op("aten.cat", ops, {"dim": d}, out="%" + n.name)
    return e.lines


class _Plain(Exception):
    """The op converts as it is (no rule needed for this call)."""


def fmt_number(v):
    from .fx import fmt_number as f
    return f(float(v))


def _attention_scores(conv, e, b, q, k, L, S, E, scale):
    """scores = Q K^T * scale, masked (attn_mask: bool keeps / float adds;
    is_causal: top-left aligned lower triangle), in f32 or f64."""
    kt = e.op("aten.transpose", [k], {"dim0": -2, "dim1": -1})
    s = e.op("aten.matmul", [q, kt])
    s = e.op("aten.mul", [s, fmt_number(scale)])
    mask = b.get("attn_mask")
    if mask is not None:
        mt = _shape(conv, mask)[0]
        m = conv.operand(mask, "attention")
        s = e.op("aten.where", [m, s, "-inf"]) if mt == torch.bool else e.op("aten.add", [s, m])
    if b.get("is_causal"):
        rows = e.op("aten.arange", [], {"end": L, "dtype": torch.int64})
        cols = e.op("aten.arange", [], {"end": S, "dtype": torch.int64})
        r2 = e.op("aten.unsqueeze", [rows], {"dim": 1})
        keep = e.op("aten.le", [cols, r2])
        s = e.op("aten.where", [keep, s, "-inf"])
    return s


def _qkv(conv, b, what):
    from .fx import UnsupportedOp
    if b.get("dropout_p", 0.0):
        raise UnsupportedOp(["%s with dropout_p > 0" % what])
    qt, qs = _shape(conv, b["query"])
    kt_, ks = _shape(conv, b["key"])
    if qt not in (torch.float32, torch.float64) or len(qs) != 4 or len(ks) != 4:
        raise UnsupportedOp(["%s of %s rank-%d tensors (fusejit: f32/f64, rank 4)" % (what, qt, len(qs))])
    B, H, L, E = qs
    Hk, S = ks[1], ks[2]
    if H % Hk:
        raise UnsupportedOp(["%s with %d query heads over %d key heads" % (what, H, Hk)])
    scale = b.get("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    return qs, Hk, S, scale


def _expand_heads(e, x, B, Hk, G, S, E):
    """[B,Hk,S,E] -> [B,Hk*G,S,E], each key head repeated for its G query heads (GQA)."""
    if G == 1:
        return x
    u = e.op("aten.unsqueeze", [x], {"dim": 2})
    x = e.op("aten.expand", [u], {"size": [B, Hk, G, S, E]})
    return e.op("aten.reshape", [x], {"shape": [B, Hk * G, S, E]})


def _sum_heads(e, x, B, Hk, G, S, E, out):
    if G == 1:
        return e.op("aten.clone", [x], out=out)
    x = e.op("aten.reshape", [x], {"shape": [B, Hk, G, S, E]})
    return e.op("aten.sum", [x], {"dims": [2]}, out=out)


class _Attention:
    """One attention call's operands and sizes: q, k and v (k and v with each
    key head repeated for its G query heads), and the masked, scaled scores."""

    def __init__(self, conv, n, b, what):
        (self.B, H, self.L, self.E), self.Hk, self.S, self.scale = _qkv(conv, b, what)
        self.G = H // self.Hk
        self.e = e = _Emit(conv, n)
        dims = (self.B, self.Hk, self.G, self.S, self.E)
        self.q = conv.operand(b["query"], what)
        self.k = _expand_heads(e, conv.operand(b["key"], what), *dims)
        self.v = _expand_heads(e, conv.operand(b["value"], what), *dims)
        self.s = _attention_scores(conv, e, b, self.q, self.k, self.L, self.S, self.E, self.scale)


def sdpa_flash_cpu(conv, n, b):
    a = _Attention(conv, n, b, "attention")
    e, s, v = a.e, a.s, a.v
    lse = e.op("aten.logsumexp", [s], {"dims": [-1]}, out="%%%s.1" % n.name)
    l4 = e.op("aten.unsqueeze", [lse], {"dim": -1})
    p = e.op("aten.exp", [e.op("aten.sub", [s, l4])])
    out = e.op("aten.matmul", [p, v], out="%%%s.0" % n.name)
    conv.names[n] = [out, lse]
    return e.lines


def sdpa_flash_cpu_backward(conv, n, b):
    a = _Attention(conv, n, b, "attention backward")
    e, s, q, k, v, scale = a.e, a.s, a.q, a.k, a.v, a.scale
    B, Hk, G, S, E = a.B, a.Hk, a.G, a.S, a.E
    go = conv.operand(b["grad_out"], "attention")
    o = conv.operand(b["out"], "attention")
    lse = conv.operand(b["logsumexp"], "attention")
    p = e.op("aten.exp", [e.op("aten.sub", [s, e.op("aten.unsqueeze", [lse], {"dim": -1})])])
    pt = e.op("aten.transpose", [p], {"dim0": -2, "dim1": -1})
    dv = e.op("aten.matmul", [pt, go])
    vt = e.op("aten.transpose", [v], {"dim0": -2, "dim1": -1})
    dp = e.op("aten.matmul", [go, vt])
    dd = e.op("aten.sum", [e.op("aten.mul", [go, o])], {"dims": [-1], "keepdim": True})
    ds = e.op("aten.mul", [p, e.op("aten.sub", [dp, dd])])
    ds = e.op("aten.mul", [ds, fmt_number(scale)])
    dq = e.op("aten.matmul", [ds, k], out="%%%s.0" % n.name)
    dst = e.op("aten.transpose", [ds], {"dim0": -2, "dim1": -1})
    dk = _sum_heads(e, e.op("aten.matmul", [dst, q]), B, Hk, G, S, E, "%%%s.1" % n.name)
    dv = _sum_heads(e, dv, B, Hk, G, S, E, "%%%s.2" % n.name)
    conv.names[n] = [dq, dk, dv]
    return e.lines


def _filled(value):
    def rule(conv, n, b):
        from .fx import UnsupportedOp, meta_type
        t = meta_type(n)
        if t is None:
            raise UnsupportedOp(["a fill of unknown shape"])
        v = b.get("fill_value", value)
        if isinstance(v, torch.fx.Node):
            raise UnsupportedOp(["a fill with a tensor value"])
        e = _Emit(conv, n)
        conv.names[n] = e.op("aten.full", [], {"shape": list(t[1]), "value": v, "dtype": t[0]}, out="%" + n.name)
        return e.lines
    return rule


def native_dropout_backward(conv, n, b):
    g = conv.operand(b["grad_output"], "aten.native_dropout_backward")
    dt, _ = _shape(conv, b["grad_output"])
    e = _Emit(conv, n)
    m = e.op("aten._to_copy", [conv.operand(b["mask"], "aten.native_dropout_backward")], {"dtype": dt})
    conv.names[n] = e.op("aten.mul", [e.op("aten.mul", [g, m]), fmt_number(b["scale"])], out="%" + n.name)
    return e.lines


# ---- dropout with fusejit's Philox stream ----

def dropout_with_seed(x, p, train, seed):
    """native_dropout whose mask fusejit draws from Philox keyed by `seed` (an i64
    tensor PyTorch's generator drew, so torch.manual_seed makes runs repeat); this
    eager form, run when the node stays in PyTorch, draws from PyTorch's own RNG."""
    return torch.ops.aten.native_dropout.default(x, p, train)


dropout_with_seed.fusejit_op = "aten.native_dropout"


def seed_dropouts(gm):
    """Gives every train-mode aten.native_dropout of gm a seed drawn by PyTorch's
    generator at each call (aten.randint, which stays in PyTorch), so that fusejit
    can run the dropout itself (IR.md: native_dropout(x, seed, offset))."""
    g = gm.graph
    changed = False
    for n in list(g.nodes):
        if n.op != "call_function" or n.target is not torch.ops.aten.native_dropout.default:
            continue
        args = list(n.args) + [None] * (3 - len(n.args))
        x, p, train = args[0], n.kwargs.get("p", args[1]), n.kwargs.get("train", args[2])
        with g.inserting_before(n):
            seed = g.call_function(torch.ops.aten.randint.low, (0, 1 << 62, []), {"dtype": torch.int64})
            seed.meta["val"] = torch.empty((), dtype=torch.int64)
            seed.meta["fusejit_aux"] = True  # the bridge's own node: not the model's, not reported
            new = g.call_function(dropout_with_seed, (x, p, True if train is None else train, seed))
        new.meta = dict(n.meta)
        n.replace_all_uses_with(new)
        g.erase_node(n)
        changed = True
    if changed:
        gm.recompile()
    return gm


def dropout_rule(conv, n, b):
    x = conv.operand(b["x"], "aten.native_dropout")
    seed = conv.operand(b["seed"], "aten.native_dropout")
    e = _Emit(conv, n)
    off = e.op("aten.full", [], {"shape": [], "value": 0, "dtype": torch.int64})
    out = "%%%s.0, %%%s.1" % (n.name, n.name)
    e.op("aten.native_dropout", [x, seed, off], {"p": float(b["p"]), "train": bool(b["train"])}, out=out)
    conv.names[n] = ["%%%s.0" % n.name, "%%%s.1" % n.name]
    return e.lines


FUNCTIONS = {dropout_with_seed: dropout_rule}

def _clamp(bound):
    def rule(conv, n, b):
        x = conv.operand(b["self"], "aten.clamp_" + bound)
        v = b[bound]
        e = _Emit(conv, n)
        if isinstance(v, torch.fx.Node):  # a tensor bound: maximum/minimum
            op = "aten.maximum" if bound == "min" else "aten.minimum"
            conv.names[n] = e.op(op, [x, conv.operand(v, op)], out="%" + n.name)
        else:
            conv.names[n] = e.op("aten.clamp", [x], {bound: v}, out="%" + n.name)
        return e.lines
    return rule


def clamp(conv, n, b):
    """clamp with a tensor bound (clamp.Tensor): maximum then minimum; a scalar
    clamp converts as it is."""
    lo, hi = b.get("min"), b.get("max")
    if not isinstance(lo, torch.fx.Node) and not isinstance(hi, torch.fx.Node):
        raise _Plain()
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.clamp")
    for v, op, attr in ((lo, "aten.maximum", "min"), (hi, "aten.minimum", "max")):
        if isinstance(v, torch.fx.Node):
            x = e.op(op, [x, conv.operand(v, "aten.clamp")])
        elif v is not None:
            x = e.op("aten.clamp", [x], {attr: v})
    conv.names[n] = e.op("aten.clone", [x], out="%" + n.name)
    return e.lines


def dot(conv, n, b):
    e = _Emit(conv, n)
    m = e.op("aten.mul", [conv.operand(b["self"], "aten.dot"), conv.operand(b["tensor"], "aten.dot")])
    conv.names[n] = e.op("aten.sum", [m], out="%" + n.name)
    return e.lines


def linalg_vector_norm(conv, n, b):
    """||x||_ord over dims: 2, 1, inf, -inf, 0 and any other p (PyTorch's forms)."""
    from .fx import UnsupportedOp, meta_type
    x = conv.operand(b["self"], "aten.linalg_vector_norm")
    ordv = float(b.get("ord", 2))
    dims = b.get("dim")
    attrs = {"keepdim": bool(b.get("keepdim", False))}
    if dims is not None:
        attrs["dims"] = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    out_t = meta_type(n)
    if out_t is None:
        raise UnsupportedOp(["a norm of unknown dtype"])
    e = _Emit(conv, n)
    if b.get("dtype") is not None:
        x = e.op("aten._to_copy", [x], {"dtype": b["dtype"]})
    a = e.op("aten.abs", [x])
    if ordv == float("inf"):
        r = e.op("aten.amax", [a], attrs)
    elif ordv == float("-inf"):
        r = e.op("aten.amin", [a], attrs)
    elif ordv == 0:
        nz = e.op("aten._to_copy", [e.op("aten.ne", [x, "0"])], {"dtype": out_t[0]})
        r = e.op("aten.sum", [nz], attrs)
    elif ordv == 1:
        r = e.op("aten.sum", [a], attrs)
    elif ordv == 2:
        r = e.op("aten.sqrt", [e.op("aten.sum", [e.op("aten.mul", [x, x])], attrs)])
    else:
        p = e.op("aten.pow", [a, fmt_number(ordv)])
        r = e.op("aten.pow", [e.op("aten.sum", [p], attrs), fmt_number(1.0 / ordv)])
    conv.names[n] = e.op("aten._to_copy", [r], {"dtype": out_t[0]}, out="%" + n.name)
    return e.lines


def constant_pad_nd(conv, n, b):
    """pad: (left, right) pairs from the last dim backwards; negative ones crop."""
    from .fx import UnsupportedOp
    dt, shape = _shape(conv, b["self"])
    pad = list(b["pad"])
    if len(pad) % 2 or len(pad) // 2 > len(shape) or any(not isinstance(p, int) for p in pad):
        raise UnsupportedOp(["a pad of %r" % (pad,)])
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.constant_pad_nd")
    cur = list(shape)
    for k in range(len(pad) // 2):
        d = len(shape) - 1 - k
        lo, hi = pad[2 * k], pad[2 * k + 1]
        if lo < 0 or hi < 0:
            start, end = max(-lo, 0), cur[d] - max(-hi, 0)
            x = e.op("aten.slice", [x], {"dim": d, "start": start, "end": max(end, start)})
            cur[d] = max(end - start, 0)
        parts = []
        for w in (lo, None, hi):
            if w is None:
                parts.append(x)
            elif w > 0:
                parts.append(e.op("aten.full", [], {"shape": cur[:d] + [w] + cur[d + 1:], "value": b.get("value", 0),
                                                    "dtype": dt}))
        if len(parts) > 1:
            x = e.op("aten.cat", parts, {"dim": d})
            cur[d] += max(lo, 0) + max(hi, 0)
    conv.names[n] = e.op("aten.clone", [x], out="%" + n.name)
    return e.lines


def copy(conv, n, b):
    """copy(self, src): src broadcast to self's shape, in self's dtype."""
    dt, shape = _shape(conv, b["self"])
    e = _Emit(conv, n)
    src = e.op("aten.expand", [conv.operand(b["src"], "aten.copy")], {"size": list(shape)})
    conv.names[n] = e.op("aten._to_copy", [src], {"dtype": dt}, out="%" + n.name)
    return e.lines


def _out_type(n, what):
    from .fx import UnsupportedOp, meta_type
    t = meta_type(n)
    if t is None:
        raise UnsupportedOp(["%s of unknown type" % what])
    return t


def angle(conv, n, b):
    """angle of a real tensor: pi where x < 0, else 0; NaN stays NaN."""
    dt, _ = _out_type(n, "an angle")
    e = _Emit(conv, n)
    x = e.op("aten._to_copy", [conv.operand(b["self"], "aten.angle")], {"dtype": dt})
    a = e.op("aten.where", [e.op("aten.lt", [x, "0"]), fmt_number(math.pi), "0.0"])
    nan = e.op("aten.mul", [x, "0.0"])  # NaN where x is NaN, with a zero gradient (angle's is 0)
    conv.names[n] = e.op("aten.where", [e.op("aten.isnan", [x]), nan, a], out="%" + n.name)
    return e.lines


def ldexp(conv, n, b):
    """self * 2.0 ** other, as ATen computes it."""
    dt, _ = _out_type(n, "ldexp")
    e = _Emit(conv, n)
    p = e.op("aten.pow", ["2.0", conv.operand(b["other"], "aten.ldexp")])
    r = e.op("aten.mul", [conv.operand(b["self"], "aten.ldexp"), p])
    conv.names[n] = e.op("aten._to_copy", [r], {"dtype": dt}, out="%" + n.name)
    return e.lines


def linalg_cross(conv, n, b):
    """The cross product along dim (size 3): a1*b2 - a2*b1, a2*b0 - a0*b2, a0*b1 - a1*b0."""
    dt, shape = _out_type(n, "a cross product")
    d = _dim(b.get("dim", -1), len(shape))
    e = _Emit(conv, n)
    xs = [e.op("aten.expand", [conv.operand(b[k], "aten.linalg_cross")], {"size": list(shape)})
          for k in ("self", "other")]
    a, c = [[e.op("aten.slice", [x], {"dim": d, "start": i, "end": i + 1}) for i in range(3)] for x in xs]
    parts = [e.op("aten.sub", [e.op("aten.mul", [a[i], c[j]]), e.op("aten.mul", [a[j], c[i]])])
             for i, j in ((1, 2), (2, 0), (0, 1))]
    conv.names[n] = e.op("aten.cat", parts, {"dim": d}, out="%" + n.name)
    return e.lines


def renorm(conv, n, b):
    """Each slice along dim whose p-norm exceeds maxnorm is scaled to maxnorm
    (factor maxnorm / (norm + 1e-7), as ATen computes it)."""
    from .fx import UnsupportedOp
    dt, shape = _out_type(n, "renorm")
    if dt not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise UnsupportedOp(["renorm of %s" % dt])
    d = _dim(b["dim"], len(shape))
    p, maxnorm = float(b["p"]), float(b["maxnorm"])
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.renorm")
    acc = dt if dt in (torch.float32, torch.float64) else torch.float32
    xa = e.op("aten._to_copy", [x], {"dtype": acc})
    dims = [k for k in range(len(shape)) if k != d]
    a = e.op("aten.abs", [xa])
    if p == float("inf"):
        norm = e.op("aten.amax", [a], {"dims": dims, "keepdim": True})
    elif p == 2:
        norm = e.op("aten.sqrt", [e.op("aten.sum", [e.op("aten.mul", [xa, xa])], {"dims": dims, "keepdim": True})])
    elif p == 1:
        norm = e.op("aten.sum", [a], {"dims": dims, "keepdim": True})
    else:
        s = e.op("aten.sum", [e.op("aten.pow", [a, fmt_number(p)])], {"dims": dims, "keepdim": True})
        norm = e.op("aten.pow", [s, fmt_number(1.0 / p)])
    f = e.op("aten.div", [fmt_number(maxnorm), e.op("aten.add", [norm, "1e-07"])])
    f = e.op("aten.where", [e.op("aten.gt", [norm, fmt_number(maxnorm)]), f, "1.0"])
    r = e.op("aten.mul", [xa, f])
    conv.names[n] = e.op("aten._to_copy", [r], {"dtype": dt}, out="%" + n.name)
    return e.lines


RULES = {
    "angle": angle, "ldexp": ldexp, "linalg_cross": linalg_cross, "renorm": renorm, "new_empty": _filled(0),
    "clamp": clamp, "clamp_min": _clamp("min"), "clamp_max": _clamp("max"), "dot": dot, "linalg_vector_norm": linalg_vector_norm,
    "constant_pad_nd": constant_pad_nd, "copy": copy,
    "native_dropout_backward": native_dropout_backward,
    "zeros": _filled(0), "ones": _filled(1), "empty": _filled(0), "full": _filled(None),
    "scalar_tensor": lambda conv, n, b: _filled(b["s"])(conv, n, b),
    "select": select, "select_backward": select_backward, "lift_fresh_copy": lift_fresh_copy,
    "split": split, "split_with_sizes": split_with_sizes, "unbind": unbind, "cat": cat,
    "_scaled_dot_product_flash_attention_for_cpu": sdpa_flash_cpu,
    "_scaled_dot_product_flash_attention_for_cpu_backward": sdpa_flash_cpu_backward,
}


# The rule sets of the other decomp_* modules (they import the helpers above).
from . import decomp_index as _decomp_index  # noqa: E402
from . import decomp_math as _decomp_math  # noqa: E402
for _rules in (_decomp_math.RULES, _decomp_index.RULES):
    assert not set(_rules) & set(RULES), "an op with two rules"
    RULES.update(_rules)
