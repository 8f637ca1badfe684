#!/usr/bin/python3
"""Golden numerics for fusejit: small graphs, their inputs and PyTorch's outputs.

Run with Debian's Python (PyTorch 1.13 CPU + NumPy):

    /usr/bin/python3 tests/golden/gen.py

It deletes tests/golden/cases/ and writes it again from scratch, one directory per
case: graph.fj (a module whose graph is @main), in_<param>.npy for every parameter
and out_<i>.npy for every returned value, by position; for fj-golden --train also
tangent_<k>.npy, grad_<param>.npy (PyTorch's gradients, see "Gradients" below) or
nograd_reason.txt.  The output is deterministic.

How references are computed: gen.py parses each graph.fj itself and evaluates it op
by op with PyTorch (torch.ops.aten where possible).  Every op is evaluated twice:
  * a "dtype run" on the values in their real dtypes (PyTorch's own kernels; when
    PyTorch 1.13 CPU lacks an f16/bf16 kernel, f16/bf16 operands are widened to f32
    and the f32 results narrowed back).  It fixes each result's dtype and shape, and
    serves as an independent check of conditioning: gen.py warns when PyTorch's own
    result is further from the reference than the runner's tolerance;
  * a "precise run" with every floating operand widened to f64 (and the default dtype
    set to f64, floating dtype attributes mapped to f64), whose result is rounded once
    to the dtype of the dtype run.  That rounded value is the reference, and is what
    the next op sees (one rounding per op, as ATen eager does).
A third run keeps floating intermediates unrounded (as a fused region does) and gen.py
warns when that changes an output by more than half the tolerance.
So f16/bf16 references are "computed in f64, rounded once", and f32 references do not
inherit PyTorch's vectorised approximations or f32 accumulation.  Weak scalars
(literal operands) follow PyTorch's promotion (torch._prims_common.elementwise_dtypes).
"""
import os
import re
import shutil
import sys
import zlib

import numpy as np
import torch
from torch._prims_common import elementwise_dtypes, ELEMENTWISE_TYPE_PROMOTION_KIND

torch.set_num_threads(1)
torch.manual_seed(0)

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_DIR = os.path.join(HERE, "cases")
A = torch.ops.aten

DT = {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
    "u8": torch.uint8, "bool": torch.bool,
}
DT_NAME = {v: k for k, v in DT.items()}
NP_DT = {"f64": "<f8", "f32": "<f4", "f16": "<f2", "bf16": "<u2", "i64": "<i8", "i32": "<i4",
         "i16": "<i2", "i8": "|i1", "u8": "|u1", "bool": "|b1"}
FLOATS = ("f64", "f32", "f16", "bf16")
INTS = ("i64", "i32", "i16", "i8", "u8")
LOWP = (torch.float16, torch.bfloat16)
TOL = {"f32": 1e-5, "f16": 1e-3, "bf16": 1e-2, "f64": 1e-12}

# Every aten op of IR.md §3 but native_dropout (no golden: PyTorch's random stream
# cannot be matched).  gen.py asserts that each is covered by some case.
ATEN_OPS = """
abs neg exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan tanh sinh cosh
asin acos atan asinh acosh atanh sigmoid relu gelu silu erf erfc floor ceil round trunc sign
logical_not bitwise_not isnan isinf leaky_relu elu softplus hardsigmoid hardswish hardtanh
add sub mul div pow maximum minimum atan2 fmod remainder eq ne lt le gt ge logical_and
logical_or logical_xor bitwise_and bitwise_or bitwise_xor
where clamp lerp addcmul _to_copy masked_fill
sum mean amax amin prod logsumexp var var_mean argmax argmin
_softmax softmax _log_softmax log_softmax native_layer_norm layer_norm rms_norm
native_batch_norm _native_batch_norm_legit_functional
nll_loss_forward
threshold_backward gelu_backward sigmoid_backward tanh_backward silu_backward
leaky_relu_backward hardtanh_backward _softmax_backward_data _log_softmax_backward_data
native_layer_norm_backward native_batch_norm_backward nll_loss_backward embedding_dense_backward
view reshape permute transpose t expand unsqueeze squeeze slice cat flip clone detach alias
full zeros_like ones_like full_like new_zeros new_ones new_full arange cumsum
_reshape_alias _unsafe_view
mm bmm addmm matmul linear
embedding gather index_select scatter_add index_add
""".split()

# ----------------------------------------------------------------------------
# A parser for the .fj text (IR.md §1), enough for what this file writes.

