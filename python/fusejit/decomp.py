"""ATen ops the bridge expresses in fusejit's op set (IR.md §3) by a few lines
of fusejit text each: views PyTorch 2.x emits that fusejit has no op for
(select, split, unbind ...), and scaled dot product attention, forward and
backward, in the math form (QK^T * scale, masks, softmax through logsumexp,
PV). Each rule takes the Converter, the FX node and its arguments bound by
their ATen schema names, sets conv.names[node] (a name, or a list for a
multi-output op) and returns the lines. A rule raises UnsupportedOp (with the
reason) for a case it does not cover; the node then stays in PyTorch."""
import math
import operator

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


# ---- scaled dot product attention: one builder, a thin adapter per ATen form ----
#
# Every form computes the math form in fusejit's op set: S = Q K^T * scale, masked
# (a float mask or bias adds; is_causal keeps a lower triangle),
# P = exp(S - logsumexp(S)), out = P V, with dropout on P drawn by fusejit's Philox
# (aten.native_dropout(P, seed, offset)); the backward recomputes P from the saved
# logsumexp and redraws the same mask from the same seed and offset. f16/bf16
# inputs are computed in f32 (softmax and logsumexp included) and the results
# rounded to the input dtype, as PyTorch's kernels do; the logsumexp stays f32.

_HALF = (torch.float16, torch.bfloat16)
_FLOATS = (torch.float32, torch.float64) + _HALF


def _unsupported(*why):
    from .fx import UnsupportedOp
    return UnsupportedOp(list(why))