TOKEN_RE = re.compile(r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<val>%[A-Za-z0-9_.]+)
  | (?P<gname>@[A-Za-z0-9_.]+)
  | (?P<num>-?(?:[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|[0-9]+|inf|nan)(?![A-Za-z0-9_]))
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<punct>[(){}\[\],=:*])
""", re.X)


class Sym:
    """A dim expression: a product of ints and symbols."""
    def __init__(self, terms):
        self.terms = terms

    def eval(self, env):
        v = 1
        for t in self.terms:
            v *= env[t] if isinstance(t, str) else t
        return v


class Num:
    def __init__(self, text):
        self.text = text
        if text in ("inf", "-inf", "nan", "-nan"):
            self.v = float(text)
        elif re.fullmatch(r"-?[0-9]+", text):
            self.v = int(text)
        else:
            self.v = float(text)


class Parser:
    def __init__(self, text, fname):
        self.toks = []
        pos = 0
        line = 1
        while pos < len(text):
            m = TOKEN_RE.match(text, pos)
            if not m:
                raise SyntaxError("%s:%d: bad token near %r" % (fname, line, text[pos:pos + 20]))
            kind = m.lastgroup
            s = m.group(kind)
            if kind != "ws":
                self.toks.append((kind, s, line))
            line += s.count("\n")
            pos = m.end()
        self.i = 0
        self.fname = fname

    def peek(self, k=0):
        return self.toks[self.i + k] if self.i + k < len(self.toks) else ("eof", "", 0)

    def next(self):
        t = self.peek()
        self.i += 1
        return t

    def expect(self, s):
        t = self.next()
        if t[1] != s:
            raise SyntaxError("%s:%d: expected %r, got %r" % (self.fname, t[2], s, t[1]))
        return t

    def module(self):
        graphs = {}
        while self.peek()[0] != "eof":
            g = self.graph()
            graphs[g["name"]] = g
        return graphs

    def graph(self):
        self.expect("graph")
        name = self.next()[1][1:]
        self.expect("(")
        params = []
        while self.peek()[1] != ")":
            pn = self.next()[1][1:]
            self.expect(":")
            ty = self.type_()
            if self.peek()[1] == "{":
                self.attrs()
            params.append((pn, ty))
            if self.peek()[1] == ",":
                self.next()
        self.expect(")")
        self.expect("{")
        stmts = []
        rets = None
        while True:
            if self.peek()[1] == "return":
                self.next()
                rets = []
                while self.peek()[1] != "}":
                    rets.append(self.operand())
                    if self.peek()[1] == ",":
                        self.next()
                self.expect("}")
                break
            stmts.append(self.stmt())
        return {"name": name, "params": params, "stmts": stmts, "rets": rets}

    def type_(self):
        dt = self.next()[1]
        assert dt in DT, dt
        self.expect("[")
        dims = []
        while self.peek()[1] != "]":
            dims.append(self.dim())
            if self.peek()[1] == ",":
                self.next()
        self.expect("]")
        return (dt, dims)

    def dim(self):
        terms = [self.term()]
        while self.peek()[1] == "*":
            self.next()
            terms.append(self.term())
        return Sym(terms)

    def term(self):
        k, s, _ = self.next()
        return int(s) if k == "num" else s

    def operand(self):
        k, s, ln = self.next()
        if k == "val":
            return ("val", s[1:])
        if k == "num":
            return ("lit", Num(s).v)
        if s in ("true", "false"):
            return ("lit", s == "true")
        if s == "none":
            return ("none", None)
        raise SyntaxError("%s:%d: bad operand %r" % (self.fname, ln, s))

    def attrs(self):
        self.expect("{")
        out = {}
        while self.peek()[1] != "}":
            n = self.next()[1]
            if self.peek()[1] == "=":
                self.next()
                out[n] = self.value()
            else:
                out[n] = True
            if self.peek()[1] == ",":
                self.next()
        self.expect("}")
        return out

    def value(self):
        k, s, _ = self.peek()
        if s == "[":
            self.next()
            vs = []
            while self.peek()[1] != "]":
                vs.append(self.value())
                if self.peek()[1] == ",":
                    self.next()
            self.next()
            return vs
        if k == "str":
            self.next()
            return bytes(s[1:-1], "utf-8").decode("unicode_escape")
        if s in ("true", "false"):
            self.next()
            return s == "true"
        if s == "none":
            self.next()
            return None
        if s in DT:
            self.next()
            return DT[s]
        if k == "num" and self.peek(1)[1] != "*":
            self.next()
            return Num(s).v
        return self.dim()

    def stmt(self):
        res = [self.next()[1][1:]]
        while self.peek()[1] == ",":
            self.next()
            res.append(self.next()[1][1:])
        self.expect("=")
        op = self.next()[1]
        self.expect("(")
        ops = []
        while self.peek()[1] != ")":
            ops.append(self.operand())
            if self.peek()[1] == ",":
                self.next()
        self.expect(")")
        attrs = self.attrs() if self.peek()[1] == "{" else {}
        types = None
        if self.peek()[1] == ":":
            self.next()
            types = [self.type_()]
            while self.peek()[1] == ",":
                self.next()
                types.append(self.type_())
        return {"res": res, "op": op, "operands": ops, "attrs": attrs, "types": types}


# ----------------------------------------------------------------------------
# The op table: each entry f(C, operands, attrs) -> tensor or tuple.
# C.hi: precise run; C.dt(d): dtype attribute as used in this run; C.odt[i]: the
# operand's dtype in the real graph; C.syms: symbol bindings.

def _dims(C, at, key="dims"):
    d = at.get(key)
    if d is None:
        return []
    return [C.ival(v) for v in d]


def _shape(C, s):
    return [C.ival(v) for v in s]


def _promote_literals(ops, idx=None):
    """Replace Python literals by 0-d tensors of the promoted dtype (weak scalars)."""
    idx = list(range(len(ops))) if idx is None else idx
    parts = [ops[i] for i in idx]
    if all(isinstance(p, torch.Tensor) for p in parts):
        return ops
    _, dt = elementwise_dtypes(*parts, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    out = list(ops)
    for i in idx:
        if not isinstance(out[i], torch.Tensor):
            out[i] = torch.tensor(out[i], dtype=dt)
    return out


def pw(fn, idx=None):
    def f(C, a, at):
        return fn(C, _promote_literals(a, idx), at)
    return f


def unary(name, **fixed):
    def f(C, a, at):
        kw = dict(fixed)
        kw.update(at)
        return getattr(A, name)(a[0], **kw)
    return f


def _reduce_all_dims(x, d):
    return d if d else list(range(x.dim()))


def _sum(C, a, at):
    x = a[0]
    return A.sum.dim_IntList(x, _dims(C, at), at.get("keepdim", False), dtype=C.dt(at.get("dtype")))


def _mean(C, a, at):
    x = a[0]
    return A.mean.dim(x, _dims(C, at), at.get("keepdim", False), dtype=C.dt(at.get("dtype")))


def _prod(C, a, at):
    x = a[0]
    dims = sorted({d % max(x.dim(), 1) for d in _reduce_all_dims(x, _dims(C, at))}, reverse=True)
    keep = at.get("keepdim", False)
    dt = C.dt(at.get("dtype"))
    if x.dim() == 0:
        return torch.prod(x, dtype=dt)
    first = True
    for d in dims:
        x = torch.prod(x, d, keepdim=keep, dtype=dt if first else None)
        first = False
    return x


def _var(C, a, at):
    x = a[0]
    d = _dims(C, at) or None
    return torch.var(x, dim=d, correction=at.get("correction", 1), keepdim=at.get("keepdim", False))


def _var_mean(C, a, at):
    x = a[0]
    d = _dims(C, at) or None
    return torch.var_mean(x, dim=d, correction=at.get("correction", 1), keepdim=at.get("keepdim", False))


def _softmax_like(log, private):
    def f(C, a, at):
        x = a[0]
        dim = at["dim"]
        h2f = at.get("half_to_float", False)
        dt = C.dt(at.get("dtype"))
        if h2f:
            dt = torch.float64 if C.hi else torch.float32
        if private and dt is None:
            return (A._log_softmax if log else A._softmax)(x, dim, False)
        return (torch.log_softmax if log else torch.softmax)(x, dim, dtype=dt)
    return f


def _rms_norm(C, a, at):
    x, w = a[0], a[1]
    ns = at["normalized_shape"]
    eps = at.get("eps")
    if eps is None:
        eps = torch.finfo(C.odt[0]).eps
    dims = list(range(x.dim() - len(ns), x.dim()))
    acc = torch.float64 if C.hi else (x.dtype if x.dtype == torch.float64 else torch.float32)
    xf = x.to(acc)
    r = xf * torch.rsqrt(torch.mean(xf * xf, dims, keepdim=True) + eps)
    if w is not None:
        r = r * w.to(acc)
    out_dt = x.dtype if w is None else torch.promote_types(x.dtype, w.dtype)
    return r.to(out_dt)


def _bn(C, a, at):
    x, w, b, rm, rv = a
    rm = None if rm is None else rm.clone()
    rv = None if rv is None else rv.clone()
    return A.native_batch_norm(x, w, b, rm, rv, at["training"], at.get("momentum", 0.1), at.get("eps", 1e-5))


def _bn_functional(C, a, at):
    x, w, b, rm, rv = a
    rm = rm.clone()
    rv = rv.clone()
    out, sm, sr = A.native_batch_norm(x, w, b, rm, rv, at["training"], at.get("momentum", 0.1), at.get("eps", 1e-5))
    return out, sm, sr, rm, rv


def _squeeze(C, a, at):
    x = a[0]
    d = at.get("dims")
    if not d:
        return x.squeeze()
    nd = max(x.dim(), 1)
    ds = sorted({v % nd for v in d}, reverse=True)
    for v in ds:
        if x.dim() > 0 and x.shape[v] == 1:
            x = x.squeeze(v)
    return x


def _full(C, a, at):
    v = at["value"]
    dt = C.dt(at.get("dtype"))
    return torch.full(_shape(C, at["shape"]), v, dtype=dt)


def _arange(C, a, at):
    start = at.get("start", 0)
    step = at.get("step", 1)
    return torch.arange(start, at["end"], step, dtype=C.dt(at.get("dtype")))


def _where(C, a, at):
    c, x, y = _promote_literals(a, [1, 2])
    if not isinstance(c, torch.Tensor):
        c = torch.tensor(c)
    return torch.where(c, x, y)


def _masked_fill(C, a, at):
    x, m, v = a
    return x.masked_fill(m, v)


OPS = {
    # unary
    **{n: unary(n) for n in """abs neg exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos
        tan tanh sinh cosh asin acos atan asinh acosh atanh sigmoid relu silu erf erfc floor ceil trunc
        sign logical_not bitwise_not isnan isinf hardsigmoid hardswish""".split()},
    "gelu": lambda C, a, at: A.gelu(a[0], approximate=at.get("approximate", "none")),
    "round": lambda C, a, at: (A.round.decimals(a[0], decimals=at["decimals"]) if at.get("decimals", 0) != 0
                               else A.round(a[0])),
    "leaky_relu": lambda C, a, at: A.leaky_relu(a[0], at.get("negative_slope", 0.01)),
    "elu": lambda C, a, at: A.elu(a[0], at.get("alpha", 1), at.get("scale", 1), at.get("input_scale", 1)),
    "softplus": lambda C, a, at: A.softplus(a[0], at.get("beta", 1), at.get("threshold", 20)),
    "hardtanh": lambda C, a, at: A.hardtanh(a[0], at.get("min_val", -1), at.get("max_val", 1)),
    # binary
    "add": pw(lambda C, a, at: A.add(a[0], a[1], alpha=at.get("alpha", 1))),
    "sub": pw(lambda C, a, at: A.sub(a[0], a[1], alpha=at.get("alpha", 1))),
    "div": pw(lambda C, a, at: torch.div(a[0], a[1], rounding_mode=at.get("rounding_mode"))),
    **{n: pw(lambda C, a, at, n=n: getattr(A, n)(a[0], a[1])) for n in
       """mul pow maximum minimum atan2 fmod remainder eq ne lt le gt ge logical_and logical_or
          logical_xor bitwise_and bitwise_or bitwise_xor""".split()},
    # other pointwise
    "where": _where,
    "clamp": lambda C, a, at: torch.clamp(a[0], min=at.get("min"), max=at.get("max")),
    "lerp": pw(lambda C, a, at: torch.lerp(a[0], a[1], a[2])),
    "addcmul": pw(lambda C, a, at: torch.addcmul(a[0], a[1], a[2], value=at.get("value", 1))),
    "_to_copy": lambda C, a, at: a[0].to(C.dt(at.get("dtype")) or a[0].dtype, copy=True),
    "masked_fill": _masked_fill,
    # reductions
    "sum": _sum,
    "mean": _mean,
    "amax": lambda C, a, at: A.amax(a[0], _dims(C, at), at.get("keepdim", False)),
    "amin": lambda C, a, at: A.amin(a[0], _dims(C, at), at.get("keepdim", False)),
    "prod": _prod,
    "logsumexp": lambda C, a, at: A.logsumexp(a[0], _reduce_all_dims(a[0], _dims(C, at)), at.get("keepdim", False)),
    "var": _var,
    "var_mean": _var_mean,
    "argmax": lambda C, a, at: A.argmax(a[0], at.get("dim"), at.get("keepdim", False)),
    "argmin": lambda C, a, at: A.argmin(a[0], at.get("dim"), at.get("keepdim", False)),
    # normalization
    "_softmax": _softmax_like(False, True),
    "softmax": _softmax_like(False, False),
    "_log_softmax": _softmax_like(True, True),
    "log_softmax": _softmax_like(True, False),
    "native_layer_norm": lambda C, a, at: A.native_layer_norm(a[0], _shape(C, at["normalized_shape"]), a[1], a[2],
                                                              at.get("eps", 1e-5)),
    "layer_norm": lambda C, a, at: A.layer_norm(a[0], _shape(C, at["normalized_shape"]), a[1], a[2],
                                                at.get("eps", 1e-5)),
    "rms_norm": _rms_norm,
    "native_batch_norm": _bn,
    "_native_batch_norm_legit_functional": _bn_functional,
    "nll_loss_forward": lambda C, a, at: A.nll_loss_forward(a[0], a[1], a[2], at.get("reduction", 1),
                                                            at.get("ignore_index", -100)),
    # backward
    "threshold_backward": lambda C, a, at: A.threshold_backward(a[0], a[1], at["threshold"]),
    "gelu_backward": lambda C, a, at: A.gelu_backward(a[0], a[1], approximate=at.get("approximate", "none")),
    "sigmoid_backward": lambda C, a, at: A.sigmoid_backward(a[0], a[1]),
    "tanh_backward": lambda C, a, at: A.tanh_backward(a[0], a[1]),
    "silu_backward": lambda C, a, at: A.silu_backward(a[0], a[1]),
    "leaky_relu_backward": lambda C, a, at: A.leaky_relu_backward(a[0], a[1], at["negative_slope"],
                                                                  at["self_is_result"]),
    "hardtanh_backward": lambda C, a, at: A.hardtanh_backward(a[0], a[1], at["min_val"], at["max_val"]),
    "_softmax_backward_data": lambda C, a, at: A._softmax_backward_data(a[0], a[1], at["dim"],
                                                                        C.dt(at["input_dtype"])),
    "_log_softmax_backward_data": lambda C, a, at: A._log_softmax_backward_data(a[0], a[1], at["dim"],
                                                                                C.dt(at["input_dtype"])),
    "native_layer_norm_backward": lambda C, a, at: A.native_layer_norm_backward(
        a[0], a[1], _shape(C, at["normalized_shape"]), a[2], a[3], a[4], a[5], at["output_mask"]),
    "native_batch_norm_backward": lambda C, a, at: A.native_batch_norm_backward(
        a[0], a[1], a[2], a[3], a[4], a[5], a[6], at["train"], at["eps"], at["output_mask"]),
    "nll_loss_backward": lambda C, a, at: A.nll_loss_backward(a[0], a[1], a[2], a[3], at.get("reduction", 1),
                                                              at.get("ignore_index", -100), a[4]),
    "embedding_dense_backward": lambda C, a, at: A.embedding_dense_backward(
        a[0], a[1], at["num_weights"], at["padding_idx"], at["scale_grad_by_freq"]),
    # shape
    "view": lambda C, a, at: a[0].reshape(_shape(C, at["shape"])),
    "reshape": lambda C, a, at: a[0].reshape(_shape(C, at["shape"])),
    "_reshape_alias": lambda C, a, at: a[0].reshape(_shape(C, at["shape"])),
    "_unsafe_view": lambda C, a, at: a[0].reshape(_shape(C, at["shape"])),
    "permute": lambda C, a, at: a[0].permute(at["dims"]),
    "transpose": lambda C, a, at: a[0].transpose(at["dim0"], at["dim1"]),
    "t": lambda C, a, at: a[0].t(),
    "expand": lambda C, a, at: a[0].expand(_shape(C, at["size"])),
    "unsqueeze": lambda C, a, at: a[0].unsqueeze(at["dim"]),
    "squeeze": _squeeze,
    "slice": lambda C, a, at: A.slice(a[0], at.get("dim", 0), at.get("start"), at.get("end"), at.get("step", 1)),
    "cat": lambda C, a, at: torch.cat(list(a), at.get("dim", 0)),
    "flip": lambda C, a, at: a[0].flip(at["dims"]),
    "clone": lambda C, a, at: a[0].clone(),
    "detach": lambda C, a, at: a[0].detach(),
    "alias": lambda C, a, at: A.alias(a[0]),
    "full": _full,
    "zeros_like": lambda C, a, at: torch.zeros_like(a[0], dtype=C.dt(at.get("dtype"))),
    "ones_like": lambda C, a, at: torch.ones_like(a[0], dtype=C.dt(at.get("dtype"))),
    "full_like": lambda C, a, at: torch.full_like(a[0], at["value"], dtype=C.dt(at.get("dtype"))),
    "new_zeros": lambda C, a, at: a[0].new_zeros(_shape(C, at["shape"]), dtype=C.dt(at.get("dtype"))),
    "new_ones": lambda C, a, at: a[0].new_ones(_shape(C, at["shape"]), dtype=C.dt(at.get("dtype"))),
    "new_full": lambda C, a, at: a[0].new_full(_shape(C, at["shape"]), at["value"], dtype=C.dt(at.get("dtype"))),
    "arange": _arange,
    "cumsum": lambda C, a, at: torch.cumsum(a[0], at["dim"], dtype=C.dt(at.get("dtype"))),
    # matrix
    "mm": lambda C, a, at: torch.mm(a[0], a[1]),
    "bmm": lambda C, a, at: torch.bmm(a[0], a[1]),
    "addmm": lambda C, a, at: torch.addmm(a[0], a[1], a[2], beta=at.get("beta", 1), alpha=at.get("alpha", 1)),
    "matmul": lambda C, a, at: torch.matmul(a[0], a[1]),
    "linear": lambda C, a, at: A.linear(a[0], a[1], a[2]),
    # indexing
    "embedding": lambda C, a, at: A.embedding(a[0], a[1], at.get("padding_idx", -1),
                                              at.get("scale_grad_by_freq", False), at.get("sparse", False)),
    "gather": lambda C, a, at: torch.gather(a[0], at["dim"], a[1]),
    "index_select": lambda C, a, at: torch.index_select(a[0], at["dim"], a[1]),
    "scatter_add": lambda C, a, at: torch.scatter_add(a[0], at["dim"], a[1], a[2]),
    "index_add": lambda C, a, at: torch.index_add(a[0], at["dim"], a[1], a[2], alpha=at.get("alpha", 1)),
}
assert set(OPS) == set(ATEN_OPS), set(ATEN_OPS) ^ set(OPS)


class Ctx:
    def __init__(self, hi, syms, odt, lowp_to_f32=False):
        self.hi = hi
        self.syms = syms
        self.odt = odt
        self.lowp_to_f32 = lowp_to_f32

    def dt(self, d):
        if d is None:
            return None
        if self.hi and d.is_floating_point:
            return torch.float64
        if self.lowp_to_f32 and d in LOWP:
            return torch.float32
        return d

    def ival(self, v):
        return v.eval(self.syms) if isinstance(v, Sym) else v


def _as_tuple(r):
    return tuple(r) if isinstance(r, (tuple, list)) else (r,)


def _widen(v, to):
    if isinstance(v, torch.Tensor) and v.is_floating_point():
        return v.to(to)
    return v


def run_op(st, ref_ops, nat_ops, fus_ops, syms, coverage):
    name = st["op"]
    assert name.startswith("aten."), name
    op = name[5:]
    fn = OPS[op]
    at = st["attrs"]
    odt = [o.dtype if isinstance(o, torch.Tensor) else None for o in ref_ops]
    for o in (ref_ops[1:] if op == "where" else ref_ops):
        if isinstance(o, torch.Tensor):
            coverage.setdefault(op, set()).add(DT_NAME[o.dtype])
            break
    else:
        coverage.setdefault(op, set()).add(DT_NAME[at["dtype"]] if isinstance(at.get("dtype"), torch.dtype) else "-")

    # dtype run: PyTorch in the real dtypes (f16/bf16 widened to f32 where CPU lacks a kernel)
    try:
        nat = _as_tuple(fn(Ctx(False, syms, odt), nat_ops, at))
    except RuntimeError as e:
        lows = {o.dtype for o in nat_ops if isinstance(o, torch.Tensor) and o.dtype in LOWP}
        lows |= {v for v in at.values() if isinstance(v, torch.dtype) and v in LOWP}
        if len(lows) != 1 or "not implemented for" not in str(e) and "expected scalar type" not in str(e):
            raise
        low = lows.pop()
        nat = _as_tuple(fn(Ctx(False, syms, odt, lowp_to_f32=True),
                           [_widen(o, torch.float32) if isinstance(o, torch.Tensor) and o.dtype in LOWP else o
                            for o in nat_ops], at))
        nat = tuple(r.to(low) if r is not None and r.dtype == torch.float32 else r for r in nat)

    # precise run: floating operands in f64, default dtype f64
    torch.set_default_dtype(torch.float64)
    try:
        hi = _as_tuple(fn(Ctx(True, syms, odt), [_widen(o, torch.float64) for o in ref_ops], at))
    finally:
        torch.set_default_dtype(torch.float32)
    # the same without rounding floating operands in between (as a fused region would):
    # only used to check that the references are insensitive to where rounding happens
    torch.set_default_dtype(torch.float64)
    try:
        fus = _as_tuple(fn(Ctx(True, syms, odt), [_widen(o, torch.float64) for o in fus_ops], at))
    finally:
        torch.set_default_dtype(torch.float32)
    assert len(hi) == len(nat), name
    fused = []
    for f, n in zip(fus, nat):
        if f is None or op == "_to_copy" or not n.is_floating_point():
            fused.append(None if f is None else f.to(n.dtype))
        else:
            fused.append(f)
    ref = []
    for h, n in zip(hi, nat):
        if h is None or n is None:
            assert h is None and n is None, name
            ref.append(None)
            continue
        assert tuple(h.shape) == tuple(n.shape), (name, h.shape, n.shape)
        if not n.is_floating_point():
            assert h.dtype == n.dtype, (name, h.dtype, n.dtype)
        ref.append(h.to(n.dtype).contiguous())
    return ref, [None if n is None else n.contiguous() for n in nat], fused


# ----------------------------------------------------------------------------
# Inputs

class U:      # uniform floats
    def __init__(self, lo=-1.0, hi=1.0):
        self.lo, self.hi = lo, hi

    def __call__(self, rng, shape):
        return rng.uniform(self.lo, self.hi, shape)


class I:      # integers in [lo, hi)
    def __init__(self, lo=0, hi=10, nonzero=False):
        self.lo, self.hi, self.nonzero = lo, hi, nonzero

    def __call__(self, rng, shape):
        v = rng.integers(self.lo, self.hi, shape)
        if self.nonzero:
            v[v == 0] = 1
        return v


class Grid:   # multiples of step in [lo, hi] (exact ties and zeros)
    def __init__(self, lo, hi, step=0.25):
        self.lo, self.hi, self.step = lo, hi, step

    def __call__(self, rng, shape):
        n = int(round((self.hi - self.lo) / self.step))
        return self.lo + rng.integers(0, n + 1, shape) * self.step


class B:      # bools
    def __init__(self, p=0.5):
        self.p = p

    def __call__(self, rng, shape):
        return rng.uniform(0, 1, shape) < self.p


class Vals:   # explicit values, tiled to the shape
    def __init__(self, vals):
        self.vals = np.array(vals, dtype=np.float64) if not isinstance(vals, np.ndarray) else vals

    def __call__(self, rng, shape):
        n = int(np.prod(shape))
        return np.resize(self.vals, n).reshape(shape)


class Fn:     # any function of (rng, shape)
    def __init__(self, f):
        self.f = f

    def __call__(self, rng, shape):
        return self.f(rng, shape)


class SignedMag:  # random sign * uniform(lo, hi): divisors away from zero
    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def __call__(self, rng, shape):
        return rng.uniform(self.lo, self.hi, shape) * np.where(rng.uniform(0, 1, shape) < 0.5, -1.0, 1.0)


def default_spec(dt):
    if dt == "bool":
        return B()
    if dt in INTS:
        return I(0, 10)
    return U(-1, 1)


def make_input(rng, spec, dt, shape):
    v = spec(rng, tuple(shape))
    v = np.asarray(v)
    tdt = DT[dt]
    if dt == "bool":
        return torch.from_numpy(v.astype(bool).copy())
    if dt in INTS:
        assert np.all(v == np.round(v)), "integer input with fractions"
        return torch.from_numpy(v.astype(np.int64).copy()).to(tdt)
    return torch.from_numpy(v.astype(np.float64).copy()).to(tdt)


def save_npy(path, t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        arr = t.view(torch.int16).numpy().view(np.uint16)
    else:
        arr = t.numpy()
    arr = np.require(arr, requirements="C")
    assert arr.shape == tuple(t.shape), (arr.shape, t.shape)
    assert arr.dtype.str == NP_DT[DT_NAME[t.dtype]], (arr.dtype.str, t.dtype)
    np.save(path, arr, allow_pickle=False)


def rel_l2(out, ref):
    o = out.double().flatten()
    r = ref.double().flatten()
    fin = torch.isfinite(r)
    if not torch.equal(fin, torch.isfinite(o)) or not torch.equal(torch.isnan(r), torch.isnan(o)):
        return float("inf")
    if fin.sum() < r.numel():
        if not torch.equal(r[~fin & ~torch.isnan(r)], o[~fin & ~torch.isnan(r)]):
            return float("inf")
    o, r = o[fin], r[fin]
    d = torch.linalg.norm(o - r).item()
    n = torch.linalg.norm(r).item()
    return d / n if n > 0 else d


# ----------------------------------------------------------------------------
# Cases

CASES = []


def case(name, text, dims=None, inputs=None, nonfinite=False):
    assert re.fullmatch(r"[a-z0-9_]+", name), name
    assert name not in [c["name"] for c in CASES], name
    CASES.append({"name": name, "text": text.strip() + "\n", "dims": dims or {}, "inputs": inputs or {},
                  "nonfinite": nonfinite})


def G(params, body, rets, header="graph @main"):
    """Builds graph text: params as list of (name, type); body as list of lines; rets as list of names."""
    ps = ", ".join("%%%s: %s" % (n, t) for n, t in params)
    lines = ["%s(%s) {" % (header, ps)]
    lines += ["  " + l for l in body]
    lines.append("  return " + ", ".join("%" + r if not r[0].isdigit() and r[0] != "-" else r for r in rets))
    lines.append("}")
    return "\n".join(lines)


class Body:
    """Collects `%name = op(...)` lines and the names to return."""
    def __init__(self):
        self.lines = []
        self.rets = []

    def __call__(self, name, expr, ret=True):
        self.lines.append("%%%s = %s" % (name, expr))
        if ret:
            for n in name.split(","):
                n = n.strip().lstrip("%")
                if n != "_":
                    self.rets.append(n)
        return "%" + name

    def raw(self, line, rets=()):
        self.lines.append(line)
        self.rets += list(rets)


# ---- unary family, one case per dtype -----------------------------------------
FLOAT_ONLY_UNARY = [  # (op, param)
    ("exp", "x"), ("exp2", "x"), ("expm1", "x"), ("log", "p"), ("log2", "p"), ("log10", "p"), ("log1p", "p"),
    ("sqrt", "p"), ("rsqrt", "p"), ("reciprocal", "p"), ("sin", "x"), ("cos", "x"), ("tan", "x"),
    ("tanh", "x"), ("sinh", "x"), ("cosh", "x"), ("asin", "u"), ("acos", "u"), ("atan", "x"), ("asinh", "x"),
    ("acosh", "q"), ("atanh", "u"), ("sigmoid", "x"), ("erf", "x"), ("erfc", "x"),
]


def unary_case(dt):
    b = Body()
    isf = dt in FLOATS
    n = 6 if isf else 4
    params = [(p, "%s[N,8]" % dt) for p in "xpuqrs"]
    for op, p in FLOAT_ONLY_UNARY:
        b(op, "aten.%s(%%%s)" % (op, p))
    if dt != "bool":
        for op in ("abs", "neg", "relu"):
            b(op, "aten.%s(%%x)" % op)
        for op in ("floor", "ceil", "round", "trunc"):
            b(op, "aten.%s(%%r)" % op)
    b("sign", "aten.sign(%r)")
    b("logical_not", "aten.logical_not(%r)")
    b("isnan", "aten.isnan(%s)")
    b("isinf", "aten.isinf(%s)")
    if not isf:
        b("bitwise_not", "aten.bitwise_not(%x)")
    if isf:
        b("round_d1", "aten.round(%r) {decimals=1}")
        b("round_d2", "aten.round(%x) {decimals=2}")
        b("gelu", "aten.gelu(%x)")
        b("gelu_tanh", 'aten.gelu(%x) {approximate="tanh"}')
        b("silu", "aten.silu(%x)")
        b("leaky_relu", "aten.leaky_relu(%x)")
        b("leaky_relu2", "aten.leaky_relu(%x) {negative_slope=0.2}")
        b("elu", "aten.elu(%x)")
        b("elu2", "aten.elu(%x) {alpha=1.5}")
        b("selu", "aten.elu(%x) {alpha=1.6732632423543772, scale=1.0507009873554805, input_scale=1.0}")
        b("softplus", "aten.softplus(%x)")
        b("softplus2", "aten.softplus(%x) {beta=2.0, threshold=1.0}")
        b("hardsigmoid", "aten.hardsigmoid(%r)")
        b("hardswish", "aten.hardswish(%r)")
        b("hardtanh", "aten.hardtanh(%r)")
        b("hardtanh2", "aten.hardtanh(%x) {min_val=-0.5, max_val=0.75}")
    elif dt in ("i64", "i32", "i16", "i8"):
        b("hardtanh", "aten.hardtanh(%x) {min_val=-2, max_val=3}")
    if isf:
        sp = {"x": U(-1.5, 1.5), "p": U(0.25, 4.0), "u": U(-0.9, 0.9), "q": U(1.1, 4.0),
              "r": Grid(-3, 3, 0.25),
              "s": Vals([float("nan"), float("inf"), -float("inf"), 0.0, 1.5, -2.0, 3.25, float("nan"),
                         -0.5, float("inf"), 7.0, -1e-3])}
    elif dt == "bool":
        sp = {"x": B(), "p": B(1.0), "u": B(0.0), "q": B(1.0), "r": B(), "s": B()}
    elif dt == "u8":
        sp = {"x": I(0, 6), "p": I(1, 10), "u": I(0, 2), "q": I(1, 10), "r": I(0, 6), "s": I(0, 250)}
    else:
        sp = {"x": I(-5, 6), "p": I(1, 10), "u": I(-1, 2), "q": I(1, 10), "r": I(-5, 6), "s": I(-100, 100)}
    case("unary_" + dt, G(params, b.lines, b.rets), dims={"N": n}, inputs=sp, nonfinite=True)


for _dt in FLOATS + INTS + ("bool",):
    unary_case(_dt)


# ---- binary family, one case per dtype ----------------------------------------
def binary_case(dt):
    b = Body()
    isf = dt in FLOATS
    params = [("a", "%s[N,8]" % dt), ("b", "%s[N,8]" % dt), ("c", "%s[8]" % dt), ("k", "%s[N,1]" % dt),
              ("d", "%s[N,8]" % dt), ("p", "%s[N,8]" % dt), ("e", "%s[N,8]" % dt),
              ("z", "%s[N,8]" % dt), ("w", "%s[1,8]" % dt)]
    if dt != "bool":
        b("add", "aten.add(%a, %b)")
        b("add_alpha", "aten.add(%%a, %%c) {alpha=%s}" % ("2.5" if isf else "2"))
        b("sub", "aten.sub(%a, %k)")
        b("sub_alpha", "aten.sub(%%a, %%b) {alpha=%s}" % ("0.5" if isf else "2"))
        b("mul", "aten.mul(%a, %c)")
        b("div", "aten.div(%a, %d)")
        b("div_floor", 'aten.div(%a, %d) {rounding_mode="floor"}')
        b("div_trunc", 'aten.div(%a, %d) {rounding_mode="trunc"}')
        b("pow", "aten.pow(%p, %e)")
        b("pow_lit", "aten.pow(%%c, %s)" % ("2.0" if isf else "2"))
        b("maximum", "aten.maximum(%a, %b)")
        b("minimum", "aten.minimum(%a, %k)")
        b("atan2", "aten.atan2(%a, %b)")
        b("fmod", "aten.fmod(%a, %d)")
        b("remainder", "aten.remainder(%a, %d)")
    else:
        b("add", "aten.add(%a, %b)")
        b("mul", "aten.mul(%a, %c)")
        b("maximum", "aten.maximum(%a, %b)")
        b("minimum", "aten.minimum(%a, %k)")
        b("atan2", "aten.atan2(%a, %b)")
    for op in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"):
        b(op, "aten.%s(%%z, %%w)" % op)
    if not isf:
        for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            b(op, "aten.%s(%%a, %%b)" % op)
    if isf:
        sp = {"a": U(-2, 2), "b": U(-2, 2), "c": U(-1.5, 1.5), "k": U(-1, 1), "d": SignedMag(0.5, 2.0),
              "p": U(0.5, 2.0), "e": U(-2, 2), "z": Grid(-1, 1, 0.5), "w": Grid(-1, 1, 0.5)}
    elif dt == "bool":
        sp = {p: B() for p in "abckdpezw"}
    elif dt == "u8":
        sp = {"a": I(10, 21), "b": I(0, 5), "c": I(0, 11), "k": I(0, 10), "d": I(1, 8), "p": I(0, 4),
              "e": I(0, 4), "z": I(0, 3), "w": I(0, 3)}
    else:
        sp = {"a": I(-10, 11), "b": I(-10, 11), "c": I(-10, 11), "k": I(-10, 11),
              "d": Fn(lambda rng, s: rng.integers(1, 8, s) * np.where(rng.uniform(0, 1, s) < 0.5, -1, 1)),
              "p": I(-3, 4), "e": I(0, 4), "z": I(-2, 3), "w": I(-2, 3)}
    case("binary_" + dt, G(params, b.lines, b.rets), dims={"N": 5}, inputs=sp)


for _dt in FLOATS + INTS + ("bool",):
    binary_case(_dt)


# ---- reductions --------------------------------------------------------------------
def reduce_case(dt):
    b = Body()
    isf = dt in FLOATS
    params = [("x", "%s[N,16]" % dt), ("y", "%s[4,6,8]" % dt), ("p", "%s[4,8]" % dt)]
    b("sum_last", "aten.sum(%x) {dims=[-1]}")
    b("sum_keep", "aten.sum(%x) {dims=[-1], keepdim=true}")
    b("sum_all", "aten.sum(%x)")
    b("sum_02", "aten.sum(%y) {dims=[0, 2]}")
    b("amax", "aten.amax(%x) {dims=[-1]}")
    b("amax_all", "aten.amax(%y)")
    b("amin", "aten.amin(%y) {dims=[1, 2], keepdim=true}")
    b("prod", "aten.prod(%p) {dims=[1]}")
    b("prod_all", "aten.prod(%p)")
    b("prod_keep", "aten.prod(%p) {dims=[0], keepdim=true}")
    b("logsumexp", "aten.logsumexp(%x) {dims=[-1]}")
    b("logsumexp_keep", "aten.logsumexp(%y) {dims=[0, -1], keepdim=true}")
    if dt != "bool":
        b("argmax", "aten.argmax(%x) {dim=-1}")
        b("argmin", "aten.argmin(%y) {dim=1, keepdim=true}")
        b("argmax_flat", "aten.argmax(%y)")
        b("argmin0", "aten.argmin(%x) {dim=0}")
    if isf:
        b("mean", "aten.mean(%x) {dims=[1]}")
        b("mean_keep", "aten.mean(%y) {dims=[-1, 0], keepdim=true}")
        b("mean_all", "aten.mean(%y)")
        b("var", "aten.var(%x) {dims=[1]}")
        b("var_c0", "aten.var(%y) {dims=[0, 2], correction=0}")
        b("var_all", "aten.var(%x)")
        b("var_keep", "aten.var(%y) {dims=[-1], correction=2, keepdim=true}")
        b("vm_var, %vm_mean", "aten.var_mean(%y) {dims=[-1], correction=0, keepdim=true}")
        b("vm2_var, %vm2_mean", "aten.var_mean(%x) {dims=[0]}")
        b("sum_f64", "aten.sum(%x) {dims=[1], dtype=f64}")
        if dt in ("f16", "bf16"):
            b("sum_f32", "aten.sum(%x) {dims=[1], dtype=f32}")
            b("mean_f32", "aten.mean(%y) {dims=[2], dtype=f32}")
    else:
        b("sum_i32", "aten.sum(%x) {dims=[0], dtype=i32}")
        b("mean_f32", "aten.mean(%x) {dims=[1], dtype=f32}")
        b("sum_f32", "aten.sum(%y) {dims=[1], dtype=f32}")
        b("prod_f64", "aten.prod(%p) {dims=[1], dtype=f64}")
    if isf:
        sp = {"x": U(-2, 2), "y": U(-1, 1), "p": U(0.8, 1.25)}
    elif dt == "bool":
        sp = {"x": B(), "y": B(0.7), "p": B(0.8)}
    elif dt == "u8":
        sp = {"x": I(0, 10), "y": I(0, 10), "p": I(0, 3)}
    else:
        sp = {"x": I(-10, 11), "y": I(-10, 11), "p": I(-2, 3)}
    case("reduce_" + dt, G(params, b.lines, b.rets), dims={"N": 5}, inputs=sp)


for _dt in FLOATS + INTS + ("bool",):
    reduce_case(_dt)

# long rows: accumulation
case("reduce_long_rows", """
graph @main(%x: f32[4,1024], %h: f16[4,512], %b: bf16[3,256], %d: f64[2,1024], %q: f32[2,768]) {
  %s = aten.sum(%x) {dims=[-1]}
  %m = aten.mean(%x) {dims=[1], keepdim=true}
  %v = aten.var(%x) {dims=[1]}
  %l = aten.logsumexp(%x) {dims=[-1]}
  %sm = aten._softmax(%x) {dim=-1, half_to_float=false}
  %hs = aten.sum(%h) {dims=[-1]}
  %hm = aten.mean(%h) {dims=[-1]}
  %hv, %hmean = aten.var_mean(%h) {dims=[1], correction=0}
  %bs = aten.sum(%b) {dims=[1]}
  %bm = aten.mean(%b) {dims=[1]}
  %bv = aten.var(%b) {dims=[-1]}
  %ds = aten.sum(%d) {dims=[1]}
  %dv = aten.var(%d) {dims=[1]}
  %qa = aten.sum(%q) : f32[]
  %ln = aten.layer_norm(%q, none, none) {normalized_shape=[768]} : f32[2,768]
  return %s, %m, %v, %l, %sm, %hs, %hm, %hv, %hmean, %bs, %bm, %bv, %ds, %dv, %qa, %ln
}
""", inputs={"x": U(-1, 3), "h": U(-1, 3), "b": U(0, 2), "d": U(-1, 3), "q": U(-2, 2)})


# ---- other pointwise ---------------------------------------------------------------
def pointwise_other_case(dt):
    b = Body()
    isf = dt in FLOATS
    params = [("c", "bool[N,8]"), ("a", "%s[N,8]" % dt), ("b", "%s[8]" % dt), ("w", "%s[N,8]" % dt),
              ("v", "%s[]" % dt), ("cm", "bool[8]")]
    lit = {"bool": "true"}.get(dt, "1.5" if isf else "3")
    b("where", "aten.where(%c, %a, %b)")
    b("where_lit", "aten.where(%%c, %%a, %s)" % lit)
    b("where_lit2", "aten.where(%%c, %s, %%b)" % ("false" if dt == "bool" else ("-0.5" if isf else "7")))
    b("masked_fill", "aten.masked_fill(%%a, %%c, %s)" % ("0.0" if isf else ("false" if dt == "bool" else "0")))
    b("masked_fill_t", "aten.masked_fill(%a, %cm, %v)")
    if dt != "bool":
        if isf:
            b("clamp", "aten.clamp(%a) {min=-0.5, max=0.5}")
            b("clamp_min", "aten.clamp(%a) {min=-0.25}")
            b("clamp_max", "aten.clamp(%w) {max=0.3}")
            b("lerp", "aten.lerp(%a, %b, 0.25)")
            b("lerp_t", "aten.lerp(%a, %b, %w)")
            b("lerp_hi", "aten.lerp(%a, %w, 0.75)")
            b("addcmul", "aten.addcmul(%a, %b, %w) {value=0.5}")
            b("addcmul1", "aten.addcmul(%w, %a, %v)")
        else:
            b("clamp", "aten.clamp(%a) {min=2, max=6}")
            b("clamp_min", "aten.clamp(%a) {min=3}")
            b("clamp_max", "aten.clamp(%w) {max=4}")
            b("addcmul", "aten.addcmul(%a, %b, %w) {value=2}")
            b("addcmul1", "aten.addcmul(%w, %a, %v)")
    if isf:
        sp = {"c": B(), "a": U(-1, 1), "b": U(-1, 1), "w": U(0, 1), "v": Vals([0.75])}
    elif dt == "bool":
        sp = {"c": B(), "a": B(), "b": B(), "w": B(), "v": Vals([1])}
    else:
        sp = {"c": B(), "a": I(0, 9), "b": I(0, 5), "w": I(0, 5), "v": Vals([2])}
    case("pointwise_other_" + dt, G(params, b.lines, b.rets), dims={"N": 4}, inputs=sp)


for _dt in FLOATS + INTS + ("bool",):
    pointwise_other_case(_dt)

case("masked_fill_neg_inf_softmax", """
graph @main(%s: f32[2,4,6], %m: bool[4,6]) {
  %f = aten.masked_fill(%s, %m, -inf)
  %p = aten._softmax(%f) {dim=-1, half_to_float=false}
  return %f, %p
}
""", inputs={"m": Vals(np.array([[0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1],
                                 [0, 0, 0, 0, 0, 1]]))}, nonfinite=True)

# ---- _to_copy ------------------------------------------------------------------------
_conv = Body()
_conv_params = [("f", "f32[3,8]"), ("g", "f32[3,8]"), ("h", "f16[3,8]"), ("bh", "bf16[3,8]"), ("d", "f64[3,8]"),
                ("l", "i64[3,8]"), ("i", "i32[3,8]"), ("s", "i16[3,8]"), ("c", "i8[3,8]"), ("u", "u8[3,8]"),
                ("b", "bool[3,8]")]
for src in ("f", "h", "bh", "d"):
    for dst in FLOATS:
        _conv("%s_to_%s" % (src, dst), "aten._to_copy(%%%s) {dtype=%s}" % (src, dst))
    for dst in ("i64", "i32", "i16", "i8", "bool"):
        _conv("%s_to_%s" % (src, dst), "aten._to_copy(%%%s) {dtype=%s}" % (src, dst))
_conv("g_to_u8", "aten._to_copy(%g) {dtype=u8}")
for src in ("l", "i", "s", "c", "u", "b"):
    for dst in FLOATS + INTS + ("bool",):
        _conv("%s_to_%s" % (src, dst), "aten._to_copy(%%%s) {dtype=%s}" % (src, dst))
_conv("f_copy", "aten._to_copy(%f)")
case("to_copy", G(_conv_params, _conv.lines, _conv.rets),
     inputs={"f": Grid(-4, 4, 0.125), "g": U(0, 100), "h": U(-5, 5), "bh": U(-5, 5), "d": Grid(-3, 3, 1 / 64),
             "l": I(-5, 100), "i": I(0, 100), "s": I(-100, 100), "c": I(-100, 100), "u": I(0, 120), "b": B()})
# f32 -> f16/bf16 rounding of values that are not representable (round to nearest even)
case("to_copy_rounding", """
graph @main(%x: f32[64], %d: f64[64]) {
  %h = aten._to_copy(%x) {dtype=f16}
  %b = aten._to_copy(%x) {dtype=bf16}
  %dh = aten._to_copy(%d) {dtype=f16}
  %df = aten._to_copy(%d) {dtype=f32}
  %back = aten._to_copy(%h) {dtype=f32}
  return %h, %b, %dh, %df, %back
}
""", inputs={"x": U(-3, 3), "d": U(-100, 100)})


# ---- promotion and weak scalars ------------------------------------------------
case("promotion", """
graph @main(%i: i32[4,6], %h: f16[4,6], %f: f32[4,6], %b: bool[4,6], %c: i8[4,6], %u: u8[4,6],
            %bh: bf16[4,6], %d0: f64[], %l: i64[4,6], %f0: f32[], %s: i16[6], %i0: i32[]) {
  %ih = aten.add(%i, %h) : f16[4,6]
  %lf = aten.mul(%l, %f) : f32[4,6]
  %bc = aten.add(%b, %c) : i8[4,6]
  %uc = aten.add(%u, %c) : i16[4,6]
  %hbh = aten.add(%h, %bh) : f32[4,6]
  %hf = aten.mul(%h, %f) : f32[4,6]
  %fd0 = aten.add(%f, %d0) : f32[4,6]
  %hd0 = aten.mul(%h, %d0) : f16[4,6]
  %if0 = aten.add(%i, %f0) : f32[4,6]
  %cs = aten.sub(%c, %s) : i16[4,6]
  %bb = aten.add(%b, %b) : bool[4,6]
  %ib = aten.mul(%i, %b)
  %ui0 = aten.add(%u, %i0) : u8[4,6]
  %idiv = aten.div(%i, %s) : f32[4,6]
  %ldiv = aten.div(%l, %s) {rounding_mode="floor"} : i64[4,6]
  %bdiv = aten.div(%b, %f)
  %eqm = aten.eq(%i, %f)
  %ltm = aten.lt(%h, %d0)
  %whr = aten.where(%b, %i, %f) : f32[4,6]
  %whr2 = aten.where(%b, %h, %c) : f16[4,6]
  %mx = aten.maximum(%c, %h)
  %mn = aten.minimum(%u, %l)
  %cat = aten.cat(%h, %f) {dim=0} : f32[8,6]
  %cat2 = aten.cat(%c, %u, %b) {dim=1} : i16[4,18]
  %pw = aten.pow(%h, %i)
  %at2 = aten.atan2(%i, %h)
  %fm = aten.fmod(%f, %i)
  %add_hbf = aten.addcmul(%h, %bh, %f)
  %sm = aten.softmax(%i) {dim=-1, dtype=f32}
  return %ih, %lf, %bc, %uc, %hbh, %hf, %fd0, %hd0, %if0, %cs, %bb, %ib, %ui0, %idiv, %ldiv, %bdiv, %eqm, %ltm,
         %whr, %whr2, %mx, %mn, %cat, %cat2, %pw, %at2, %fm, %add_hbf, %sm
}
""", inputs={"i": I(1, 6), "h": U(-2, 2), "f": U(0.5, 2), "d0": Vals([0.75]), "l": I(-9, 10), "f0": Vals([-1.25]),
             "s": I(1, 5), "i0": Vals([3]), "u": I(0, 50), "c": I(-20, 20), "bh": U(-2, 2)})

case("weak_scalars", """
graph @main(%x: f32[N,8], %h: f16[N,8], %bh: bf16[N,8], %i: i32[N,8], %b: bool[N,8], %u: u8[N,8], %d: f64[N,8],
            %z: f32[]) {
  %rsub = aten.sub(1.0, %x)
  %half = aten.mul(%h, 0.5) : f16[N,8]
  %hadd = aten.add(%h, 2) : f16[N,8]
  %bhm = aten.mul(%bh, 3) : bf16[N,8]
  %bhs = aten.sub(0.25, %bh)
  %xi = aten.add(%x, 2) : f32[N,8]
  %ihalf = aten.mul(%i, 0.5) : f32[N,8]
  %iadd = aten.add(%i, 3) : i32[N,8]
  %idiv = aten.div(%i, 2) : f32[N,8]
  %ib = aten.add(%i, true) : i32[N,8]
  %bi = aten.add(%b, 1) : i64[N,8]
  %bf = aten.mul(%b, 1.5) : f32[N,8]
  %bt = aten.logical_and(%b, true)
  %bor = aten.bitwise_or(%b, false)
  %xt = aten.mul(%x, true) : f32[N,8]
  %u1 = aten.add(%u, 1) : u8[N,8]
  %uf = aten.mul(%u, 0.25) : f32[N,8]
  %dl = aten.mul(%d, 0.1) : f64[N,8]
  %rdiv = aten.div(1.0, %x)
  %p2 = aten.pow(%x, 2)
  %p2f = aten.pow(%h, 2.0)
  %exp2 = aten.pow(2.0, %x)
  %ipow = aten.pow(2, %i) : i32[N,8]
  %gt = aten.gt(%x, 0)
  %lt = aten.lt(0.5, %h)
  %ieq = aten.eq(%i, 2.0)
  %mx = aten.maximum(%x, 0.0)
  %mn = aten.minimum(-0.5, %h)
  %z1 = aten.add(%z, 1) : f32[]
  %zi = aten.mul(%z, %i) : f32[N,8]
  %fm = aten.fmod(%x, 0.75)
  %rm = aten.remainder(%i, 3)
  %rmf = aten.remainder(-1.5, %x)
  %a2 = aten.atan2(1.0, %h)
  %sub_a = aten.sub(%x, 2) {alpha=3}
  %band = aten.bitwise_and(%i, 6)
  %lrp = aten.lerp(%x, 1.0, 0.5)
  return %rsub, %half, %hadd, %bhm, %bhs, %xi, %ihalf, %iadd, %idiv, %ib, %bi, %bf, %bt, %bor, %xt, %u1, %uf,
         %dl, %rdiv, %p2, %p2f, %exp2, %ipow, %gt, %lt, %ieq, %mx, %mn, %z1, %zi, %fm, %rm, %rmf, %a2, %sub_a,
         %band, %lrp
}
""", dims={"N": 3}, inputs={"x": SignedMag(0.25, 2), "h": U(-2, 2), "bh": U(-2, 2), "i": I(0, 8), "u": I(0, 200),
                            "d": U(-10, 10), "z": Vals([1.5])})


# ---- softmax family -------------------------------------------------------------------
def softmax_case(dt):
    b = Body()
    params = [("x", "%s[N,16]" % dt), ("y", "%s[5,3,7]" % dt)]
    b("s1", "aten._softmax(%x) {dim=-1, half_to_float=false}")
    b("s2", "aten._softmax(%y) {dim=1, half_to_float=false}")
    b("s3", "aten.softmax(%y) {dim=0}")
    b("l1", "aten._log_softmax(%x) {dim=1, half_to_float=false}")
    b("l2", "aten._log_softmax(%y) {dim=-1, half_to_float=false}")
    b("l3", "aten.log_softmax(%y) {dim=-3}")
    if dt in ("f16", "bf16"):
        b("s_h2f", "aten._softmax(%x) {dim=-1, half_to_float=true}")
        b("l_h2f", "aten._log_softmax(%x) {dim=-1, half_to_float=true}")
        b("s_f32", "aten.softmax(%y) {dim=-1, dtype=f32}")
        b("l_f32", "aten.log_softmax(%y) {dim=-1, dtype=f32}")
    if dt == "f32":
        b("s_f64", "aten.softmax(%x) {dim=-1, dtype=f64}")
    case("softmax_" + dt, G(params, b.lines, b.rets), dims={"N": 4}, inputs={"x": U(-4, 4), "y": U(-3, 3)})


for _dt in FLOATS:
    softmax_case(_dt)


def _softmax_np(x, dim):
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def softmax_bw_case(dt):
    b = Body()
    params = [("g", "%s[N,16]" % dt), ("y", "%s[N,16]" % dt), ("ly", "%s[N,16]" % dt), ("g2", "%s[3,5,4]" % dt),
              ("y2", "%s[3,5,4]" % dt)]
    b("sb", "aten._softmax_backward_data(%%g, %%y) {dim=-1, input_dtype=%s}" % dt)
    b("lb", "aten._log_softmax_backward_data(%%g, %%ly) {dim=1, input_dtype=%s}" % dt)
    b("sb2", "aten._softmax_backward_data(%%g2, %%y2) {dim=1, input_dtype=%s}" % dt)
    lines = b.lines
    rets = b.rets
    if dt == "f32":
        # a backward that feeds on a forward in the same graph, and the half_to_float backward
        params += [("x", "f32[N,16]")]
        lines += ["%fy = aten._softmax(%x) {dim=-1, half_to_float=false}",
                  "%fb = aten._softmax_backward_data(%g, %fy) {dim=-1, input_dtype=f32}",
                  "%fly = aten._log_softmax(%x) {dim=-1, half_to_float=false}",
                  "%flb = aten._log_softmax_backward_data(%g, %fly) {dim=-1, input_dtype=f32}",
                  "%h2f = aten._softmax_backward_data(%g, %y) {dim=-1, input_dtype=f16}",
                  "%lh2f = aten._log_softmax_backward_data(%g, %ly) {dim=-1, input_dtype=f16}"]
        rets += ["fb", "flb", "h2f", "lh2f"]
    sp = {"g": U(-1, 1), "g2": U(-1, 1),
          "y": Fn(lambda rng, s: _softmax_np(rng.uniform(-3, 3, s), -1)),
          "ly": Fn(lambda rng, s: np.log(_softmax_np(rng.uniform(-3, 3, s), 1))),
          "y2": Fn(lambda rng, s: _softmax_np(rng.uniform(-3, 3, s), 1)), "x": U(-3, 3)}
    case("softmax_backward_" + dt, G(params, lines, rets), dims={"N": 4}, inputs=sp)


for _dt in FLOATS:
    softmax_bw_case(_dt)


# ---- layer norm, rms norm -------------------------------------------------------------
def layer_norm_case(dt):
    b = Body()
    lowp = dt in ("f16", "bf16")
    params = [("x", "%s[N,16]" % dt), ("w", "%s[16]" % dt), ("bias", "%s[16]" % dt), ("y", "%s[2,3,4,8]" % dt),
              ("w2", "%s[4,8]" % dt), ("b2", "%s[4,8]" % dt), ("go", "%s[N,16]" % dt), ("go2", "%s[2,3,4,8]" % dt)]
    if lowp:
        b("o, %_m, %_r", "aten.native_layer_norm(%x, %w, %bias) {normalized_shape=[16], eps=1e-5}", ret=False)
        b.rets.append("o")
    else:
        b("o, %m, %r", "aten.native_layer_norm(%x, %w, %bias) {normalized_shape=[16], eps=1e-5}")
    b("ln_none", "aten.layer_norm(%x, none, none) {normalized_shape=[16]}")
    b("ln_w", "aten.layer_norm(%x, %w, none) {normalized_shape=[16], eps=1e-3}")
    b("ln2", "aten.layer_norm(%y, %w2, %b2) {normalized_shape=[4, 8], eps=1e-6}")
    if lowp:
        b("o2, %_m2, %_r2", "aten.native_layer_norm(%y, none, %b2) {normalized_shape=[4, 8], eps=1e-5}", ret=False)
        b.rets.append("o2")
        b("gi, %gw, %gb", "aten.native_layer_norm_backward(%go, %x, %_m, %_r, %w, %bias) "
          "{normalized_shape=[16], output_mask=[true, true, true]}")
        b("gi2, %_gw2, %_gb2", "aten.native_layer_norm_backward(%go2, %y, %_m2, %_r2, none, %b2) "
          "{normalized_shape=[4, 8], output_mask=[true, false, true]}", ret=False)
        b.rets.append("gi2")
    else:
        b("o2, %m2, %r2", "aten.native_layer_norm(%y, none, %b2) {normalized_shape=[4, 8], eps=1e-5}")
        b("gi, %gw, %gb", "aten.native_layer_norm_backward(%go, %x, %m, %r, %w, %bias) "
          "{normalized_shape=[16], output_mask=[true, true, true]}")
        b("gi2, %_gw2, %_gb2", "aten.native_layer_norm_backward(%go2, %y, %m2, %r2, none, %b2) "
          "{normalized_shape=[4, 8], output_mask=[true, false, true]}", ret=False)
        b.rets += ["gi2", "_gb2"]
    case("layer_norm_" + dt, G(params, b.lines, b.rets), dims={"N": 5},
         inputs={"x": U(-2, 3), "w": U(0.5, 1.5), "bias": U(-0.5, 0.5), "y": U(-1, 1), "w2": U(0.5, 1.5),
                 "b2": U(-0.5, 0.5), "go": U(-1, 1), "go2": U(-1, 1)})


for _dt in FLOATS:
    layer_norm_case(_dt)

case("layer_norm_backward_params_f32", """
graph @main(%go: f32[6,32], %x: f32[6,32], %mean: f32[6,1], %rstd: f32[6,1], %w: f32[32], %b: f32[32]) {
  %gi, %gw, %gb = aten.native_layer_norm_backward(%go, %x, %mean, %rstd, %w, %b) {normalized_shape=[32], output_mask=[true, true, true]}
  %gi2, %gw2, %gb2 = aten.native_layer_norm_backward(%go, %x, %mean, %rstd, none, none) {normalized_shape=[32], output_mask=[true, false, false]}
  return %gi, %gw, %gb, %gi2
}
""", inputs={"x": U(-2, 2), "w": U(0.5, 1.5), "b": U(-1, 1)})  # mean, rstd: HOOKS


def rms_norm_case(dt):
    b = Body()
    params = [("x", "%s[N,16]" % dt), ("w", "%s[16]" % dt), ("y", "%s[2,3,8]" % dt), ("w2", "%s[3,8]" % dt)]
    b("r1", "aten.rms_norm(%x, %w) {normalized_shape=[16], eps=1e-6}")
    b("r2", "aten.rms_norm(%x, none) {normalized_shape=[16], eps=1e-5}")
    b("r3", "aten.rms_norm(%y, %w2) {normalized_shape=[3, 8], eps=1e-6}")
    if dt in ("f32", "f64"):
        b("r_default_eps", "aten.rms_norm(%x, %w) {normalized_shape=[16]}")
    case("rms_norm_" + dt, G(params, b.lines, b.rets), dims={"N": 5},
         inputs={"x": U(-2, 2), "w": U(0.5, 1.5), "y": U(-1, 1), "w2": U(0.5, 1.5)})


for _dt in FLOATS:
    rms_norm_case(_dt)

# the default eps is the dtype's machine epsilon (f16 2^-10, bf16 2^-7): large enough to matter
case("rms_norm_default_eps_lowp", """
graph @main(%h: f16[4,16], %hw: f16[16], %b: bf16[4,16]) {
  %rh = aten.rms_norm(%h, %hw) {normalized_shape=[16]}
  %rb = aten.rms_norm(%b, none) {normalized_shape=[16]}
  return %rh, %rb
}
""", inputs={"h": U(-0.3, 0.3), "hw": U(0.5, 1.5), "b": U(-0.3, 0.3)})


# ---- batch norm ------------------------------------------------------------------------
def batch_norm_case(dt):
    b = Body()
    lowp = dt in ("f16", "bf16")
    params = [("x", "%s[N,3,4,5]" % dt), ("w", "%s[3]" % dt), ("bias", "%s[3]" % dt), ("rm", "%s[3]" % dt),
              ("rv", "%s[3]" % dt), ("x2", "%s[8,6]" % dt), ("rm2", "%s[6]" % dt), ("rv2", "%s[6]" % dt),
              ("go", "%s[N,3,4,5]" % dt), ("go2", "%s[8,6]" % dt)]
    mom = "momentum=0.1"
    if lowp:
        b("o, %_sm, %_sr", "aten.native_batch_norm(%%x, %%w, %%bias, %%rm, %%rv) {training=true, %s, eps=1e-5}" % mom,
          ret=False)
        b.rets.append("o")
        b("fo, %_fsm, %_fsr, %nrm, %nrv", "aten._native_batch_norm_legit_functional(%x, %w, %bias, %rm, %rv) "
          "{training=true, momentum=0.2, eps=1e-3}", ret=False)
        b.rets += ["fo", "nrm", "nrv"]
    else:
        b("o, %_sm, %_sr", "aten.native_batch_norm(%%x, %%w, %%bias, %%rm, %%rv) {training=true, %s, eps=1e-5}" % mom)
        b("fo, %fsm, %fsr, %nrm, %nrv", "aten._native_batch_norm_legit_functional(%x, %w, %bias, %rm, %rv) "
          "{training=true, momentum=0.2, eps=1e-3}")
    b("eo, %_esm, %_esr", "aten.native_batch_norm(%x2, none, none, %rm2, %rv2) {training=false, momentum=0.1, eps=1e-5}",
      ret=False)
    b.rets.append("eo")
    b("eo2, %_e2a, %_e2b", "aten.native_batch_norm(%x, %w, %bias, %rm, %rv) {training=false, momentum=0.1, eps=1e-5}",
      ret=False)
    b.rets.append("eo2")
    b("feo, %_fe1, %_fe2, %fe_rm, %fe_rv", "aten._native_batch_norm_legit_functional(%x2, none, none, %rm2, %rv2) "
      "{training=false, momentum=0.1, eps=1e-5}", ret=False)
    b.rets += ["feo", "fe_rm", "fe_rv"]
    b("nso, %_ns1, %_ns2", "aten.native_batch_norm(%x2, none, none, none, none) {training=true, momentum=0.1, eps=1e-5}",
      ret=False)
    b.rets.append("nso")
    b("gi, %gw, %gb", "aten.native_batch_norm_backward(%go, %x, %w, %rm, %rv, %_sm, %_sr) "
      "{train=true, eps=1e-5, output_mask=[true, true, true]}")
    b("gi2, %_gw2, %_gb2", "aten.native_batch_norm_backward(%go2, %x2, none, %rm2, %rv2, none, none) "
      "{train=false, eps=1e-5, output_mask=[true, false, false]}", ret=False)
    b.rets.append("gi2")
    case("batch_norm_" + dt, G(params, b.lines, b.rets), dims={"N": 2},
         inputs={"x": U(-1, 3), "w": U(0.5, 1.5), "bias": U(-0.5, 0.5), "rm": U(-0.5, 0.5), "rv": U(0.5, 2),
                 "x2": U(-2, 2), "rm2": U(-0.5, 0.5), "rv2": U(0.5, 2), "go": U(-1, 1), "go2": U(-1, 1)})


for _dt in FLOATS:
    batch_norm_case(_dt)


# ---- nll loss ----------------------------------------------------------------------------
def nll_case(dt):
    b = Body()
    params = [("x", "%s[N,5]" % dt), ("t", "i64[N]"), ("w", "%s[5]" % dt), ("gn", "%s[N]" % dt), ("g0", "%s[]" % dt),
              ("x1", "%s[5]" % dt), ("t0", "i64[]")]
    b("l_mean, %tw_mean", "aten.nll_loss_forward(%x, %t, %w) {reduction=1, ignore_index=-100}")
    b("l_sum, %tw_sum", "aten.nll_loss_forward(%x, %t, none) {reduction=2, ignore_index=-100}")
    b("l_none, %_tw_none", "aten.nll_loss_forward(%x, %t, %w) {reduction=0, ignore_index=2}", ret=False)
    b.rets.append("l_none")
    b("l_ign, %tw_ign", "aten.nll_loss_forward(%x, %t, %w) {reduction=1, ignore_index=2}")
    b("l_1d, %tw_1d", "aten.nll_loss_forward(%x1, %t0, none) {reduction=1, ignore_index=-100}")
    b("g_mean", "aten.nll_loss_backward(%g0, %x, %t, %w, %tw_mean) {reduction=1, ignore_index=-100}")
    b("g_sum", "aten.nll_loss_backward(%g0, %x, %t, none, %tw_sum) {reduction=2, ignore_index=-100}")
    b("g_none", "aten.nll_loss_backward(%gn, %x, %t, %w, %_tw_none) {reduction=0, ignore_index=2}")
    b("g_ign", "aten.nll_loss_backward(%g0, %x, %t, %w, %tw_ign) {reduction=1, ignore_index=2}")
    b("g_1d", "aten.nll_loss_backward(%g0, %x1, %t0, none, %tw_1d) {reduction=1, ignore_index=-100}")
    case("nll_loss_" + dt, G(params, b.lines, b.rets), dims={"N": 7},
         inputs={"x": U(-3, 0), "t": Vals(np.array([0, 2, 4, 1, 2, 3, 0])), "w": Grid(0.5, 2, 0.25), "gn": U(-1, 1),
                 "g0": Vals([0.75]), "x1": U(-3, 0), "t0": Vals(np.array([3]))})


for _dt in FLOATS:
    nll_case(_dt)

case("nll_loss_ignore_default", """
graph @main(%x: f32[6,4], %t: i64[6], %w: f32[4], %g: f32[]) {
  %l, %tw = aten.nll_loss_forward(%x, %t, %w) {reduction=1, ignore_index=-100}
  %ls, %tws = aten.nll_loss_forward(%x, %t, none) {reduction=2, ignore_index=-100}
  %gi = aten.nll_loss_backward(%g, %x, %t, %w, %tw) {reduction=1, ignore_index=-100}
  return %l, %tw, %ls, %tws, %gi
}
""", inputs={"x": U(-3, 0), "t": Vals(np.array([1, -100, 3, 0, -100, 2])), "w": U(0.5, 2), "g": Vals([1.0])})


# ---- activation backward ------------------------------------------------------------------
def act_bw_case(dt):
    b = Body()
    params = [("g", "%s[N,8]" % dt), ("x", "%s[N,8]" % dt), ("y", "%s[N,8]" % dt), ("t", "%s[N,8]" % dt)]
    b("thr0", "aten.threshold_backward(%g, %x) {threshold=0.0}")
    b("thr5", "aten.threshold_backward(%g, %x) {threshold=0.5}")
    b("gelu", "aten.gelu_backward(%g, %x)")
    b("gelu_tanh", 'aten.gelu_backward(%g, %x) {approximate="tanh"}')
    b("sig", "aten.sigmoid_backward(%g, %y)")
    b("tanh", "aten.tanh_backward(%g, %t)")
    b("silu", "aten.silu_backward(%g, %x)")
    b("lrelu", "aten.leaky_relu_backward(%g, %x) {negative_slope=0.01, self_is_result=false}")
    b("lrelu2", "aten.leaky_relu_backward(%g, %y) {negative_slope=0.2, self_is_result=true}")
    b("htanh", "aten.hardtanh_backward(%g, %x) {min_val=-1.0, max_val=1.0}")
    b("htanh2", "aten.hardtanh_backward(%g, %x) {min_val=-0.5, max_val=0.5}")
    mix = Fn(lambda rng, s: np.where(rng.uniform(0, 1, s) < 0.4, rng.integers(-4, 5, s) * 0.25,
                                     rng.uniform(-2, 2, s)))
    case("activation_backward_" + dt, G(params, b.lines, b.rets), dims={"N": 6},
         inputs={"g": U(-1, 1), "x": mix, "y": U(0.05, 0.95), "t": U(-0.95, 0.95)})


for _dt in FLOATS:
    act_bw_case(_dt)


# ---- embedding and embedding_dense_backward ----------------------------------------------
def embedding_bw_case(dt):
    b = Body()
    params = [("go", "%s[2,5,4]" % dt), ("idx", "i64[2,5]"), ("go1", "%s[7,4]" % dt), ("idx1", "i32[7]")]
    b("e1", "aten.embedding_dense_backward(%go, %idx) {num_weights=10, padding_idx=-1, scale_grad_by_freq=false}")
    b("e2", "aten.embedding_dense_backward(%go, %idx) {num_weights=10, padding_idx=3, scale_grad_by_freq=true}")
    b("e3", "aten.embedding_dense_backward(%go1, %idx1) {num_weights=6, padding_idx=0, scale_grad_by_freq=false}")
    case("embedding_backward_" + dt, G(params, b.lines, b.rets),
         inputs={"go": U(-1, 1), "idx": Vals(np.array([1, 3, 3, 0, 9, 3, 7, 1, 3, 2])), "go1": U(-1, 1),
                 "idx1": Vals(np.array([5, 0, 2, 2, 5, 0, 1]))})


for _dt in FLOATS:
    embedding_bw_case(_dt)


# ---- indexing, one case per dtype ------------------------------------------------------
def indexing_case(dt):
    b = Body()
    params = [("w", "%s[10,4]" % dt), ("ids", "i64[3,5]"), ("ids32", "i32[6]"), ("i0", "i64[]"),
              ("x", "%s[4,6]" % dt), ("gi", "i64[4,3]"), ("gi0", "i64[2,6]"), ("si", "i32[5]"),
              ("src", "%s[4,3]" % dt), ("src0", "%s[2,6]" % dt), ("ai", "i64[5]"), ("asrc", "%s[4,5]" % dt),
              ("asrc0", "%s[3,6]" % dt), ("ai0", "i32[3]")]
    b("emb", "aten.embedding(%w, %ids)")
    b("emb32", "aten.embedding(%w, %ids32) {padding_idx=2}")
    b("emb0", "aten.embedding(%w, %i0)")
    b("gather", "aten.gather(%x, %gi) {dim=1}")
    b("gather0", "aten.gather(%x, %gi0) {dim=-2}")
    b("isel", "aten.index_select(%x, %si) {dim=1}")
    b("isel0", "aten.index_select(%w, %ids32) {dim=0}")
    b("isel_s", "aten.index_select(%x, %i0) {dim=0}")
    if dt != "bool":
        b("sadd", "aten.scatter_add(%x, %gi, %src) {dim=1}")
        b("sadd0", "aten.scatter_add(%x, %gi0, %src0) {dim=0}")
        b("iadd", "aten.index_add(%x, %ai, %asrc) {dim=-1}")
        b("iadd2", "aten.index_add(%%x, %%ai0, %%asrc0) {dim=0, alpha=%s}" % ("2" if dt not in FLOATS else "0.5"))
    if dt in FLOATS:
        val = U(-1, 1)
    elif dt == "bool":
        val = B()
    elif dt == "u8":
        val = I(0, 20)
    else:
        val = I(-20, 20)
    sp = {"w": val, "x": val, "src": val, "src0": val, "asrc": val, "asrc0": val,
          "ids": Vals(np.array([0, 9, 2, 2, 5, 7, 1, 1, 1, 3, 4, 8, 6, 0, 9])),
          "ids32": Vals(np.array([2, 4, 2, 0, 9, 8])), "i0": Vals(np.array([3])),
          "gi": Vals(np.array([0, 5, 5, 1, 2, 3, 4, 4, 4, 5, 0, 1])),
          "gi0": Vals(np.array([3, 2, 1, 0, 0, 1, 1, 1, 3, 3, 2, 0])),
          "si": Vals(np.array([5, 0, 3, 3, 1])), "ai": Vals(np.array([1, 4, 1, 0, 5])),
          "ai0": Vals(np.array([2, 0, 2]))}
    case("indexing_" + dt, G(params, b.lines, b.rets), inputs=sp)


for _dt in FLOATS + INTS + ("bool",):
    indexing_case(_dt)


# ---- shape ops, one case per dtype ------------------------------------------------------
def shape_case(dt):
    b = Body()
    params = [("x", "%s[4,6]" % dt), ("y", "%s[2,3,4]" % dt), ("z", "%s[4,1]" % dt), ("q", "%s[4,1,6,1]" % dt),
              ("x2", "%s[2,6]" % dt), ("s", "%s[]" % dt), ("v", "%s[5]" % dt)]
    fv = {"bool": "true"}.get(dt, "2.5" if dt in FLOATS else "3")
    b("view", "aten.view(%x) {shape=[6, 4]}")
    b("view_inf", "aten.view(%y) {shape=[-1, 4]}")
    b("reshape", "aten.reshape(%y) {shape=[4, 6]}")
    b("ralias", "aten._reshape_alias(%x) {shape=[2, 12], stride=[12, 1]}")
    b("uview", "aten._unsafe_view(%y) {shape=[6, 4]}")
    b("permute", "aten.permute(%y) {dims=[2, 0, 1]}")
    b("transpose", "aten.transpose(%y) {dim0=-1, dim1=0}")
    b("t", "aten.t(%x)")
    b("t1", "aten.t(%v)")
    b("expand", "aten.expand(%z) {size=[3, 4, 6]}")
    b("expand_keep", "aten.expand(%z) {size=[2, -1, 5]}")
    b("unsqueeze", "aten.unsqueeze(%x) {dim=-1}")
    b("unsqueeze0", "aten.unsqueeze(%s) {dim=0}")
    b("squeeze", "aten.squeeze(%q) {dims=[1]}")
    b("squeeze_all", "aten.squeeze(%q)")
    b("squeeze_multi", "aten.squeeze(%q) {dims=[-1, 0, 1]}")
    b("slice", "aten.slice(%x) {dim=1, start=1, end=5, step=2}")
    b("slice_neg", "aten.slice(%y) {dim=-1, start=-3, end=9223372036854775807}")
    b("slice_def", "aten.slice(%x) {start=1}")
    b("cat", "aten.cat(%x, %x2) {dim=0}")
    b("cat3", "aten.cat(%y, %y, %y) {dim=-1}")
    b("flip", "aten.flip(%y) {dims=[0, -1]}")
    b("clone", "aten.clone(%x)")
    b("detach", "aten.detach(%y)")
    b("alias", "aten.alias(%x)")
    b("zeros_like", "aten.zeros_like(%x)")
    b("ones_like", "aten.ones_like(%y) {dtype=f32}")
    b("full_like", "aten.full_like(%%x) {value=%s}" % fv)
    b("full_like_i", "aten.full_like(%x) {value=1, dtype=i32}")
    b("new_zeros", "aten.new_zeros(%x) {shape=[2, 3]}")
    b("new_ones", "aten.new_ones(%y) {shape=[3], dtype=i64}")
    b("new_full", "aten.new_full(%%s) {shape=[2, 2], value=%s}" % fv)
    b("cumsum", "aten.cumsum(%x) {dim=1}")
    b("cumsum0", "aten.cumsum(%y) {dim=-3}")
    if dt in FLOATS:
        sp = {p: U(-1, 1) for p in ("x", "y", "z", "q", "x2", "s", "v")}
    elif dt == "bool":
        sp = {p: B() for p in ("x", "y", "z", "q", "x2", "s", "v")}
    else:
        sp = {p: I(0, 10) for p in ("x", "y", "z", "q", "x2", "s", "v")}
    case("shape_" + dt, G(params, b.lines, b.rets), inputs=sp)


for _dt in FLOATS + INTS + ("bool",):
    shape_case(_dt)

case("cumsum_dtypes", """
graph @main(%x: f32[3,40], %i: i32[3,8], %b: bool[2,9], %h: f16[2,64], %c: i8[2,30]) {
  %a = aten.cumsum(%x) {dim=-1}
  %a64 = aten.cumsum(%x) {dim=1, dtype=f64}
  %ai = aten.cumsum(%i) {dim=1} : i64[3,8]
  %ai32 = aten.cumsum(%i) {dim=0, dtype=i32} : i32[3,8]
  %ab = aten.cumsum(%b) {dim=1} : i64[2,9]
  %ah = aten.cumsum(%h) {dim=1}
  %ahf = aten.cumsum(%h) {dim=1, dtype=f32}
  %ac = aten.cumsum(%c) {dim=-1}
  return %a, %a64, %ai, %ai32, %ab, %ah, %ahf, %ac
}
""", inputs={"x": U(0, 1), "i": I(-100, 100), "h": U(0, 1), "c": I(-100, 100)})

_src = Body()
for _dt in FLOATS + INTS + ("bool",):
    v = {"bool": "true"}.get(_dt, "1.5" if _dt in FLOATS else "7")
    _src("full_" + _dt, "aten.full() {shape=[2, 3], value=%s, dtype=%s}" % (v, _dt))
    if _dt == "bool":
        continue
    _src("arange_" + _dt, "aten.arange() {start=%s, end=%s, dtype=%s}" % (
        "0", "2" if _dt == "bool" else "5", _dt))
_src("full_float", "aten.full() {shape=[3], value=1.5} : f32[3]")
_src("full_int", "aten.full() {shape=[2, 2], value=7} : i64[2,2]")
_src("full_neg", "aten.full() {shape=[4], value=-2.25, dtype=f16}")
_src("full_empty", "aten.full() {shape=[0, 3], value=1.0}")
_src("full_0d", "aten.full() {shape=[], value=4.0}")
_src("full_inf", "aten.full() {shape=[2], value=-inf}")
_src("ar_end", "aten.arange() {end=10}")
_src("ar_step", "aten.arange() {start=2, end=11, step=3}")
_src("ar_float", "aten.arange() {start=0.0, end=1.0, step=0.125}")
_src("ar_neg", "aten.arange() {start=5, end=-5, step=-2}")
_src("ar_f_frac", "aten.arange() {start=-1.5, end=2.0, step=0.5}")
_src("ar_empty", "aten.arange() {start=3, end=3}")
case("sources", G([], _src.lines, _src.rets), nonfinite=True)


# ---- matrix ops ---------------------------------------------------------------------------
def matrix_case(dt):
    b = Body()
    isf = dt in FLOATS
    params = [("a", "%s[8,16]" % dt), ("b", "%s[16,12]" % dt), ("bias", "%s[12]" % dt), ("bias2", "%s[8,12]" % dt),
              ("c", "%s[3,4,8]" % dt), ("d", "%s[3,8,5]" % dt), ("v16", "%s[16]" % dt), ("w16", "%s[16]" % dt),
              ("v8", "%s[8]" % dt), ("e", "%s[2,1,4,8]" % dt), ("m", "%s[8,6]" % dt), ("x", "%s[N,16]" % dt),
              ("lw", "%s[12,16]" % dt), ("x3", "%s[2,3,16]" % dt)]
    b("mm", "aten.mm(%a, %b)")
    b("bmm", "aten.bmm(%c, %d)")
    b("addmm", "aten.addmm(%%bias, %%a, %%b) {beta=%s, alpha=%s}" % (("0.5", "2.0") if isf else ("2", "3")))
    b("addmm2", "aten.addmm(%bias2, %a, %b)")
    b("dot", "aten.matmul(%v16, %w16)")
    b("mv", "aten.matmul(%a, %v16)")
    b("vm", "aten.matmul(%v8, %a)")
    b("bcast", "aten.matmul(%e, %d)")
    b("b2d", "aten.matmul(%c, %m)")
    b("vb", "aten.matmul(%v8, %d)")
    b("bv", "aten.matmul(%c, %v8)")
    b("lin", "aten.linear(%x, %lw, %bias)")
    b("lin3", "aten.linear(%x3, %lw, none)")
    b("lin_none", "aten.linear(%x, %lw, none)")
    if isf:
        sp = {"*": U(-1, 1), "v16": U(0, 1), "w16": U(0, 1)}
    elif dt == "u8":
        sp = {"*": I(0, 3)}
    elif dt == "i8":
        sp = {"*": I(-1, 2)}
    else:
        sp = {"*": I(-2, 3)}
    case("matrix_" + dt, G(params, b.lines, b.rets), dims={"N": 3}, inputs=sp)


for _dt in FLOATS + INTS:
    matrix_case(_dt)

case("matmul_long_k", """
graph @main(%a: f32[4,512], %b: f32[512,8], %h: f16[4,256], %hb: f16[256,8], %bb: bf16[2,3,256], %bw: bf16[6,256]) {
  %c = aten.mm(%a, %b) : f32[4,8]
  %hc = aten.mm(%h, %hb)
  %bl = aten.linear(%bb, %bw, none)
  return %c, %hc, %bl
}
""")


# ---- non-contiguous views feeding pointwise ops and reductions -------------------------
case("noncontig_pointwise", """
graph @main(%x: f32[4,6,8], %b: f32[8,6], %m: f32[6,4], %h: f16[6,8], %r: f32[8,6,4]) {
  %p = aten.permute(%x) {dims=[2, 0, 1]}
  %e = aten.exp(%p)
  %t = aten.transpose(%x) {dim0=0, dim1=2}
  %s = aten.add(%t, %r)
  %tb = aten.t(%b)
  %mul = aten.mul(%x, %tb)
  %sl = aten.slice(%x) {dim=2, start=1, end=8, step=3}
  %ab = aten.abs(%sl)
  %slt = aten.slice(%t) {dim=0, start=2, end=-1}
  %pos = aten.gt(%slt, 0.0)
  %wh = aten.where(%pos, %slt, 0.0)
  %ht = aten.t(%h)
  %hs = aten.sigmoid(%ht)
  %tm = aten.transpose(%m) {dim0=-1, dim1=-2}
  %mm = aten.mm(%tm, %m)
  %ex = aten.expand(%tb) {size=[3, 6, 8]}
  %exs = aten.sub(%ex, 1.0)
  return %e, %s, %mul, %ab, %wh, %hs, %mm, %exs
}
""", inputs={"x": U(-2, 2)}, nonfinite=False)

case("noncontig_reduction", """
graph @main(%x: f32[N,16,12], %y: f32[12,N], %h: bf16[8,32]) {
  %t = aten.transpose(%x) {dim0=1, dim1=2}
  %s = aten.sum(%t) {dims=[-1]}
  %a = aten.amax(%t) {dims=[1]}
  %p = aten.permute(%x) {dims=[1, 2, 0]}
  %m = aten.mean(%p) {dims=[0, 2], keepdim=true}
  %v = aten.var(%p) {dims=[1], correction=0}
  %sl = aten.slice(%x) {dim=1, start=0, end=16, step=2}
  %ss = aten.sum(%sl) {dims=[1]}
  %yt = aten.t(%y)
  %sm = aten._softmax(%yt) {dim=-1, half_to_float=false}
  %am = aten.argmax(%yt) {dim=1}
  %ls = aten.logsumexp(%yt) {dims=[0]}
  %ht = aten.t(%h)
  %hs = aten.sum(%ht) {dims=[1]}
  %hp = aten.slice(%ht) {dim=0, start=3, end=20}
  %hm = aten.amin(%hp) {dims=[-1]}
  %cs = aten.cumsum(%t) {dim=1}
  %r = aten.reshape(%t) {shape=[N, -1]}
  %ln = aten.layer_norm(%t, none, none) {normalized_shape=[16]}
  return %s, %a, %m, %v, %ss, %sm, %am, %ls, %hs, %hm, %cs, %r, %ln
}
""", dims={"N": 3})

case("symbolic_shapes", """
graph @main(%x: f32[N,8], %w: f32[8], %y: f32[B,N,8], %k: f32[N,1]) {
  %a = aten.mul(%x, %w) : f32[N,8]
  %v = aten.view(%x) {shape=[N, 2, 4]} : f32[N,2,4]
  %f = aten.reshape(%x) {shape=[N*8]} : f32[N*8]
  %g = aten.reshape(%y) {shape=[-1, 8]}
  %s = aten.add(%y, %x) : f32[B,N,8]
  %r = aten.sum(%y) {dims=[0]} : f32[N,8]
  %e = aten.expand(%k) {size=[N, 8]}
  %n = aten.new_zeros(%x) {shape=[N, 2]}
  %c = aten.cat(%x, %k) {dim=1} : f32[N,9]
  %u = aten._unsafe_view(%y) {shape=[B*N, 8]}
  return %a, %v, %f, %g, %s, %r, %e, %n, %c, %u
}
""", dims={"N": 5, "B": 3})


# ---- empty tensors and 0-d tensors -----------------------------------------------------------
case("empty_tensors", """
graph @main(%e: f32[0,8], %w: f32[8], %z: f32[4,0], %m: f32[8,3], %x: f32[2,8], %i: i32[0,3], %hz: f16[N,4]) {
  %a = aten.add(%e, %w) : f32[0,8]
  %x1 = aten.exp(%e)
  %s0 = aten.sum(%e) {dims=[0]} : f32[8]
  %s1 = aten.sum(%e) {dims=[1]} : f32[0]
  %sz = aten.sum(%z) {dims=[-1]} : f32[4]
  %pz = aten.prod(%z) {dims=[1]}
  %am = aten.amax(%e) {dims=[1]}
  %sm = aten._softmax(%e) {dim=-1, half_to_float=false}
  %c = aten.cat(%e, %x, %e) {dim=0} : f32[2,8]
  %mm = aten.mm(%e, %m) : f32[0,3]
  %mz = aten.mm(%z, %e) : f32[4,8]
  %r = aten.reshape(%e) {shape=[0, 4, 2]}
  %t = aten.t(%z)
  %is = aten.sum(%i) : i64[]
  %ie = aten.mul(%i, 2)
  %ln = aten.layer_norm(%e, %w, none) {normalized_shape=[8]}
  %hz2 = aten.mul(%hz, 0.5)
  %hsum = aten.sum(%hz) : f16[]
  %sl = aten.slice(%x) {dim=1, start=5, end=5}
  %ar = aten.argmax(%e) {dim=1}
  %cs = aten.cumsum(%e) {dim=0}
  return %a, %x1, %s0, %s1, %sz, %pz, %am, %sm, %c, %mm, %mz, %r, %t, %is, %ie, %ln, %hz2, %hsum, %sl, %ar, %cs
}
""", dims={"N": 0})

case("zero_dim", """
graph @main(%s: f32[], %x: f32[4,3], %h: f16[], %i: i64[], %b: bool[]) {
  %a = aten.mul(%s, %x) : f32[4,3]
  %e = aten.exp(%s) : f32[]
  %s1 = aten.add(%s, 1.0)
  %sum = aten.sum(%s) : f32[]
  %sumx = aten.sum(%x)
  %mx = aten.amax(%x)
  %u = aten.unsqueeze(%s) {dim=0} : f32[1]
  %v = aten.view(%s) {shape=[1, 1]}
  %ex = aten.expand(%s) {size=[3, 2]}
  %hh = aten.mul(%h, %h) : f16[]
  %ih = aten.add(%i, %h) : f16[]
  %bb = aten.logical_not(%b)
  %wh = aten.where(%b, %s, %x)
  %am = aten.argmax(%x) : i64[]
  %vr = aten.var(%x)
  %r = aten.reshape(%x) {shape=[-1]}
  %sq = aten.squeeze(%u)
  %c = aten._to_copy(%s) {dtype=f16}
  %ms = aten.mean(%s)
  return %a, %e, %s1, %sum, %sumx, %mx, %u, %v, %ex, %hh, %ih, %bb, %wh, %am, %vr, %r, %sq, %c, %ms
}
""", inputs={"s": Vals([0.625]), "h": Vals([1.5]), "i": Vals(np.array([3])), "b": Vals(np.array([True]))})


# ---- small models: chains of ops as the frontends produce them ------------------------
case("gelu_mlp", """
graph @gelu_mlp(%x: f32[N,32], %w: f32[64,32], %b: f32[64]) {
  %h = aten.linear(%x, %w, %b) : f32[N,64]
  %g = aten.gelu(%h) {approximate="tanh"}
  %v, %m = aten.var_mean(%g) {dims=[1], correction=0, keepdim=true}
  %y = aten.mul(%g, 0.5)
  return %y, %m, %v
}