class _Attention:
    """One attention call: its sizes, q, k and v in the compute dtype (k and v with
    each key head repeated for its G query heads: GQA) and the masked, scaled scores
    (a float mask or bias adds).
    causal: "top_left" (PyTorch's is_causal) or "bottom_right" (the CUDA flash
    kernel's alignment when L != S)."""

    def __init__(self, conv, n, b, what, mask=None, causal="top_left", bool_mask_adds=False):
        self.conv, self.what = conv, what
        qt, qs = _shape(conv, b["query"])
        _, ks = _shape(conv, b["key"])
        _, vs = _shape(conv, b["value"])
        if qt not in _FLOATS or len(qs) != 4 or len(ks) != 4 or len(vs) != 4:
            raise _unsupported("%s of %s rank-%d tensors (fusejit: f32/f64/f16/bf16, rank 4)" % (what, qt, len(qs)))
        self.dtype = qt
        self.ct = torch.float32 if qt in _HALF else qt
        (B, H, L, E), Hk, S, Ev = qs, ks[1], ks[2], vs[3]
        if not isinstance(H, int) or not isinstance(Hk, int) or H % Hk:
            raise _unsupported("%s with %s query heads over %s key heads" % (what, H, Hk))
        self.B, self.H, self.L, self.S, self.E, self.Ev, self.Hk, self.G = B, H, L, S, E, Ev, Hk, H // Hk
        scale = b.get("scale")
        self.scale = 1.0 / math.sqrt(E) if scale is None else scale
        self.e = e = _Emit(conv, n)
        self.q = self.cvt(conv.operand(b["query"], what))
        self.k = _expand_heads(e, self.cvt(conv.operand(b["key"], what)), B, Hk, self.G, S, E)
        self.v = _expand_heads(e, self.cvt(conv.operand(b["value"], what)), B, Hk, self.G, S, Ev)
        s = e.op("aten.mul", [e.op("aten.matmul", [self.q, self.t(self.k)]), fmt_number(self.scale)])
        if mask is not None:
            mt, ms = _shape(conv, mask)
            m = conv.operand(mask, what)
            if mt == torch.bool and not bool_mask_adds:
                raise _unsupported("%s with a bool mask (PyTorch's kernel takes a float one)" % what)
            # a float mask adds; so does a bool one in the math form (0 or 1: sdpa converts
            # a bool mask to 0 / -inf before it calls a form)
            m = e.op("aten._to_copy", [m], {"dtype": self.ct}) if mt == torch.bool else self.cvt(m, mt)
            s = e.op("aten.add", [s, m])
        if b.get("is_causal"):
            start = 0
            if causal == "bottom_right" and L != S:
                if not isinstance(L, int) or not isinstance(S, int) or L > S:
                    raise _unsupported("%s: a causal mask aligned bottom-right with more queries than keys" % what)
                start = S - L
            rows = e.op("aten.arange", [], {"start": start, "end": start + L, "dtype": torch.int64})
            cols = e.op("aten.arange", [], {"end": S, "dtype": torch.int64})
            keep = e.op("aten.le", [cols, e.op("aten.unsqueeze", [rows], {"dim": 1})])
            s = e.op("aten.where", [keep, s, "-inf"])
        self.s = s

    def t(self, x):
        return self.e.op("aten.transpose", [x], {"dim0": -2, "dim1": -1})

    def cvt(self, x, dt=None):
        """x (of dtype dt, the inputs' by default) in the compute dtype."""
        if (dt or self.dtype) == self.ct:
            return x
        return self.e.op("aten._to_copy", [x], {"dtype": self.ct})

    def result(self, x, name, dt=None):
        """x rounded to dt (the inputs' dtype by default) as the named result."""
        if (dt or self.dtype) == self.ct:
            return self.e.op("aten.clone", [x], out=name)
        return self.e.op("aten._to_copy", [x], {"dtype": dt or self.dtype}, out=name)

    def dropout(self, x, p, seed, off):
        """x * mask / (1 - p): the mask Philox draws for (seed, offset, x's shape)."""
        y, m = self.e.tmp(), self.e.tmp()
        self.e.op("aten.native_dropout", [x, seed, off], {"p": float(p), "train": True}, out="%s, %s" % (y, m))
        return y

    def forward(self, p=0.0, seed=None, off=None, safe=False, dropout_mask=None):
        """(out, logsumexp over the keys, the attention weights) in the compute dtype.
        safe: a row with every key masked gives zeros (PyTorch's _safe_softmax)."""
        e = self.e
        lse = e.op("aten.logsumexp", [self.s], {"dims": [-1]})
        # exp(S - max) / sum, as PyTorch's kernels divide: exp(S - lse) would carry lse's
        # rounding (an ulp of a large lse) into every weight of a row of sharp scores.
        w = e.op("aten._softmax", [self.s], {"dim": -1})
        if safe:
            dead = e.op("aten.eq", [e.op("aten.unsqueeze", [lse], {"dim": -1}), "-inf"])
            w = e.op("aten.where", [dead, "0", w])
        if p > 0 and dropout_mask is not None:
            w = e.op("aten.where", [dropout_mask, w, "0"])
            return e.op("aten.mul", [e.op("aten.matmul", [w, self.v]), fmt_number(1.0 / (1.0 - p))]), lse, w
        if p > 0:
            w = self.dropout(w, p, seed, off)
        return e.op("aten.matmul", [w, self.v]), lse, w

    def backward(self, go, lse, p=0.0, seed=None, off=None, out=None):
        """(dq, dk, dv, dS) in the compute dtype, dk and dv summed over each key head's
        query heads; dS is the gradient of the masked scores (an additive bias's).
        With the forward's output `out`, the rows' sum(dW * W) is FlashAttention-2's
        sum(dO * O) (equal: dW = dO V^T and O = W V, dropout's mask and scale in
        both): the weights are then needed only where the matmuls read them, and
        fuse{attention=true} makes the backward one kernel (fj_attn_bw_match)."""
        e = self.e
        go_in = go
        go = self.cvt(self.conv.operand(go, self.what))
        w = e.op("aten.exp", [e.op("aten.sub", [self.s, e.op("aten.unsqueeze", [lse], {"dim": -1})])])
        wd = self.dropout(w, p, seed, off) if p > 0 else w
        dv = e.op("aten.matmul", [self.t(wd), go])
        dw = e.op("aten.matmul", [go, self.t(self.v)])
        if p > 0:
            dw = self.dropout(dw, p, seed, off)
        if isinstance(out, torch.fx.Node) and isinstance(go_in, torch.fx.Node) and \
                _shape(self.conv, out)[1] == _shape(self.conv, go_in)[1]:
            o = self.cvt(self.conv.operand(out, self.what))
            dd = e.op("aten.sum", [e.op("aten.mul", [go, o])], {"dims": [-1], "keepdim": True})
        else:
            dd = e.op("aten.sum", [e.op("aten.mul", [dw, w])], {"dims": [-1], "keepdim": True})
        ds = e.op("aten.mul", [w, e.op("aten.sub", [dw, dd])])
        dss = e.op("aten.mul", [ds, fmt_number(self.scale)])
        dq = e.op("aten.matmul", [dss, self.k])
        dk = e.op("aten.matmul", [self.t(dss), self.q])
        return dq, _sum_heads(e, dk, self.B, self.Hk, self.G, self.S, self.E), \
            _sum_heads(e, dv, self.B, self.Hk, self.G, self.S, self.Ev), ds

    def lse_in(self, lse, L):
        """A saved logsumexp operand ([B,H,L], or padded / with a trailing 1) as [B,H,L]
        in the compute dtype."""
        dt, shape = _shape(self.conv, lse)
        x = self.conv.operand(lse, self.what)
        if len(shape) == 4:
            x = self.e.op("aten.squeeze", [x], {"dims": [3]})
        if shape[2] != L:
            x = self.e.op("aten.slice", [x], {"dim": 2, "start": 0, "end": L})
        return self.cvt(x, dt)

    def reduce_to(self, x, node, name):
        """x ([B,H,L,S]) summed to the shape of the broadcast operand `node`, in its dtype."""
        dt, shape = _shape(self.conv, node)
        full = [self.B, self.H, self.L, self.S]
        lead = len(full) - len(shape)
        dims = [d for d in range(len(full)) if d < lead or (shape[d - lead] == 1 and full[d] != 1)]
        if dims:
            x = self.e.op("aten.sum", [x], {"dims": dims, "keepdim": True})
            if lead:
                x = self.e.op("aten.reshape", [x], {"shape": list(shape)})
        return self.result(x, name, dt)


def _expand_heads(e, x, B, Hk, G, S, E):
    """[B,Hk,S,E] -> [B,Hk*G,S,E], each key head repeated for its G query heads (GQA)."""
    if G == 1:
        return x
    u = e.op("aten.unsqueeze", [x], {"dim": 2})
    x = e.op("aten.expand", [u], {"size": [B, Hk, G, S, E]})
    return e.op("aten.reshape", [x], {"shape": [B, Hk * G, S, E]})


def _sum_heads(e, x, B, Hk, G, S, E):
    if G == 1:
        return x
    return e.op("aten.sum", [e.op("aten.reshape", [x], {"shape": [B, Hk, G, S, E]})], {"dims": [2]})


def _out(n, k):
    return "%%%s.%d" % (n.name, k)


def _seed(a, b, what):
    """The seed and offset operands of a forward with dropout_p > 0: the i64 seed
    PyTorch's generator drew for this call (seed_attention), offset 0."""
    p = float(b.get("dropout_p") or 0.0)
    if p == 0:
        return 0.0, None, None
    if b.get("fusejit_seed") is None:
        raise _unsupported("%s with dropout_p > 0 and no seed from the bridge" % what)
    off = a.e.op("aten.full", [], {"shape": [], "value": 0, "dtype": torch.int64})
    return p, a.conv.operand(b["fusejit_seed"], what), off


def _seed_results(a, n, seed, off, ks, pair=False):
    """The forward's philox seed and offset results (at result indices ks): the seed
    and offset it used, zeros without dropout; pair: one i64[2] [seed, offset]
    (the flash form's rng_state) and an i64[] offset."""
    e = a.e
    zero = e.op("aten.full", [], {"shape": [], "value": 0, "dtype": torch.int64})
    seed, off = seed or zero, off or zero
    if pair:
        st = e.op("aten.cat", [e.op("aten.unsqueeze", [x], {"dim": 0}) for x in (seed, off)], {"dim": 0},
                  out=_out(n, ks[0]))
        return st, e.op("aten.clone", [off], out=_out(n, ks[1]))
    return e.op("aten.clone", [seed], out=_out(n, ks[0])), e.op("aten.clone", [off], out=_out(n, ks[1]))


def _seed_operands(a, b, what, pair=False):
    """The seed and offset a backward redraws its forward's dropout mask from (the
    forward's philox results); the bridge says whether fusejit drew that mask."""
    p = float(b.get("dropout_p") or 0.0)
    if p == 0:
        return 0.0, None, None
    if b.get("fusejit_seeded") not in ("fusejit", "graph"):
        raise _unsupported("%s with dropout_p > 0 whose forward ran in PyTorch (its mask is PyTorch's)" % what)
    seed = a.conv.operand(b["philox_seed"], what)
    if pair:
        e = a.e
        one = [e.op("aten.squeeze", [e.op("aten.slice", [seed], {"dim": 0, "start": k, "end": k + 1})], {"dims": [0]})
               for k in (0, 1)]
        return p, one[0], one[1]
    return p, seed, a.conv.operand(b["philox_offset"], what)


def sdpa_flash_cpu(conv, n, b):
    if b.get("dropout_p"):
        raise _unsupported("_scaled_dot_product_flash_attention_for_cpu with dropout_p > 0 (its backward "
                           "has no seed to redraw the mask from)")
    a = _Attention(conv, n, b, "attention", b.get("attn_mask"))
    if a.Ev != a.E:
        raise _unsupported("_scaled_dot_product_flash_attention_for_cpu with a value head dim %s != %s" % (a.Ev, a.E))
    out, lse, _ = a.forward()
    conv.names[n] = [a.result(out, _out(n, 0)), a.result(lse, _out(n, 1), a.ct)]
    return a.e.lines


def sdpa_flash_cpu_backward(conv, n, b):
    if b.get("dropout_p"):
        raise _unsupported("_scaled_dot_product_flash_attention_for_cpu_backward with dropout_p > 0")
    a = _Attention(conv, n, b, "attention backward", b.get("attn_mask"))
    dq, dk, dv, _ = a.backward(b["grad_out"], a.lse_in(b["logsumexp"], a.L), out=b.get("out"))
    conv.names[n] = [a.result(x, _out(n, k)) for k, x in enumerate((dq, dk, dv))]
    return a.e.lines


def sdpa_flash(conv, n, b):
    """_scaled_dot_product_flash_attention (CUDA): (out, lse f32 [B,H,L], cum_seq_q,
    cum_seq_k, max_q, max_k, rng_state, unused, debug_attn_mask)."""
    what = "_scaled_dot_product_flash_attention"
    if b.get("return_debug_mask"):
        raise _unsupported("%s with return_debug_mask (PyTorch's kernel's own mask layout)" % what)
    a = _Attention(conv, n, b, what, causal="bottom_right")
    p, seed, off = _seed(a, b, what)
    out, lse, _ = a.forward(p, seed, off)
    st, un = _seed_results(a, n, seed, off, (6, 7), pair=True)
    dbg = a.e.op("aten.full", [], {"shape": [0], "value": 0, "dtype": a.dtype}, out=_out(n, 8))
    conv.names[n] = [a.result(out, _out(n, 0)), a.result(lse, _out(n, 1), torch.float32),
                     None, None, None, None, st, un, dbg]
    return a.e.lines


def sdpa_flash_backward(conv, n, b):
    what = "_scaled_dot_product_flash_attention_backward"
    a = _Attention(conv, n, b, what, causal="bottom_right")
    p, seed, off = _seed_operands(a, b, what, pair=True)
    dq, dk, dv, _ = a.backward(b["grad_out"], a.lse_in(b["logsumexp"], a.L), p, seed, off, out=b.get("out"))
    conv.names[n] = [a.result(x, _out(n, k)) for k, x in enumerate((dq, dk, dv))]
    return a.e.lines