graph @main(%x: f32[N,32], %w: f32[64,32], %b: f32[64]) {
  %h = aten.linear(%x, %w, %b) : f32[N,64]
  %g = aten.gelu(%h) {approximate="tanh"}
  %v, %m = aten.var_mean(%g) {dims=[1], correction=0, keepdim=true}
  %y = aten.mul(%g, 0.5)
  return %y, %m, %v
}
""", dims={"N": 6}, inputs={"w": U(-0.2, 0.2), "b": U(-0.5, 0.5)})

case("attention_f32", """
graph @main(%q: f32[2,4,8,16], %k: f32[2,4,8,16], %v: f32[2,4,8,16], %mask: bool[8,8]) {
  %kt = aten.transpose(%k) {dim0=-2, dim1=-1}
  %s = aten.matmul(%q, %kt) : f32[2,4,8,8]
  %sc = aten.mul(%s, 0.25)
  %mf = aten.masked_fill(%sc, %mask, -inf)
  %p = aten._softmax(%mf) {dim=-1, half_to_float=false}
  %o = aten.matmul(%p, %v)
  %op = aten.permute(%o) {dims=[0, 2, 1, 3]}
  %c = aten.clone(%op)
  %r = aten._unsafe_view(%c) {shape=[2, 8, 64]}
  return %r, %p
}
""", inputs={"mask": Fn(lambda rng, s: np.triu(np.ones(s, dtype=bool), 1))})

case("transformer_block_f16", """
graph @main(%x: f16[2,8,32], %w: f16[32], %b: f16[32], %wq: f16[96,32], %bq: f16[96]) {
  %n = aten.layer_norm(%x, %w, %b) {normalized_shape=[32], eps=1e-5}
  %qkv = aten.linear(%x, %wq, %bq) : f16[2,8,96]
  %q = aten.slice(%qkv) {dim=-1, start=0, end=32}
  %k = aten.slice(%qkv) {dim=-1, start=32, end=64}
  %xs = aten.slice(%x) {dim=-1, start=0, end=16}
  %sq = aten.sum(%xs) {dims=[-1], dtype=f32}
  %kr = aten.relu(%k)
  %r = aten.rms_norm(%x, %w) {normalized_shape=[32], eps=1e-6}
  %qs = aten.mul(%q, 0.5)
  return %n, %qkv, %sq, %kr, %r, %qs
}
""", inputs={"wq": U(-0.2, 0.2)})

case("cross_entropy_f32", """
graph @main(%x: f32[N,10], %t: i64[N]) {
  %ls = aten._log_softmax(%x) {dim=1, half_to_float=false}
  %loss, %tw = aten.nll_loss_forward(%ls, %t, none) {reduction=1, ignore_index=-100}
  %one = aten.full_like(%loss) {value=1.0}
  %gls = aten.nll_loss_backward(%one, %ls, %t, none, %tw) {reduction=1, ignore_index=-100}
  %gx = aten._log_softmax_backward_data(%gls, %ls) {dim=1, input_dtype=f32}
  return %loss, %gx
}
""", dims={"N": 8}, inputs={"x": U(-3, 3), "t": I(0, 10)})

case("batch_norm_relu_train_f32", """
graph @main(%x: f32[4,8,3,3], %w: f32[8], %b: f32[8], %rm: f32[8], %rv: f32[8], %g: f32[4,8,3,3]) {
  %y, %sm, %sr, %nrm, %nrv = aten._native_batch_norm_legit_functional(%x, %w, %b, %rm, %rv) {training=true, momentum=0.1, eps=1e-5}
  %r = aten.relu(%y)
  %gr = aten.threshold_backward(%g, %r) {threshold=0.0}
  %gx, %gw, %gb = aten.native_batch_norm_backward(%gr, %x, %w, %rm, %rv, %sm, %sr) {train=true, eps=1e-5, output_mask=[true, true, true]}
  return %r, %nrm, %nrv, %gx, %gw, %gb
}
""", inputs={"w": U(0.5, 1.5), "rv": U(0.5, 2)})


# ----------------------------------------------------------------------------
# Input hooks: inputs that depend on other inputs.

def _hook_layer_norm_params(ins):
    x = ins["x"].double()
    mean = x.mean(dim=1, keepdim=True)
    var = x.var(dim=1, correction=0, keepdim=True)
    ins["mean"] = mean.float()
    ins["rstd"] = torch.rsqrt(var + 1e-5).float()


HOOKS = {"layer_norm_backward_params_f32": _hook_layer_norm_params}


# ----------------------------------------------------------------------------
# Driver

# ----------------------------------------------------------------------------
# Gradients (fj-golden --train): PyTorch's gradient of sum_k <out_k, tangent_k>
# w.r.t. every floating parameter, by autograd through an f64 evaluation of the
# graph (the "exact" run: nothing is rounded but _to_copy's value, whose gradient
# passes straight through).  A parameter gets no reference gradient when
#   * PyTorch does not differentiate the operand it reaches (NONDIFF);
#   * its gradient is ill-conditioned for its dtype's tolerance: it moves by more
#     than half the tolerance in the "rounded" run, where every op's results are
#     rounded to their dtypes and the gradient reaching each operand is rounded to
#     the lower precision of the operand's and the results' dtypes (broadcast
#     operands of pointwise ops are rounded elementwise before their sum);
#   * it sits at a kink: the gradient moves by more than half the tolerance when
#     the floating inputs move by a few ulps (ties, boundaries of hardtanh/clamp,
#     ...: PyTorch's gradient there is a convention, not a derivative).
# nograd_reason.txt says why, one line per parameter left out (or one line for
# the whole case).

def _silu_backward_ad(C, a, at):
    s = torch.sigmoid(a[1])
    return a[0] * s * (1 + a[1] * (1 - s))


def _layer_norm_backward_ad(C, a, at):
    go, x, mean, rstd, w, b = a
    nd = len(at["normalized_shape"])
    dims = list(range(x.dim() - nd, x.dim()))
    bdims = list(range(x.dim() - nd))
    xhat = (x - mean) * rstd
    g = go if w is None else go * w
    gi = rstd * (g - g.mean(dims, keepdim=True) - xhat * (g * xhat).mean(dims, keepdim=True))
    mask = at["output_mask"]
    return (gi if mask[0] else None,
            (go * xhat).sum(bdims) if mask[1] and w is not None else None,
            go.sum(bdims) if mask[2] and b is not None else None)


def _native_layer_norm_ad(C, a, at):
    x, w, b = a
    nd = len(at["normalized_shape"])
    dims = list(range(x.dim() - nd, x.dim()))
    mean = x.mean(dims, keepdim=True)
    rstd = torch.rsqrt(((x - mean) ** 2).mean(dims, keepdim=True) + at.get("eps", 1e-5))
    y = (x - mean) * rstd
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y, mean, rstd


def _embedding_dense_backward_ad(C, a, at):
    go, idx = a
    nw, pad = at["num_weights"], at["padding_idx"]
    flat = idx.reshape(-1).long()
    g = go.reshape(flat.numel(), -1)
    if at["scale_grad_by_freq"]:
        cnt = torch.bincount(flat, minlength=nw).to(g.dtype)
        g = g / cnt[flat].unsqueeze(1)
    if pad >= 0:
        g = g * (flat != pad).unsqueeze(1).to(g.dtype)
    return torch.zeros(nw, g.shape[1], dtype=g.dtype).index_add(0, flat, g)


# Ops whose PyTorch 1.13 derivative is missing or is not the derivative of the op's
# value: the gradient runs use these formulas instead.
#  - silu_backward, native_layer_norm_backward: no derivative (w.r.t. mean/rstd);
#  - native_layer_norm: autograd drops the gradients of the mean and rstd results;
#  - embedding_dense_backward: its double backward ignores scale_grad_by_freq.
GRAD_OPS = {"silu_backward": _silu_backward_ad, "native_layer_norm_backward": _layer_norm_backward_ad,
            "native_layer_norm": _native_layer_norm_ad, "embedding_dense_backward": _embedding_dense_backward_ad}
# Operands PyTorch does not differentiate (derivatives.yaml: non_differentiable): the
# gradient runs detach them, and the parameters read there get no reference gradient.
NONDIFF = {"native_batch_norm": (3, 4), "_native_batch_norm_legit_functional": (3, 4), "nll_loss_forward": (2,),
           "nll_loss_backward": (3, 4), "native_batch_norm_backward": (3, 4)}
POINTWISE = set("""abs neg exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan tanh sinh cosh
    asin acos atan asinh acosh atanh sigmoid relu gelu silu erf erfc floor ceil round trunc sign
    leaky_relu elu softplus hardsigmoid hardswish hardtanh add sub mul div pow maximum minimum atan2 fmod
    remainder where clamp lerp addcmul threshold_backward gelu_backward sigmoid_backward tanh_backward
    silu_backward leaky_relu_backward hardtanh_backward""".split())


class _GradRound(torch.autograd.Function):
    """Identity; rounds the gradient to a dtype."""
    @staticmethod
    def forward(ctx, x, dt):
        ctx.dt = dt
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.dt).to(g.dtype), None


def _lowest(dts):
    dts = [d for d in dts if d is not None and d.is_floating_point]
    return max(dts, key=lambda d: TOL[DT_NAME[d]]) if dts else None


def grad_op(st, ops, syms, odt, ref, rounded):
    op = st["op"][5:]
    ops = [o.detach() if i in NONDIFF.get(op, ()) and isinstance(o, torch.Tensor) else o
           for i, o in enumerate(ops)]
    if rounded:
        rdt = [r.dtype for r in ref if r is not None]
        shape = ref[0].shape if op in POINTWISE and op != "masked_fill" else None
        for i, o in enumerate(ops):
            if isinstance(o, torch.Tensor) and o.requires_grad and odt[i] is not None:
                if shape is not None and tuple(o.shape) != tuple(shape):
                    o = o.expand(shape)
                ops[i] = _GradRound.apply(o, _lowest([odt[i]] + rdt))
    torch.set_default_dtype(torch.float64)
    try:
        fn = GRAD_OPS.get(op, OPS[op])
        out = _as_tuple(fn(Ctx(True, syms, odt), [_widen(o, torch.float64) for o in ops], st["attrs"]))
    finally:
        torch.set_default_dtype(torch.float32)
    res = []
    for o, rf in zip(out, ref):
        if o is None or rf is None:
            res.append(None)
        elif not rf.is_floating_point():
            res.append(o.detach().to(rf.dtype))
        elif rounded:
            res.append(o.to(rf.dtype).to(torch.float64))
        elif op == "_to_copy":
            res.append(o + (o.detach().to(rf.dtype).to(torch.float64) - o.detach()))
        else:
            res.append(o)
    return res


def _grad_run(gr, syms, ins, ref, fparams, fouts, tangents, rounded, nodiff):
    leaves = {p: ins[p].detach().to(torch.float64).clone().requires_grad_() for p in fparams}
    vals = {p: leaves.get(p, t) for p, t in ins.items()}
    for st in gr["stmts"]:
        ops_g = [vals[v] if kind == "val" else v for kind, v in st["operands"]]
        for i in NONDIFF.get(st["op"][5:], ()):
            kind, v = st["operands"][i] if i < len(st["operands"]) else ("none", None)
            if kind != "val" or not isinstance(vals[v], torch.Tensor) or not vals[v].requires_grad:
                continue
            if v not in leaves:
                raise RuntimeError("%%%s reaches an operand that PyTorch does not differentiate" % v)
            nodiff.add(v)
        odt = [ref[v].dtype if kind == "val" and isinstance(ref[v], torch.Tensor) else None
               for kind, v in st["operands"]]
        r = grad_op(st, ops_g, syms, odt, [ref[n] for n in st["res"]], rounded)
        for n, t in zip(st["res"], r):
            vals[n] = t
    for k, v in fouts:  # outputs PyTorch does not differentiate get a zero tangent
        if not (isinstance(vals[v], torch.Tensor) and vals[v].requires_grad):
            tangents[k] = torch.zeros_like(tangents[k])
    terms = [(vals[v] * tangents[k].to(torch.float64)).sum() for k, v in fouts
             if isinstance(vals[v], torch.Tensor) and vals[v].requires_grad]
    if not terms:
        return None
    gs = torch.autograd.grad(sum(terms), [leaves[p] for p in fparams], allow_unused=True)
    return {p: (torch.zeros_like(leaves[p]) if g is None else g.detach()) for p, g in zip(fparams, gs)}


def grad_case(c, gr, ins, ref):
    """Returns (tangents {k: tensor}, grads {param: tensor}, reasons [str])."""
    syms = dict(c["dims"])
    fparams = [p for p, (dt, _) in gr["params"] if dt in FLOATS]
    fouts = [(k, v) for k, (_, v) in enumerate(gr["rets"]) if ref[v].is_floating_point()]
    if not fparams:
        return None, None, ["no floating-point parameter"]
    if not fouts:
        return None, None, ["no floating-point output"]
    rng = np.random.default_rng(zlib.crc32((c["name"] + "/tangent").encode()))
    tangents = {k: make_input(rng, U(-1, 1), DT_NAME[ref[v].dtype], list(ref[v].shape)) for k, v in fouts}
    nodiff = set()
    exact = _grad_run(gr, syms, ins, ref, fparams, fouts, tangents, False, nodiff)
    if exact is None:
        return None, None, ["no floating-point output depends differentiably on a floating-point parameter"]
    rnd = _grad_run(gr, syms, ins, ref, fparams, fouts, tangents, True, nodiff)
    moved = []
    prng = np.random.default_rng(zlib.crc32((c["name"] + "/kink").encode()))
    for _ in range(2):
        pins = dict(ins)
        for p in fparams:
            x = ins[p].to(torch.float64)
            u = torch.from_numpy(prng.uniform(-1, 1, tuple(x.shape)))
            pins[p] = x * (1 + 4e-15 * u) + 1e-30 * u
        moved.append(_grad_run(gr, syms, pins, ref, fparams, fouts, dict(tangents), False, set()))
    out = {}
    reasons = []
    for p in fparams:
        dt = ins[p].dtype
        g = exact[p]
        tol = TOL[DT_NAME[dt]] / 2
        if p in nodiff:
            reasons.append("%%%s: PyTorch does not differentiate the operand it reaches" % p)
        elif not torch.isfinite(g).all():
            reasons.append("%%%s: PyTorch's gradient is not finite" % p)
        elif not rel_l2(rnd[p], g) <= tol:
            reasons.append("%%%s: ill-conditioned: the gradient moves by rel err %.3g > %g (half the %s tolerance) "
                           "when every op rounds to its dtype" % (p, rel_l2(rnd[p], g), tol, DT_NAME[dt]))
        elif any(not rel_l2(m[p], g) <= tol for m in moved):
            reasons.append("%%%s: at a kink: the gradient moves by rel err %.3g > %g when the inputs move by a few ulps"
                           % (p, max(rel_l2(m[p], g) for m in moved), tol))
        else:
            out[p] = g.to(dt).contiguous()
    if not out:
        return None, None, reasons
    return tangents, out, reasons


def run_case(c):
    g = Parser(c["text"], c["name"] + "/graph.fj").module()
    gr = g.get("main")
    assert gr is not None, c["name"]
    rng = np.random.default_rng(zlib.crc32(c["name"].encode()))
    syms = dict(c["dims"])
    ins = {}
    for pname, (dt, dims) in gr["params"]:
        shape = [d.eval(syms) for d in dims]
        spec = c["inputs"].get(pname, c["inputs"].get("*", default_spec(dt)))
        ins[pname] = make_input(rng, spec, dt, shape)
    if c["name"] in HOOKS:
        HOOKS[c["name"]](ins)
    for pname, (dt, dims) in gr["params"]:
        assert ins[pname].dtype == DT[dt] and list(ins[pname].shape) == [d.eval(syms) for d in dims], pname
    ref = dict(ins)
    nat = dict(ins)
    fus = dict(ins)
    coverage = {}
    for st in gr["stmts"]:
        ops_r, ops_n, ops_f = [], [], []
        for kind, v in st["operands"]:
            if kind == "val":
                ops_r.append(ref[v])
                ops_n.append(nat[v])
                ops_f.append(fus[v])
            else:
                ops_r.append(v)
                ops_n.append(v)
                ops_f.append(v)
        r, n, f = run_op(st, ops_r, ops_n, ops_f, syms, coverage)
        assert len(r) == len(st["res"]), (c["name"], st["op"], len(r))
        if st["types"] is not None:
            assert len(st["types"]) == len(r)
            for t, (dt, dims) in zip(r, st["types"]):
                want = (DT[dt], [d.eval(syms) for d in dims])
                assert (t.dtype, list(t.shape)) == want, (c["name"], st["res"], t.dtype, list(t.shape), want)
        for name, rv, nv, fv in zip(st["res"], r, n, f):
            ref[name] = rv
            nat[name] = nv
            fus[name] = fv
    outs = []
    warnings = []
    for i, (kind, v) in enumerate(gr["rets"]):
        assert kind == "val", "return a value"
        t = ref[v]
        assert t is not None, (c["name"], v, "returns an absent result")
        if not c["nonfinite"] and t.is_floating_point():
            assert torch.isfinite(t.double()).all(), (c["name"], v, "non-finite output")
        if t.is_floating_point() and t.dtype != torch.float64:
            e = rel_l2(fus[v].to(t.dtype), t)
            tol = TOL[DT_NAME[t.dtype]] / 2
            if not e <= tol:
                warnings.append("%s: out_%d (%%%s, %s) rounding once per graph vs once per op: rel err %.3g > %g"
                                % (c["name"], i, v, DT_NAME[t.dtype], e, tol))
        elif not t.is_floating_point() and not torch.equal(fus[v], t):
            warnings.append("%s: out_%d (%%%s) rounding once per graph vs once per op differ" % (c["name"], i, v))
        if t.is_floating_point():
            e = rel_l2(nat[v], t)
            tol = TOL[DT_NAME[t.dtype]]
            if t.dtype == torch.float64:
                tol = 1e-10  # PyTorch's f64 kernels vs the same f64 computation: only a sanity check
            if not e <= tol:
                warnings.append("%s: out_%d (%%%s, %s) PyTorch-native vs reference rel err %.3g > %g"
                                % (c["name"], i, v, DT_NAME[t.dtype], e, tol))
        else:
            if not torch.equal(nat[v], t):
                warnings.append("%s: out_%d (%%%s) PyTorch-native differs from reference" % (c["name"], i, v))
        outs.append(t)
    try:
        tangents, grads, reasons = grad_case(c, gr, ins, ref)
    except RuntimeError as e:
        tangents, grads, reasons = None, None, ["PyTorch cannot differentiate it: %s" % str(e).split("\n")[0]]
    return ins, outs, coverage, warnings, (tangents, grads, reasons)


def main():
    # keep the runner's skip markers (cases/<case>/skip, skip_<executor>) of cases that still exist
    keep = {}
    names = {c["name"] for c in CASES}
    if os.path.isdir(CASES_DIR):
        for n in sorted(os.listdir(CASES_DIR)):
            d = os.path.join(CASES_DIR, n)
            if n in names and os.path.isdir(d):
                for fn in sorted(os.listdir(d)):
                    if fn == "skip" or fn.startswith("skip_"):
                        with open(os.path.join(d, fn), "rb") as f:
                            keep[(n, fn)] = f.read()
        shutil.rmtree(CASES_DIR)
    os.makedirs(CASES_DIR)
    cover = {}
    total = 0
    warnings = []
    ngrad = 0
    for c in CASES:
        try:
            ins, outs, cov, w, (tangents, grads, reasons) = run_case(c)
        except Exception:
            print("error in case %s" % c["name"], file=sys.stderr)
            raise
        warnings += w
        d = os.path.join(CASES_DIR, c["name"])
        os.makedirs(d)
        with open(os.path.join(d, "graph.fj"), "w") as f:
            f.write(c["text"])
        for k, t in ins.items():
            save_npy(os.path.join(d, "in_%s.npy" % k), t)
        for i, t in enumerate(outs):
            save_npy(os.path.join(d, "out_%d.npy" % i, ), t)
        if reasons:
            with open(os.path.join(d, "nograd_reason.txt"), "w") as f:
                f.write("".join(r + "\n" for r in reasons))
        if grads is not None:
            ngrad += 1
            for k, t in tangents.items():
                save_npy(os.path.join(d, "tangent_%d.npy" % k), t)
            for p, t in grads.items():
                save_npy(os.path.join(d, "grad_%s.npy" % p), t)
        for (n, fn), data in keep.items():
            if n == c["name"]:
                with open(os.path.join(d, fn), "wb") as f:
                    f.write(data)
        for op, dts in cov.items():
            cover.setdefault(op, set()).update(dts)
    for root, _, files in os.walk(CASES_DIR):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    if keep:
        print("kept skip markers: " + ", ".join("%s/%s" % k for k in sorted(keep)))
    order = ["f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool", "-"]
    print("golden: %d cases (%d with gradients), %d aten ops, %.2f MB"
          % (len(CASES), ngrad, len(cover), total / 1e6))
    for op in ATEN_OPS:
        print("  %-36s %s" % (op, " ".join(d for d in order if d in cover.get(op, ()))))
    for w in warnings:
        print("warning: " + w)
    missing = [op for op in ATEN_OPS if op not in cover]
    assert not missing, "aten ops without a golden case: %s" % missing
    extra = sorted(set(cover) - set(ATEN_OPS))
    assert not extra, extra
    assert len(CASES) >= 70


if __name__ == "__main__":
    main()