def sdpa_efficient(conv, n, b):
    """_scaled_dot_product_efficient_attention: (out, log_sumexp f32 [B,H,ceil(L/32)*32]
    padded with +inf, or [B,H,0] without compute_log_sumexp, philox_seed, philox_offset)."""
    what = "_scaled_dot_product_efficient_attention"
    a = _Attention(conv, n, b, what, b.get("attn_bias"))
    p, seed, off = _seed(a, b, what)
    out, lse, _ = a.forward(p, seed, off)
    e, L = a.e, a.L
    if not isinstance(L, int):
        raise _unsupported("%s with a symbolic query length (its logsumexp is padded to 32)" % what)
    pad = -(-L // 32) * 32 if b.get("compute_log_sumexp") else 0
    lse = e.op("aten._to_copy", [lse], {"dtype": torch.float32}) if a.ct != torch.float32 else lse
    if pad == 0:
        lse = e.op("aten.full", [], {"shape": [a.B, a.H, 0], "value": 0, "dtype": torch.float32}, out=_out(n, 1))
    elif pad > L:
        inf = e.op("aten.full", [], {"shape": [a.B, a.H, pad - L], "value": float("inf"), "dtype": torch.float32})
        lse = e.op("aten.cat", [lse, inf], {"dim": 2}, out=_out(n, 1))
    else:
        lse = e.op("aten.clone", [lse], out=_out(n, 1))
    conv.names[n] = [a.result(out, _out(n, 0)), lse] + list(_seed_results(a, n, seed, off, (2, 3)))
    return e.lines


def sdpa_efficient_backward(conv, n, b):
    """-> (dq, dk, dv, d attn_bias where attn_bias is given and grad_input_mask[3])."""
    what = "_scaled_dot_product_efficient_attention_backward"
    b = dict(b, grad_out=b["grad_out_"])
    a = _Attention(conv, n, b, what, b.get("attn_bias"))
    p, seed, off = _seed_operands(a, b, what)
    dq, dk, dv, ds = a.backward(b["grad_out"], a.lse_in(b["logsumexp"], a.L), p, seed, off, out=b.get("out"))
    r = [a.result(x, _out(n, k)) for k, x in enumerate((dq, dk, dv))]
    mask = list(b.get("grad_input_mask") or [True] * 4)
    r.append(a.reduce_to(ds, b["attn_bias"], _out(n, 3)) if b.get("attn_bias") is not None and mask[3] else None)
    conv.names[n] = r
    return a.e.lines


def _sdpa_cudnn_like(what, lse4):
    """The cudnn and overrideable forms: (out, logsumexp f32 [B,H,L] ([B,H,L,1] for
    cudnn), cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug)."""
    def rule(conv, n, b):
        a = _Attention(conv, n, b, what, b.get("attn_bias"))
        p, seed, off = _seed(a, b, what)
        out, lse, _ = a.forward(p, seed, off)
        if lse4:
            lse = a.e.op("aten.unsqueeze", [lse], {"dim": -1})
        conv.names[n] = [a.result(out, _out(n, 0)), a.result(lse, _out(n, 1), torch.float32), None, None, None,
                         None] + list(_seed_results(a, n, seed, off, (6, 7))) + [None]
        return a.e.lines
    return rule


def _sdpa_cudnn_like_backward(what, bias_grad):
    """-> (dq, dk, dv) for cudnn; (dq, dk, dv, d attn_bias or None) for overrideable."""
    def rule(conv, n, b):
        a = _Attention(conv, n, b, what, b.get("attn_bias"))
        p, seed, off = _seed_operands(a, b, what)
        dq, dk, dv, ds = a.backward(b["grad_out"], a.lse_in(b["logsumexp"], a.L), p, seed, off, out=b.get("out"))
        r = [a.result(x, _out(n, k)) for k, x in enumerate((dq, dk, dv))]
        if bias_grad:
            r.append(a.reduce_to(ds, b["attn_bias"], _out(n, 3)) if b.get("attn_bias") is not None else None)
        conv.names[n] = r
        return a.e.lines
    return rule


def sdpa_math(conv, n, b):
    """_scaled_dot_product_attention_math: (out, attention weights), both in the
    inputs' dtype; a fully masked row gives zeros (_safe_softmax); dropout from
    dropout_mask where given, else drawn by fusejit's Philox."""
    what = "_scaled_dot_product_attention_math"
    if not b.get("enable_gqa"):
        (_, qs), (_, ks) = _shape(conv, b["query"]), _shape(conv, b["key"])
        if len(qs) == 4 and len(ks) == 4 and qs[1] != ks[1]:
            raise _unsupported("%s with %s query heads over %s key heads and enable_gqa off" % (what, qs[1], ks[1]))
    if b.get("is_causal") and b.get("attn_mask") is not None:
        raise _unsupported("%s with both is_causal and attn_mask" % what)
    a = _Attention(conv, n, b, what, b.get("attn_mask"), bool_mask_adds=True)
    dm = b.get("dropout_mask")
    p = float(b.get("dropout_p") or 0.0)
    if p > 0 and dm is not None:
        dm = conv.operand(dm, what)
        seed = off = None
    else:
        p, seed, off = _seed(a, b, what)
        dm = None
    out, _, w = a.forward(p, seed, off, safe=True, dropout_mask=dm)
    conv.names[n] = [a.result(out, _out(n, 0)), a.result(w, _out(n, 1))]
    return a.e.lines


_A = torch.ops.aten
# form: (forward op name, its rule, backward op name, its rule, index of the forward's philox_seed result)
ATTENTION_FORMS = {
    "flash": ("_scaled_dot_product_flash_attention", sdpa_flash,
              "_scaled_dot_product_flash_attention_backward", sdpa_flash_backward, 6),
    "efficient": ("_scaled_dot_product_efficient_attention", sdpa_efficient,
                  "_scaled_dot_product_efficient_attention_backward", sdpa_efficient_backward, 2),
    "cudnn": ("_scaled_dot_product_cudnn_attention", _sdpa_cudnn_like("_scaled_dot_product_cudnn_attention", True),
              "_scaled_dot_product_cudnn_attention_backward",
              _sdpa_cudnn_like_backward("_scaled_dot_product_cudnn_attention_backward", False), 6),
    "overrideable": ("_scaled_dot_product_fused_attention_overrideable",
                     _sdpa_cudnn_like("_scaled_dot_product_fused_attention_overrideable", False),
                     "_scaled_dot_product_fused_attention_overrideable_backward",
                     _sdpa_cudnn_like_backward("_scaled_dot_product_fused_attention_overrideable_backward", True), 6),
    "math": ("_scaled_dot_product_attention_math", sdpa_math, None, None, None),
}
ATTENTION_RULES = {"_scaled_dot_product_flash_attention_for_cpu": sdpa_flash_cpu,
                   "_scaled_dot_product_flash_attention_for_cpu_backward": sdpa_flash_cpu_backward}
for _f, _r, _bf, _br, _ in ATTENTION_FORMS.values():
    ATTENTION_RULES[_f] = _r
    if _bf:
        ATTENTION_RULES[_bf] = _br


def _bind(op, args, kwargs):
    """An OpOverload call's arguments by their schema names (defaults filled in)."""
    schema = op._schema
    b = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    for a, v in zip(schema.arguments, args):
        b[a.name] = v
    b.update(kwargs)
    return b


def _u64_as_i64(t):
    return t.view(torch.int64) if isinstance(t, torch.Tensor) and t.dtype == torch.uint64 else t


def _bridge_forward(op, form, rule):
    """The bridge's form of an attention forward: seed (an i64[] PyTorch's generator
    drew, or None without dropout) first. Run in PyTorch, it calls the op itself (its
    own dropout mask); the flash form's uint64 rng_state/unused come back as int64
    bits (fusejit has no uint64), which the backward's bridge turns back."""
    name = op._schema.name.split("::")[-1]

    def fn(seed, *args, **kwargs):
        r = list(op(*args, **kwargs))
        return tuple(_u64_as_i64(x) for x in r) if form == "flash" else tuple(r)
    fn.__name__ = "fusejit_" + name
    fn.fusejit_op = "aten." + name
    fn.fusejit_attention = (form, "forward", op)
    FUNCTIONS[fn] = lambda conv, n, b: rule(conv, n, dict(_bind(op, b.get("args", ()), b.get("kwargs", {})),
                                                           fusejit_seed=b["seed"]))
    return fn


def _bridge_backward(op, form, rule):
    """The bridge's form of an attention backward; fusejit_seeded says who drew its
    forward's dropout mask: "fusejit" (the forward graph ran it in fusejit), "graph"
    (the forward is in this graph: compile_graph keeps the two on one side) or
    "pytorch". Run in PyTorch it calls the op itself, which cannot redraw a mask
    fusejit drew: that is an error, never a wrong gradient."""
    name = op._schema.name.split("::")[-1]

    def fn(*args, fusejit_seeded=None, **kwargs):
        b = _bind(op, args, kwargs)
        if fusejit_seeded == "fusejit" and b.get("dropout_p"):
            raise RuntimeError("fusejit: %s: the forward's dropout mask was drawn by fusejit, so the backward must "
                               "run in fusejit too, and fusejit refused it (see fusejit.torch.explain)" % name)
        if form == "flash":
            for k in ("philox_seed", "philox_offset"):
                t = b.get(k)
                if isinstance(t, torch.Tensor) and t.dtype == torch.int64:
                    b[k] = t.view(torch.uint64)
        return op(**b)
    fn.__name__ = "fusejit_" + name
    fn.fusejit_op = "aten." + name
    fn.fusejit_attention = (form, "backward", op)
    FUNCTIONS[fn] = lambda conv, n, b: rule(conv, n, dict(_bind(op, b.get("args", ()), b.get("kwargs", {})),
                                                           fusejit_seeded=b.get("fusejit_seeded")))
    return fn


FUNCTIONS = {}
_BRIDGES = {}  # OpOverload -> its bridge function
for _form, (_f, _r, _bf, _br, _) in ATTENTION_FORMS.items():
    _op = getattr(_A, _f, None)
    if _op is not None:
        _BRIDGES[_op.default] = _bridge_forward(_op.default, _form, _r)
    _op = getattr(_A, _bf, None) if _bf else None
    if _op is not None:
        _BRIDGES[_op.default] = _bridge_backward(_op.default, _form, _br)


def _meta_i64(v):
    return torch.empty(tuple(v.shape), dtype=torch.int64, device="meta") if isinstance(v, torch.Tensor) else v


def seed_attention(gm, state=None):
    """Puts each CUDA-form and math-form attention call of gm in its bridge form
    (see _bridge_forward/_bridge_backward): a forward with dropout_p > 0 gets a seed
    PyTorch's generator draws at each call (aten.randint, staying in PyTorch); the
    flash form's uint64 philox values travel as int64. state (shared by a torch.compile
    graph's forward and backward compiles) says which saved seeds fusejit drew."""
    g = gm.graph
    changed = False
    for n in list(g.nodes):
        br = _BRIDGES.get(n.target) if n.op == "call_function" else None
        if br is None:
            continue
        form, kind, op = br.fusejit_attention
        b = _bind(op, n.args, n.kwargs)
        p = float(b.get("dropout_p") or 0.0)
        with g.inserting_before(n):
            if kind == "forward":
                seed = None
                if p > 0 and b.get("dropout_mask") is None:
                    seed = draw_seed(g, b["query"])
                new = g.call_function(br, (seed,) + tuple(n.args), dict(n.kwargs))
                val = n.meta.get("val")
                new.meta = dict(n.meta)
                if form == "flash" and isinstance(val, (list, tuple)):
                    new.meta["val"] = tuple(_meta_i64(x) if k in (6, 7) else x for k, x in enumerate(val))
                    for u in n.users:
                        if u.target is operator.getitem and u.args[1] in (6, 7):
                            u.meta["val"] = _meta_i64(u.meta.get("val"))
            else:
                seeded = "pytorch"
                src = b.get("philox_seed")
                if isinstance(src, torch.fx.Node):
                    if src.op == "placeholder" and form == "flash" and state is not None and state.get("forward"):
                        for k in ("philox_seed", "philox_offset"):  # the forward's bridge saved int64 bits
                            if isinstance(b.get(k), torch.fx.Node) and b[k].op == "placeholder":
                                b[k].meta["val"] = _meta_i64(b[k].meta.get("val"))
                    if src.op == "placeholder" and state is not None and src.name in state.get("seeds", ()):
                        seeded = "fusejit"
                    elif src.target is operator.getitem and getattr(src.args[0].target, "fusejit_attention", None):
                        seeded = "graph"
                new = g.call_function(br, tuple(n.args), dict(n.kwargs, fusejit_seeded=seeded))
                new.meta = dict(n.meta)
        n.replace_all_uses_with(new)
        g.erase_node(n)
        changed = True
    if changed:
        gm.recompile()
    return gm


def attention_pairs_split(graph, regions):
    """{node: reason} for each attention forward/backward pair with dropout of one
    graph that the regions split (one in fusejit, one in PyTorch): the mask must be
    drawn and redrawn on one side."""
    where = {n for r in regions for n in r}
    bad = {}
    for n in graph.nodes:
        if getattr(n.target, "fusejit_attention", (None, None))[1] != "backward" or \
                n.kwargs.get("fusejit_seeded") != "graph":
            continue
        b = _bind(n.target.fusejit_attention[2], n.args, {k: v for k, v in n.kwargs.items() if k != "fusejit_seeded"})
        if not b.get("dropout_p"):
            continue
        fw = b["philox_seed"].args[0]
        if (fw in where) != (n in where):
            inside = n if n in where else fw
            bad[inside] = ("its attention %s runs in PyTorch, and the dropout mask must be drawn and redrawn on one "
                           "side" % ("forward" if inside is n else "backward"))
    return bad


def record_attention_seeds(graph, regions, state):
    """After a forward graph's compile: the names of the saved philox seeds that
    fusejit drew (a forward with dropout in a region), for its backward's compile."""
    if state is None:
        return
    state["forward"] = True
    where = {n for r in regions for n in r}
    for n in graph.nodes:
        att = getattr(n.target, "fusejit_attention", None)
        if att is None or att[1] != "forward" or n not in where or n.args[0] is None:
            continue
        k = ATTENTION_FORMS[att[0]][4]
        for u in n.users:
            if u.target is operator.getitem and u.args[1] == k:
                state.setdefault("seeds", set()).add(u.name)


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


def draw_seed(g, like):
    """A node (inserted at g's insertion point) that draws a dropout seed with
    PyTorch's generator of the device of node `like`'s tensor, where the
    program runs: aten.randint, which stays in PyTorch."""
    v = like.meta.get("val") if isinstance(like, torch.fx.Node) else None
    dev = v.device if isinstance(v, torch.Tensor) else torch.device("cpu")
    seed = g.call_function(torch.ops.aten.randint.low, (0, 1 << 62, []), {"dtype": torch.int64, "device": dev})
    seed.meta["val"] = torch.empty((), dtype=torch.int64, device="meta")  # any device
    seed.meta["fusejit_aux"] = True  # the bridge's own node: not the model's, not reported
    return seed


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
            seed = draw_seed(g, x)
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


FUNCTIONS[dropout_with_seed] = dropout_rule

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


def safe_softmax(conv, n, b):
    """_safe_softmax (the math attention's softmax): softmax, with zeros for a row
    whose every element is -inf."""
    dt, shape = _shape(conv, b["self"])
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten._safe_softmax")
    if b.get("dtype") is not None:
        x = e.op("aten._to_copy", [x], {"dtype": b["dtype"]})
    d = _dim(b["dim"], len(shape))
    sm = e.op("aten._softmax", [x], {"dim": d, "half_to_float": False})
    dead = e.op("aten.eq", [e.op("aten.amax", [x], {"dims": [d], "keepdim": True}), "-inf"])
    conv.names[n] = e.op("aten.where", [dead, "0", sm], out="%" + n.name)
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


def _is_zero(v):
    """v (an int or a SymInt) is 0 whatever the sizes are (no guard is added)."""
    from .fx import sym_expr
    return v == 0 if isinstance(v, int) else sym_expr(v) == 0


def slice_backward(conv, n, b):
    """The gradient of x[start:end:step] along dim: grad_output between zero fills
    (step 1), or with step - 1 zeros after each entry, then cut to the size. Sizes
    may be symbolic (s0-1 ...): bounds are taken as PyTorch's for a static size,
    unclamped for a symbolic one, as fusejit's slice takes them (IR.md §2)."""
    from .fx import UnsupportedOp
    # a size computed in the graph (sym_size) is a node: its value is a SymInt
    sizes = [v.meta.get("val") if isinstance(v, torch.fx.Node) else v for v in b["input_sizes"]]
    if any(not isinstance(v, (int, getattr(torch, "SymInt", int))) for v in sizes):
        raise UnsupportedOp(["slice_backward to sizes %r" % (sizes,)])
    d = _dim(b["dim"], len(sizes))
    start, end, step = b["start"], b["end"], b["step"]
    if not all(isinstance(v, int) for v in (start, end, step)) or step < 1:
        raise UnsupportedOp(["slice_backward with bounds %r" % ((start, end, step),)])
    size = sizes[d]
    if isinstance(size, int):
        start = min(max(start + size if start < 0 else start, 0), size)
        end = min(max(end + size if end < 0 else end, 0), size)
        end = max(end, start)
    else:
        start = start + size if start < 0 else start
        end = size if end >= 2 ** 62 else end + size if end < 0 else end
    dt, gshape = _shape(conv, b["grad_output"])
    g = conv.operand(b["grad_output"], "aten.slice_backward")
    e = _Emit(conv, n)

    def zeros(k):
        return e.op("aten.new_zeros", [g], {"shape": sizes[:d] + [k] + sizes[d + 1:]})
    if step == 1:
        parts = ([] if _is_zero(start) else [zeros(start)]) + [g] + ([] if _is_zero(size - end) else [zeros(size - end)])
        out = e.op("aten.cat", parts, {"dim": d}) if len(parts) > 1 else e.op("aten.clone", [g])
        conv.names[n] = e.op("aten.clone", [out], out="%" + n.name)
        return e.lines
    k = gshape[d]
    u = e.op("aten.unsqueeze", [g], {"dim": d + 1})
    z = e.op("aten.new_zeros", [g], {"shape": list(gshape[:d + 1]) + [step - 1] + list(gshape[d + 1:])})
    c = e.op("aten.cat", [u, z], {"dim": d + 1})
    c = e.op("aten.reshape", [c], {"shape": list(gshape[:d]) + [k * step] + list(gshape[d + 1:])})
    parts = ([] if _is_zero(start) else [zeros(start)]) + [c, zeros(size)]
    c = e.op("aten.cat", parts, {"dim": d})
    conv.names[n] = e.op("aten.slice", [c], {"dim": d, "start": 0, "end": size}, out="%" + n.name)
    return e.lines


def copy(conv, n, b):
    """copy(self, src): src broadcast to self's shape, in self's dtype."""
    dt, shape = _shape(conv, b["self"])
    e = _Emit(conv, n)
    src = e.op("aten.expand", [conv.operand(b["src"], "aten.copy")], {"size": list(shape)})
    conv.names[n] = e.op("aten._to_copy", [src], {"dtype": dt}, out="%" + n.name)
    return e.lines


def _result_type(n, k=None):
    """(dtype, shape) of node n's result (or of its k-th result) from its meta; the
    rules of every decomp module read their results' types through it."""
    from .fx import UnsupportedOp, meta_type, meta_values
    if k is None:
        t = meta_type(n)
    else:
        vals = meta_values(n)
        v = vals[k] if k < len(vals) else None
        t = (v.dtype, tuple(v.shape)) if hasattr(v, "dtype") else None
    if t is None:
        raise UnsupportedOp(["%s: a result of unknown dtype or shape" % n.target])
    return t


def angle(conv, n, b):
    """angle of a real tensor: pi where x < 0, else 0; NaN stays NaN."""
    dt, _ = _result_type(n)
    e = _Emit(conv, n)
    x = e.op("aten._to_copy", [conv.operand(b["self"], "aten.angle")], {"dtype": dt})
    a = e.op("aten.where", [e.op("aten.lt", [x, "0"]), fmt_number(math.pi), "0.0"])
    nan = e.op("aten.mul", [x, "0.0"])  # NaN where x is NaN, with a zero gradient (angle's is 0)
    conv.names[n] = e.op("aten.where", [e.op("aten.isnan", [x]), nan, a], out="%" + n.name)
    return e.lines


def linalg_cross(conv, n, b):
    """The cross product along dim (size 3): a1*b2 - a2*b1, a2*b0 - a0*b2, a0*b1 - a1*b0."""
    dt, shape = _result_type(n)
    d = _dim(b.get("dim", -1), len(shape))
    e = _Emit(conv, n)
    xs = [e.op("aten.expand", [conv.operand(b[k], "aten.linalg_cross")], {"size": list(shape)})
          for k in ("self", "other")]
    a, c = [[e.op("aten.slice", [x], {"dim": d, "start": i, "end": i + 1}) for i in range(3)] for x in xs]
    parts = [e.op("aten.sub", [e.op("aten.mul", [a[i], c[j]]), e.op("aten.mul", [a[j], c[i]])])
             for i, j in ((1, 2), (2, 0), (0, 1))]
    conv.names[n] = e.op("aten.cat", parts, {"dim": d}, out="%" + n.name)
    return e.lines


def batch_norm_with_update(conv, n, b):
    """_batch_norm_with_update_functional (training batch norm, PyTorch 2.x): the
    functional legit form, plus its reserve output (an empty u8 tensor)."""
    what = "aten._batch_norm_with_update_functional"
    ops = [conv.operand(b[k], what) for k in ("input", "weight", "bias", "running_mean", "running_var")]
    res = [_out(n, k) for k in (0, 1, 2, 4, 5)]
    from .fx import fmt_attr
    e = _Emit(conv, n)
    e.lines.append("%s = aten._native_batch_norm_legit_functional(%s) {training=true, momentum=%s, eps=%s}"
                   % (", ".join(res), ", ".join(ops), fmt_attr(float(b["momentum"])), fmt_attr(float(b["eps"]))))
    reserve = e.op("aten.full", [], {"shape": [0], "value": 0, "dtype": torch.uint8}, out=_out(n, 3))
    conv.names[n] = res[:3] + [reserve] + res[3:]
    return e.lines


def batch_norm_legit(conv, n, b):
    """_native_batch_norm_legit: no_stats (training without running statistics) and
    _no_training (inference with running statistics, empty saved statistics)."""
    from .fx import UnsupportedOp, fmt_attr, meta_type
    ov = n.target._overloadname
    what = str(n.target)
    eval_ = n.target is torch.ops.aten._native_batch_norm_legit_no_training.default
    if not eval_ and ov != "no_stats":
        raise UnsupportedOp(["%s (it updates the running statistics in place)" % what])
    stats = ("running_mean", "running_var") if eval_ else ()
    ops = [conv.operand(b.get(k), what) for k in ("input", "weight", "bias") + stats]
    ops += ["none"] * (5 - len(ops))
    dt = meta_type(n)
    e = _Emit(conv, n)
    res = [_out(n, k) if not eval_ or k == 0 else e.tmp() for k in range(3)]
    e.lines.append("%s = aten.native_batch_norm(%s) {training=%s, momentum=%s, eps=%s}"
                   % (", ".join(res), ", ".join(ops), "false" if eval_ else "true",
                      fmt_attr(float(b["momentum"])), fmt_attr(float(b["eps"]))))
    if eval_:  # PyTorch saves nothing in inference: empty statistics
        sdt = dt[0] if dt is not None else torch.float32
        res[1:] = [e.op("aten.full", [], {"shape": [0], "value": 0, "dtype": sdt}, out=_out(n, k)) for k in (1, 2)]
    conv.names[n] = res
    return e.lines


def _rows_last(e, x, shape):
    """[N, C, d...] -> [N*d..., C]: the class dim last, every other dim a row."""
    perm = [0] + list(range(2, len(shape))) + [1]
    return e.op("aten.reshape", [e.op("aten.permute", [x], {"dims": perm})], {"shape": [-1, shape[1]]})


def nll_loss2d(conv, n, b):
    """nll_loss2d_forward / _backward: nll_loss over [N, C, H, W] as nll_loss over
    [N*H*W, C] rows (the class dim moved last), reshaped back."""
    from .fx import UnsupportedOp
    what = str(n.target)
    dt, shape = _shape(conv, b["self"])
    if len(shape) < 3 or any(not isinstance(d, int) for d in shape):
        raise UnsupportedOp(["%s of a %s input" % (what, list(shape))])
    red, ign = int(b["reduction"]), b["ignore_index"]
    e = _Emit(conv, n)
    x = _rows_last(e, conv.operand(b["self"], what), shape)
    t = e.op("aten.reshape", [conv.operand(b["target"], what)], {"shape": [-1]})
    w = conv.operand(b.get("weight"), what)
    attrs = {"reduction": red, "ignore_index": ign}
    if n.target is torch.ops.aten.nll_loss2d_forward.default:
        out, tw = (_out(n, k) for k in (0, 1))
        res = out if red else e.tmp()
        e.lines.append("%s, %s = aten.nll_loss_forward(%s, %s, %s) {reduction=%d, ignore_index=%d}"
                       % (res, tw, x, t, w, red, ign))
        if not red:
            e.op("aten.reshape", [res], {"shape": [shape[0]] + list(shape[2:])}, out=out)
        conv.names[n] = [out, tw]
        return e.lines
    g = conv.operand(b["grad_output"], what)
    if not red:
        g = e.op("aten.reshape", [g], {"shape": [-1]})
    gi = e.op("aten.nll_loss_backward", [g, x, t, w, conv.operand(b["total_weight"], what)], attrs)
    gi = e.op("aten.reshape", [gi], {"shape": [shape[0]] + list(shape[2:]) + [shape[1]]})
    back = [0, len(shape) - 1] + list(range(1, len(shape) - 1))
    conv.names[n] = e.op("aten.permute", [gi], {"dims": back}, out="%" + n.name)
    return e.lines


RULES = {
    "nll_loss2d_forward": nll_loss2d, "nll_loss2d_backward": nll_loss2d,
    "angle": angle, "_batch_norm_with_update_functional": batch_norm_with_update,
    "_native_batch_norm_legit": batch_norm_legit, "_native_batch_norm_legit_no_training": batch_norm_legit, "linalg_cross": linalg_cross,
    "clamp": clamp, "clamp_min": _clamp("min"), "clamp_max": _clamp("max"), "dot": dot, "linalg_vector_norm": linalg_vector_norm,
    "constant_pad_nd": constant_pad_nd, "copy": copy,
    "native_dropout_backward": native_dropout_backward, "_safe_softmax": safe_softmax,
    "zeros": _filled(0), "ones": _filled(1), "empty": _filled(0), "full": _filled(None),
    "scalar_tensor": lambda conv, n, b: _filled(b["s"])(conv, n, b),
    "select": select, "select_backward": select_backward, "slice_backward": slice_backward,
    "lift_fresh_copy": lift_fresh_copy,
    "split": split, "split_with_sizes": split_with_sizes, "unbind": unbind, "cat": cat,
}
RULES.update(ATTENTION_RULES)


# The rule sets of the other decomp_* modules (they import the helpers above).
from . import decomp_index as _decomp_index  # noqa: E402
from . import decomp_math as _decomp_math  # noqa: E402
for _rules in (_decomp_math.RULES, _decomp_index.RULES):
    assert not set(_rules) & set(RULES), "an op with two rules: %s" % (set(_rules) & set(RULES))
    RULES.update(_rules)
