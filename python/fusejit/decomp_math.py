"""ATen ops the bridge writes in fusejit's op set: pointwise functions, losses,
reductions and small linear algebra that fusejit has no single op for (see
decomp.py for the rule protocol). Each rule follows PyTorch's own CPU formula
(ATen's kernels and derivatives.yaml), and ends in the node's exact dtype and
shape from its meta."""
import math

import torch

from .decomp import _Emit, _dim, _shape, linalg_vector_norm
from .decomp import _result_type as _out


def _fx():
    from . import fx
    return fx


def _unsupported(why):
    return _fx().UnsupportedOp([why])


def _num(v, dt):
    """A Python number as an operand literal in the arithmetic of dtype dt."""
    if dt.is_floating_point and not isinstance(v, bool):
        return _fx().fmt_number(float(v))
    return _fx().fmt_number(v)


def _arg(conv, e, v, dt, what):
    """A tensor argument (cast to dt) or a scalar one (a literal) as an operand."""
    if isinstance(v, torch.fx.Node):
        s = conv.operand(v, what)
        return s if _shape(conv, v)[0] == dt else e.op("aten._to_copy", [s], {"dtype": dt})
    if v is None:
        raise _unsupported("%s: a missing operand" % what)
    return _num(v, dt)


def _finish(conv, n, e, v, k=None, reshape=False):
    """v as node n's result (its k-th result): the meta's dtype, and with reshape its shape."""
    dt, shape = _out(n, k)
    name = "%" + n.name if k is None else "%%%s.%d" % (n.name, k)
    if reshape:
        v = e.op("aten.reshape", [v], {"shape": list(shape)})
    return e.op("aten._to_copy", [v], {"dtype": dt}, out=name)


def _one(conv, n, e, v, reshape=False):
    conv.names[n] = _finish(conv, n, e, v, reshape=reshape)
    return e.lines


def _many(conv, n, e, vs, reshape=False):
    conv.names[n] = [_finish(conv, n, e, v, k, reshape) for k, v in enumerate(vs)]
    return e.lines


def _float_out(n):
    dt = _out(n)[0]
    if not dt.is_floating_point:
        raise _unsupported("%s with a %s result" % (n.target, dt))
    return dt


def _dims(d, rank):
    """A dim argument (None, an int, a list) as a `dims` attribute dict (absent: every dim)."""
    if d is None:
        return {}
    ds = list(d) if isinstance(d, (list, tuple)) else [d]
    return {"dims": [_dim(x, max(rank, 1)) for x in ds]}


# ---------------------------------------------------------------- pointwise

def _pointwise(names, body, float_only=True):
    """A rule for an elementwise op: its tensor/scalar arguments `names` cast to the
    result's dtype, then body(e, *operands, dt) gives the value."""
    def rule(conv, n, b):
        dt = _float_out(n) if float_only else _out(n)[0]
        e = _Emit(conv, n)
        ops = [_arg(conv, e, b[k], dt, str(n.target)) for k in names]
        return _one(conv, n, e, body(e, *ops, dt))
    return rule


def _signbit(e, x, dt):
    if not dt.is_floating_point:
        return e.op("aten.lt", [x, "0"])
    neg = e.op("aten.lt", [x, "0.0"])
    negzero = e.op("aten.logical_and", [e.op("aten.eq", [x, "0.0"]), e.op("aten.lt", [e.op("aten.reciprocal", [x]), "0.0"])])
    return e.op("aten.logical_or", [neg, negzero])


def signbit(conv, n, b):
    dt = _shape(conv, b["self"])[0]
    e = _Emit(conv, n)
    return _one(conv, n, e, _signbit(e, conv.operand(b["self"], "aten.signbit"), dt))


def copysign(conv, n, b):
    dt = _float_out(n)
    e = _Emit(conv, n)
    x = _arg(conv, e, b["self"], dt, "aten.copysign")
    o = b["other"]
    if isinstance(o, torch.fx.Node):
        od = _shape(conv, o)[0]
        sb = _signbit(e, conv.operand(o, "aten.copysign"), od)
    else:
        sb = "true" if math.copysign(1.0, float(o)) < 0 else "false"
    a = e.op("aten.abs", [x])
    return _one(conv, n, e, e.op("aten.where", [sb, e.op("aten.neg", [a]), a]))


def _fmaxmin(op):
    def body(e, a, c, dt):
        m = e.op(op, [a, c])
        if not dt.is_floating_point:
            return m
        return e.op("aten.where", [e.op("aten.isnan", [c]), a, e.op("aten.where", [e.op("aten.isnan", [a]), c, m])])
    return _pointwise(["self", "other"], body, float_only=False)


def _heaviside(e, x, v, dt):
    pos = e.op("aten._to_copy", [e.op("aten.gt", [x, "0"])], {"dtype": dt})
    return e.op("aten.where", [e.op("aten.eq", [x, "0"]), v, pos])


def _logaddexp(base2):
    def body(e, a, c, dt):
        m = e.op("aten.maximum", [a, c])
        d = e.op("aten.neg", [e.op("aten.abs", [e.op("aten.sub", [a, c])])])
        if base2:
            t = e.op("aten.mul", [e.op("aten.log1p", [e.op("aten.exp2", [d])]), repr(1.0 / math.log(2.0))])
        else:
            t = e.op("aten.log1p", [e.op("aten.exp", [d])])
        same_inf = e.op("aten.logical_and", [e.op("aten.isinf", [a]), e.op("aten.eq", [a, c])])
        return e.op("aten.where", [same_inf, a, e.op("aten.add", [m, t])])
    return _pointwise(["self", "other"], body)


def _hypot(e, a, c, dt):
    """max * sqrt(1 + (min/max)^2): no overflow; an infinite side gives inf, NaN or not."""
    a, c = e.op("aten.abs", [a]), e.op("aten.abs", [c])
    hi, lo = e.op("aten.maximum", [a, c]), e.op("aten.minimum", [a, c])
    r = e.op("aten.div", [lo, hi])
    h = e.op("aten.mul", [hi, e.op("aten.sqrt", [e.op("aten.add", [e.op("aten.mul", [r, r]), "1.0"])])])
    h = e.op("aten.where", [e.op("aten.eq", [hi, "0.0"]), "0.0", h])
    inf = e.op("aten.logical_or", [e.op("aten.isinf", [a]), e.op("aten.isinf", [c])])
    return e.op("aten.where", [inf, "inf", h])


def nan_to_num(conv, n, b):
    dt = _out(n)[0]
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.nan_to_num")
    if not dt.is_floating_point:
        return _one(conv, n, e, e.op("aten.clone", [x]))
    fi = torch.finfo(dt)
    nan = b.get("nan")
    pos = b.get("posinf")
    neg = b.get("neginf")
    y = e.op("aten.where", [e.op("aten.isnan", [x]), _num(0.0 if nan is None else nan, dt), x])
    y = e.op("aten.where", [e.op("aten.eq", [x, "inf"]), _num(fi.max if pos is None else pos, dt), y])
    y = e.op("aten.where", [e.op("aten.eq", [x, "-inf"]), _num(fi.min if neg is None else neg, dt), y])
    return _one(conv, n, e, y)


def _sinc(e, x, dt):
    """ATen's: sin(pi x) / (pi x), f16 and bf16 computed in f32 and rounded once."""
    if dt in (torch.float16, torch.bfloat16):
        x = e.op("aten._to_copy", [x], {"dtype": torch.float32})
    p = e.op("aten.mul", [x, repr(math.pi)])
    s = e.op("aten.div", [e.op("aten.sin", [p]), p])
    return e.op("aten.where", [e.op("aten.eq", [x, "0.0"]), "1.0", s])


def _entr(e, x, dt):
    v = e.op("aten.neg", [e.op("aten.mul", [x, e.op("aten.log", [x])])])
    v = e.op("aten.where", [e.op("aten.eq", [x, "0.0"]), "0.0", v])
    v = e.op("aten.where", [e.op("aten.lt", [x, "0.0"]), "-inf", v])
    return e.op("aten.where", [e.op("aten.isnan", [x]), x, v])


def _xlog(log):
    def body(e, x, y, dt):
        v = e.op("aten.mul", [x, e.op(log, [y])])
        v = e.op("aten.where", [e.op("aten.eq", [x, "0.0"]), "0.0", v])
        return e.op("aten.where", [e.op("aten.isnan", [y]), y, v])
    return _pointwise(["self", "other"], body)


def floor_divide(conv, n, b):
    dt = _out(n)[0]
    e = _Emit(conv, n)
    a = _arg(conv, e, b["self"], dt, "aten.floor_divide")
    c = _arg(conv, e, b["other"], dt, "aten.floor_divide")
    return _one(conv, n, e, e.op("aten.div", [a, c], {"rounding_mode": "floor"}))


def addcdiv(conv, n, b):
    dt = _float_out(n)
    e = _Emit(conv, n)
    s, t1, t2 = (_arg(conv, e, b[k], dt, "aten.addcdiv") for k in ("self", "tensor1", "tensor2"))
    q = e.op("aten.mul", [e.op("aten.div", [t1, t2]), _num(b.get("value", 1), dt)])
    return _one(conv, n, e, e.op("aten.add", [s, q]))


def sgn(conv, n, b):
    e = _Emit(conv, n)
    return _one(conv, n, e, e.op("aten.sign", [conv.operand(b["self"], "aten.sgn")]))


def _isinf_sign(sign):
    def rule(conv, n, b):
        e = _Emit(conv, n)
        x = conv.operand(b["self"], "aten.isposinf")
        return _one(conv, n, e, e.op("aten.eq", [x, sign + "inf"]))
    return rule


# ---------------------------------------------------------------- activations

def _celu(e, x, alpha, dt):
    neg = e.op("aten.mul", [e.op("aten.expm1", [e.op("aten.div", [x, alpha])]), alpha])
    return e.op("aten.where", [e.op("aten.gt", [x, "0.0"]), x, neg])


def celu(conv, n, b):
    dt = _float_out(n)
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.celu")
    return _one(conv, n, e, _celu(e, x, _num(b.get("alpha", 1.0), dt), dt))


def elu_backward(conv, n, b):
    """ATen's elu_backward: scale, input_scale, and the result in place of the input (is_result)."""
    dt = _float_out(n)
    e = _Emit(conv, n)
    g = conv.operand(b["grad_output"], "aten.elu_backward")
    x = conv.operand(b["self_or_result"], "aten.elu_backward")
    negcoef = float(b["alpha"]) * float(b["scale"])
    poscoef, negip = float(b["scale"]), float(b["input_scale"])
    if b["is_result"]:
        neg = e.op("aten.mul", [g, e.op("aten.mul", [e.op("aten.add", [x, _num(negcoef, dt)]), _num(negip, dt)])])
    else:
        ex = e.op("aten.exp", [e.op("aten.mul", [x, _num(negip, dt)])])
        neg = e.op("aten.mul", [g, e.op("aten.mul", [ex, _num(negip * negcoef, dt)])])
    pos = e.op("aten.mul", [g, _num(poscoef, dt)])
    return _one(conv, n, e, e.op("aten.where", [e.op("aten.le", [x, "0.0"]), neg, pos]))


def _softplus_log1p(e, x):
    return e.op("aten.log1p", [e.op("aten.exp", [x])])


def mish(conv, n, b):
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.mish")
    return _one(conv, n, e, e.op("aten.mul", [x, e.op("aten.tanh", [_softplus_log1p(e, x)])]))


def mish_backward(conv, n, b):
    e = _Emit(conv, n)
    g = conv.operand(b["grad_output"], "aten.mish_backward")
    x = conv.operand(b["self"], "aten.mish_backward")
    sg = e.op("aten.sigmoid", [x])
    t = e.op("aten.tanh", [_softplus_log1p(e, x)])
    d = e.op("aten.sub", ["1.0", e.op("aten.mul", [t, t])])
    d = e.op("aten.add", [t, e.op("aten.mul", [x, e.op("aten.mul", [sg, d])])])
    return _one(conv, n, e, e.op("aten.mul", [g, d]))


def threshold(conv, n, b):
    dt = _out(n)[0]
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.threshold")
    le = e.op("aten.le", [x, _num(b["threshold"], dt)])
    return _one(conv, n, e, e.op("aten.where", [le, _num(b["value"], dt), x]))


def logit(conv, n, b):
    dt = _float_out(n)
    e = _Emit(conv, n)
    x = _arg(conv, e, b["self"], dt, "aten.logit")
    eps = b.get("eps")
    if eps is not None:
        lo, hi = _num(eps, dt), _num(1.0 - float(eps), dt)  # ATen's order: x < lo first (lo > hi too)
        x = e.op("aten.where", [e.op("aten.lt", [x, lo]), lo, e.op("aten.where", [e.op("aten.gt", [x, hi]), hi, x])])
    return _one(conv, n, e, e.op("aten.log", [e.op("aten.div", [x, e.op("aten.sub", ["1.0", x])])]))


def logit_backward(conv, n, b):
    dt = _float_out(n)
    e = _Emit(conv, n)
    g = conv.operand(b["grad_output"], "aten.logit_backward")
    x = conv.operand(b["self"], "aten.logit_backward")
    eps = b.get("eps")
    d = e.op("aten.div", [g, e.op("aten.mul", [x, e.op("aten.sub", ["1.0", x])])])
    lo, hi, fill = (0.0, 1.0, "nan") if eps is None or eps < 0 else (float(eps), 1.0 - float(eps), "0.0")
    out = e.op("aten.logical_or", [e.op("aten.lt", [x, _num(lo, dt)]), e.op("aten.gt", [x, _num(hi, dt)])])
    return _one(conv, n, e, e.op("aten.where", [out, fill, d]))


def log_sigmoid_forward(conv, n, b):
    """(out, buffer): ATen's CPU buffer is exp(-|x|); CUDA's is empty (its meta says which)."""
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.log_sigmoid_forward")
    z = e.op("aten.exp", [e.op("aten.neg", [e.op("aten.abs", [x])])])
    out = e.op("aten.sub", [e.op("aten.minimum", [x, "0.0"]), e.op("aten.log1p", [z])])
    bt, bshape = _out(n, 1)
    buf = z if tuple(bshape) != (0,) or _out(n, 0)[1] == (0,) else \
        e.op("aten.full", [], {"shape": [0], "value": 0, "dtype": bt})
    return _many(conv, n, e, [out, buf])


def log_sigmoid_backward(conv, n, b):
    """From the input alone (the buffer is exp(-|x|) on CPU, empty on CUDA)."""
    e = _Emit(conv, n)
    g = conv.operand(b["grad_output"], "aten.log_sigmoid_backward")
    x = conv.operand(b["self"], "aten.log_sigmoid_backward")
    z = e.op("aten.exp", [e.op("aten.neg", [e.op("aten.abs", [x])])])
    neg = e.op("aten.lt", [x, "0.0"])
    maxd = e.op("aten._to_copy", [neg], {"dtype": _out(n)[0]})
    sign = e.op("aten.where", [neg, "1.0", "-1.0"])
    d = e.op("aten.sub", [maxd, e.op("aten.mul", [sign, e.op("aten.div", [z, e.op("aten.add", [z, "1.0"])])])])
    return _one(conv, n, e, e.op("aten.mul", [d, g]))


def _prelu_kernel(conv, n, b):
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten._prelu_kernel")
    w = conv.operand(b["weight"], "aten._prelu_kernel")
    return _one(conv, n, e, e.op("aten.where", [e.op("aten.gt", [x, "0.0"]), x, e.op("aten.mul", [w, x])]))


def _prelu_kernel_backward(conv, n, b):
    e = _Emit(conv, n)
    g = conv.operand(b["grad_output"], "aten._prelu_kernel_backward")
    x = conv.operand(b["self"], "aten._prelu_kernel_backward")
    w = conv.operand(b["weight"], "aten._prelu_kernel_backward")
    pos = e.op("aten.gt", [x, "0.0"])
    gx = e.op("aten.where", [pos, g, e.op("aten.mul", [w, g])])
    gw = e.op("aten.where", [pos, "0.0", e.op("aten.mul", [x, g])])
    return _many(conv, n, e, [e.op("aten.expand", [gx], {"size": list(_out(n, 0)[1])}),
                              e.op("aten.expand", [gw], {"size": list(_out(n, 1)[1])})])


def _prelu_weight(conv, e, b, what):
    """prelu's weight ([C] or [1]) laid along dim 1 of self, as ATen's prelu broadcasts it."""
    _, shape = _shape(conv, b["self"])
    _, ws = _shape(conv, b["weight"])
    w = conv.operand(b["weight"], what)
    if len(shape) >= 2 and ws and ws[0] > 1:
        w = e.op("aten.reshape", [w], {"shape": [ws[0]] + [1] * (len(shape) - 2)})
    elif ws:
        w = e.op("aten.reshape", [w], {"shape": []})
    return w


def prelu(conv, n, b):
    """PyTorch 1.x's prelu (2.x's is _prelu_kernel on a weight already laid out)."""
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.prelu")
    w = _prelu_weight(conv, e, b, "aten.prelu")
    return _one(conv, n, e, e.op("aten.where", [e.op("aten.gt", [x, "0.0"]), x, e.op("aten.mul", [w, x])]))


def prelu_backward(conv, n, b):
    _, shape = _shape(conv, b["self"])
    _, ws = _shape(conv, b["weight"])
    e = _Emit(conv, n)
    g = conv.operand(b["grad_output"], "aten.prelu_backward")
    x = conv.operand(b["self"], "aten.prelu_backward")
    w = _prelu_weight(conv, e, b, "aten.prelu_backward")
    pos = e.op("aten.gt", [x, "0.0"])
    gx = e.op("aten.where", [pos, g, e.op("aten.mul", [w, g])])
    gw = e.op("aten.where", [pos, "0.0", e.op("aten.mul", [x, g])])
    dims = [d for d in range(len(shape)) if not (d == 1 and ws and ws[0] > 1)]
    gw = e.op("aten.sum", [gw], {"dims": dims}) if dims else gw
    return _many(conv, n, e, [gx, gw], reshape=True)


def glu(conv, n, b):
    dt, shape = _shape(conv, b["self"])
    d = _dim(b.get("dim", -1), len(shape))
    h = shape[d] // 2
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.glu")
    a = e.op("aten.slice", [x], {"dim": d, "start": 0, "end": h})
    c = e.op("aten.slice", [x], {"dim": d, "start": h, "end": 2 * h})
    return _one(conv, n, e, e.op("aten.mul", [a, e.op("aten.sigmoid", [c])]))


def glu_backward(conv, n, b):
    dt, shape = _shape(conv, b["self"])
    d = _dim(b["dim"], len(shape))
    h = shape[d] // 2
    e = _Emit(conv, n)
    g = conv.operand(b["grad_output"], "aten.glu_backward")
    x = conv.operand(b["self"], "aten.glu_backward")
    a = e.op("aten.slice", [x], {"dim": d, "start": 0, "end": h})
    s = e.op("aten.sigmoid", [e.op("aten.slice", [x], {"dim": d, "start": h, "end": 2 * h})])
    ga = e.op("aten.mul", [g, s])
    gb = e.op("aten.mul", [e.op("aten.mul", [ga, a]), e.op("aten.sub", ["1.0", s])])
    return _one(conv, n, e, e.op("aten.cat", [ga, gb], {"dim": d}))


# ---------------------------------------------------------------- reductions

def _maxmin(amax, argmax, binary):
    def rule(conv, n, b):
        ov = n.target._overloadname
        e = _Emit(conv, n)
        what = str(n.target)
        if ov in ("other", "binary"):
            x, y = conv.operand(b["self"], what), conv.operand(b["other"], what)
            return _one(conv, n, e, e.op(binary, [x, y]))
        dt, shape = _shape(conv, b["self"])
        x = conv.operand(b["self"], what)
        if ov == "default":
            return _one(conv, n, e, e.op(amax, [x]), reshape=True)
        if ov != "dim":
            raise _unsupported("%s (overload %s)" % (what, ov))
        d = _dim(b["dim"], max(len(shape), 1))
        kd = bool(b.get("keepdim", False))
        if dt == torch.bool:  # argmax/amax on the 0/1 values
            x = e.op("aten._to_copy", [x], {"dtype": torch.uint8})
        v = e.op(amax, [x], {"dims": [d], "keepdim": kd})
        i = e.op(argmax, [x], {"dim": d, "keepdim": kd})
        return _many(conv, n, e, [v, i], reshape=True)
    return rule


def aminmax(conv, n, b):
    dt, shape = _shape(conv, b["self"])
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.aminmax")
    attrs = dict(_dims(b.get("dim"), len(shape)), keepdim=bool(b.get("keepdim", False)))
    if dt == torch.bool:
        x = e.op("aten._to_copy", [x], {"dtype": torch.uint8})
    return _many(conv, n, e, [e.op("aten.amin", [x], attrs), e.op("aten.amax", [x], attrs)], reshape=True)


def _allany(is_all):
    def rule(conv, n, b):
        dt, shape = _shape(conv, b["self"])
        e = _Emit(conv, n)
        x = conv.operand(b["self"], str(n.target))
        attrs = dict(_dims(b.get("dim"), len(shape)), keepdim=bool(b.get("keepdim", False)), dtype=torch.int64)
        hit = e.op("aten.eq" if is_all else "aten.ne", [x, "0"])  # NaN is true: ne(NaN, 0)
        cnt = e.op("aten.sum", [e.op("aten._to_copy", [hit], {"dtype": torch.int64})], attrs)
        return _one(conv, n, e, e.op("aten.eq" if is_all else "aten.gt", [cnt, "0"]), reshape=True)
    return rule


def _correction(b):
    if "unbiased" in b and b.get("correction") is None:
        return 1 if b["unbiased"] else 0
    c = b.get("correction")
    return 1 if c is None else c


def _std(with_mean):
    def rule(conv, n, b):
        dt, shape = _shape(conv, b["self"])
        e = _Emit(conv, n)
        x = conv.operand(b["self"], str(n.target))
        attrs = dict(_dims(b.get("dim"), len(shape)), correction=_correction(b), keepdim=bool(b.get("keepdim", False)))
        if not with_mean:
            return _one(conv, n, e, e.op("aten.sqrt", [e.op("aten.var", [x], attrs)]), reshape=True)
        v, m = e.tmp(), e.tmp()
        e.op("aten.var_mean", [x], attrs, out="%s, %s" % (v, m))
        return _many(conv, n, e, [e.op("aten.sqrt", [v]), m], reshape=True)
    return rule


def nansum(conv, n, b):
    dt, shape = _shape(conv, b["self"])
    odt = _out(n)[0]
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.nansum")
    if dt.is_floating_point:
        x = e.op("aten.where", [e.op("aten.isnan", [x]), "0.0", x])
    attrs = dict(_dims(b.get("dim"), len(shape)), keepdim=bool(b.get("keepdim", False)), dtype=odt)
    return _one(conv, n, e, e.op("aten.sum", [x], attrs), reshape=True)


def count_nonzero(conv, n, b):
    dt, shape = _shape(conv, b["self"])
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.count_nonzero")
    nz = e.op("aten._to_copy", [e.op("aten.ne", [x, "0"])], {"dtype": torch.int64})
    attrs = dict(_dims(b.get("dim"), len(shape)), dtype=torch.int64)
    return _one(conv, n, e, e.op("aten.sum", [nz], attrs), reshape=True)


def norm(conv, n, b):
    """norm.Scalar/ScalarOpt_dim/..._dtype: linalg_vector_norm's rule (p None: 2)."""
    p = b.get("p")
    nb = {"self": b["self"], "ord": 2 if p is None else p, "dim": b.get("dim"),
          "keepdim": b.get("keepdim", False), "dtype": b.get("dtype")}
    if nb["dim"] is not None and len(list(nb["dim"])) == 0:
        nb["dim"] = None
    return linalg_vector_norm(conv, n, nb)


def renorm(conv, n, b):
    """ATen's: each slice along dim whose p-norm exceeds maxnorm is scaled by maxnorm / (norm + 1e-7)."""
    dt, shape = _shape(conv, b["self"])
    d = _dim(b["dim"], len(shape))
    odt = _float_out(n)
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten.renorm")
    attrs = {"dims": [k for k in range(len(shape)) if k != d], "keepdim": True}
    xw = e.op("aten._to_copy", [x], {"dtype": torch.float32}) if odt in (torch.float16, torch.bfloat16) else x
    p = float(b["p"])
    nrm = e.op("aten.amax", [e.op("aten.abs", [xw])], attrs) if p == float("inf") else _pnorm(e, xw, p, attrs, odt)
    mx = _num(b["maxnorm"], odt)
    f = e.op("aten.where", [e.op("aten.gt", [nrm, mx]), e.op("aten.div", [mx, e.op("aten.add", [nrm, "1e-07"])]), "1.0"])
    return _one(conv, n, e, e.op("aten.mul", [x, f]))


def trace(conv, n, b):
    dt, shape = _shape(conv, b["self"])
    if len(shape) != 2:
        raise _unsupported("aten.trace of a rank-%d tensor" % len(shape))
    r, c = shape
    k = min(r, c)
    e = _Emit(conv, n)
    x = e.op("aten.reshape", [conv.operand(b["self"], "aten.trace")], {"shape": [r * c]})
    d = e.op("aten.slice", [x], {"dim": 0, "start": 0, "end": (k - 1) * (c + 1) + 1 if k else 0, "step": c + 1})
    return _one(conv, n, e, e.op("aten.sum", [d], {"dtype": _out(n)[0]}), reshape=True)


# ---------------------------------------------------------------- losses

def _reduced(e, v, reduction):
    """ATen's Reduction enum: 0 none, 1 mean, 2 sum."""
    if reduction == 0:
        return v
    return e.op("aten.mean" if reduction == 1 else "aten.sum", [v])


def _loss_scale(conv, b, reduction):
    """The factor a loss's backward applies: 1/numel for a mean."""
    if reduction != 1:
        return 1.0
    numel = 1
    for s in _shape(conv, b["self"])[1]:
        numel *= s
    return 1.0 / numel if numel else float("nan")


def _loss(body):
    """A loss(self, target, ...) rule: body(e, x, y, b, dt) is the elementwise loss."""
    def rule(conv, n, b):
        dt = _float_out(n)
        e = _Emit(conv, n)
        x = _arg(conv, e, b["self"], dt, str(n.target))
        y = _arg(conv, e, b["target"], dt, str(n.target))
        return _one(conv, n, e, _reduced(e, body(e, x, y, b, dt), b.get("reduction", 1)))
    return rule


def _loss_backward(body):
    """A loss backward(grad_output, self, target, ...) rule: body(e, x, y, b, dt) is the
    elementwise derivative, times grad_output and the mean's 1/numel."""
    def rule(conv, n, b):
        dt, shape = _out(n)
        e = _Emit(conv, n)
        x = _arg(conv, e, b["self"], dt, str(n.target))
        y = _arg(conv, e, b["target"], dt, str(n.target))
        g = _arg(conv, e, b["grad_output"], dt, str(n.target))
        d = e.op("aten.mul", [body(e, x, y, b, dt), g])
        k = _loss_scale(conv, b, b.get("reduction", 1))
        if k != 1.0:
            d = e.op("aten.mul", [d, _num(k, dt)])
        return _one(conv, n, e, e.op("aten.expand", [d], {"size": list(shape)}))
    return rule


def _mse(e, x, y, b, dt):
    d = e.op("aten.sub", [x, y])
    return e.op("aten.mul", [d, d])


def _mse_b(e, x, y, b, dt):
    return e.op("aten.mul", [e.op("aten.sub", [x, y]), "2.0"])


def _huber(e, x, y, b, dt):
    delta = float(b.get("delta", 1.0))
    z = e.op("aten.abs", [e.op("aten.sub", [x, y])])
    sq = e.op("aten.mul", [e.op("aten.mul", [z, z]), "0.5"])
    lin = e.op("aten.mul", [e.op("aten.sub", [z, _num(0.5 * delta, dt)]), _num(delta, dt)])
    return e.op("aten.where", [e.op("aten.lt", [z, _num(delta, dt)]), sq, lin])


def _clip_b(e, x, y, lo, hi, mid):
    d = e.op("aten.sub", [x, y])
    v = e.op("aten.where", [e.op("aten.ge", [d, hi[0]]), hi[1], mid(d)])
    return e.op("aten.where", [e.op("aten.le", [d, lo[0]]), lo[1], v])


def _huber_b(e, x, y, b, dt):
    dl = float(b.get("delta", 1.0))
    return _clip_b(e, x, y, (_num(-dl, dt), _num(-dl, dt)), (_num(dl, dt), _num(dl, dt)), lambda d: d)


def _smooth_l1(e, x, y, b, dt):
    beta = float(b.get("beta", 1.0))
    z = e.op("aten.abs", [e.op("aten.sub", [x, y])])
    if beta == 0.0:
        return z
    sq = e.op("aten.div", [e.op("aten.mul", [e.op("aten.mul", [z, z]), "0.5"]), _num(beta, dt)])
    return e.op("aten.where", [e.op("aten.lt", [z, _num(beta, dt)]), sq, e.op("aten.sub", [z, _num(0.5 * beta, dt)])])


def _smooth_l1_b(e, x, y, b, dt):
    beta = float(b.get("beta", 1.0))
    if beta == 0.0:
        return e.op("aten.sign", [e.op("aten.sub", [x, y])])
    return _clip_b(e, x, y, (_num(-beta, dt), "-1.0"), (_num(beta, dt), "1.0"),
                   lambda d: e.op("aten.div", [d, _num(beta, dt)]))


def _soft_margin(e, x, y, b, dt):
    return e.op("aten.log1p", [e.op("aten.exp", [e.op("aten.neg", [e.op("aten.mul", [x, y])])])])


def _soft_margin_b(e, x, y, b, dt):
    z = e.op("aten.exp", [e.op("aten.neg", [e.op("aten.mul", [x, y])])])
    return e.op("aten.div", [e.op("aten.mul", [e.op("aten.neg", [y]), z]), e.op("aten.add", [z, "1.0"])])


def _weighted(conv, e, b, v, dt, what):
    w = b.get("weight")
    return v if w is None else e.op("aten.mul", [v, _arg(conv, e, w, dt, what)])


def binary_cross_entropy(conv, n, b):
    dt = _float_out(n)
    e = _Emit(conv, n)
    x = _arg(conv, e, b["self"], dt, "aten.binary_cross_entropy")
    y = _arg(conv, e, b["target"], dt, "aten.binary_cross_entropy")
    lx = e.op("aten.maximum", [e.op("aten.log", [x]), "-100.0"])
    l1x = e.op("aten.maximum", [e.op("aten.log1p", [e.op("aten.neg", [x])]), "-100.0"])
    v = e.op("aten.sub", [e.op("aten.mul", [e.op("aten.sub", [y, "1.0"]), l1x]), e.op("aten.mul", [y, lx])])
    v = _weighted(conv, e, b, v, dt, "aten.binary_cross_entropy")
    return _one(conv, n, e, _reduced(e, v, b.get("reduction", 1)))


def binary_cross_entropy_backward(conv, n, b):
    dt, shape = _out(n)
    e = _Emit(conv, n)
    what = "aten.binary_cross_entropy_backward"
    x, y, g = (_arg(conv, e, b[k], dt, what) for k in ("self", "target", "grad_output"))
    den = e.op("aten.maximum", [e.op("aten.mul", [e.op("aten.sub", ["1.0", x]), x]), "1e-12"])
    d = e.op("aten.div", [e.op("aten.mul", [g, e.op("aten.sub", [x, y])]), den])
    d = _weighted(conv, e, b, d, dt, what)
    k = _loss_scale(conv, b, b.get("reduction", 1))
    if k != 1.0:
        d = e.op("aten.mul", [d, _num(k, dt)])
    return _one(conv, n, e, e.op("aten.expand", [d], {"size": list(shape)}))


def binary_cross_entropy_with_logits(conv, n, b):
    """ATen's: (1 - y) x - (1 + (pw - 1) y) log_sigmoid(x), times weight."""
    dt = _float_out(n)
    e = _Emit(conv, n)
    what = "aten.binary_cross_entropy_with_logits"
    x = _arg(conv, e, b["self"], dt, what)
    y = _arg(conv, e, b["target"], dt, what)
    ls = e.op("aten.sub", [e.op("aten.minimum", [x, "0.0"]),
                           e.op("aten.log1p", [e.op("aten.exp", [e.op("aten.neg", [e.op("aten.abs", [x])])])])])
    pw = b.get("pos_weight")
    if pw is not None:
        lw = e.op("aten.add", [e.op("aten.mul", [e.op("aten.sub", [_arg(conv, e, pw, dt, what), "1.0"]), y]), "1.0"])
        ls = e.op("aten.mul", [lw, ls])
    v = e.op("aten.sub", [e.op("aten.mul", [e.op("aten.sub", ["1.0", y]), x]), ls])
    v = _weighted(conv, e, b, v, dt, what)
    return _one(conv, n, e, _reduced(e, v, b.get("reduction", 1)))


# ---------------------------------------------------------------- matrix and vector products

def _beta_alpha(conv, e, b, prod, dt, what):
    """beta * self + alpha * prod; beta == 0 ignores self (its NaNs too), as ATen does."""
    beta, alpha = b.get("beta", 1), b.get("alpha", 1)
    if dt == torch.bool:
        raise _unsupported("%s on bool tensors" % what)
    if alpha != 1:
        prod = e.op("aten.mul", [prod, _num(alpha, dt)])
    if beta == 0:
        return prod
    s = _arg(conv, e, b["self"], dt, what)
    if beta != 1:
        s = e.op("aten.mul", [s, _num(beta, dt)])
    return e.op("aten.add", [s, prod])


# A product summed over at most this many terms is accumulated term by term, in
# ATen's order (addbmm: batch, then inner index; mv: the inner index), in the output
# dtype: with cancellation, eager's result can be farther from the exact sum than
# assert_close allows, and only its own order stays within it. Longer sums take the
# matmul (mv) or one f64 mm (addbmm).
SEQUENTIAL_SUM_MAX = 64


def _mv(conv, e, mat, vec, what):
    m, v = conv.operand(mat, what), conv.operand(vec, what)
    dt, shape = _shape(conv, mat)
    K = shape[1] if len(shape) == 2 else 0
    if dt in (torch.float32, torch.float64) and isinstance(K, int) and 0 < K <= SEQUENTIAL_SUM_MAX:
        r = None
        for k in range(K):
            t = e.op("aten.mul", [e.op("aten.slice", [m], {"dim": 1, "start": k, "end": k + 1}),
                                  e.op("aten.slice", [v], {"dim": 0, "start": k, "end": k + 1})])
            r = t if r is None else e.op("aten.add", [r, t])
        return e.op("aten.squeeze", [r], {"dims": [1]})
    u = e.op("aten.unsqueeze", [v], {"dim": 1})
    return e.op("aten.squeeze", [e.op("aten.mm", [m, u])], {"dims": [1]})


def mv(conv, n, b):
    e = _Emit(conv, n)
    return _one(conv, n, e, _mv(conv, e, b["self"], b["vec"], "aten.mv"))


def addmv(conv, n, b):
    dt = _out(n)[0]
    e = _Emit(conv, n)
    p = _mv(conv, e, b["mat"], b["vec"], "aten.addmv")
    return _one(conv, n, e, _beta_alpha(conv, e, b, p, dt, "aten.addmv"))


def addr(conv, n, b):
    dt = _out(n)[0]
    e = _Emit(conv, n)
    v1 = e.op("aten.unsqueeze", [conv.operand(b["vec1"], "aten.addr")], {"dim": 1})
    v2 = e.op("aten.unsqueeze", [conv.operand(b["vec2"], "aten.addr")], {"dim": 0})
    p = _beta_alpha(conv, e, b, e.op("aten.mul", [v1, v2]), dt, "aten.addr")
    return _one(conv, n, e, e.op("aten.expand", [p], {"size": list(_out(n)[1])}))


def baddbmm(conv, n, b):
    dt, shape = _out(n)
    e = _Emit(conv, n)
    p = e.op("aten.bmm", [conv.operand(b["batch1"], "aten.baddbmm"), conv.operand(b["batch2"], "aten.baddbmm")])
    p = _beta_alpha(conv, e, b, p, dt, "aten.baddbmm")
    return _one(conv, n, e, e.op("aten.expand", [p], {"size": list(shape)}))


def addbmm(conv, n, b):
    """beta * self + alpha * sum_k b1[k] @ b2[k]. A short sum is accumulated term by
    term onto beta * self in the output dtype, in ATen's order (batch, then inner
    index): with cancellation, eager's result is far from the exact sum, and only
    its own order stays within assert_close of it. A long one is summed in f64 and
    rounded once."""
    dt, shape = _out(n)
    (_, (B, N, K)), (_, (_, _, M)) = _shape(conv, b["batch1"]), _shape(conv, b["batch2"])
    e = _Emit(conv, n)
    x1, x2 = conv.operand(b["batch1"], "aten.addbmm"), conv.operand(b["batch2"], "aten.addbmm")
    if dt in (torch.float32, torch.float64) and 0 < B * K <= SEQUENTIAL_SUM_MAX:
        beta, alpha = b.get("beta", 1), b.get("alpha", 1)
        if beta == 0:
            r = e.op("aten.full", [], {"shape": list(shape), "value": 0, "dtype": dt})
        else:
            r = _arg(conv, e, b["self"], dt, "aten.addbmm")
            r = e.op("aten.mul", [r, _num(beta, dt)]) if beta != 1 else r
        for k in range(B):
            b1k = e.op("aten.slice", [x1], {"dim": 0, "start": k, "end": k + 1})  # [1,N,K]
            b2k = e.op("aten.slice", [x2], {"dim": 0, "start": k, "end": k + 1})  # [1,K,M]
            for j in range(K):
                col = e.op("aten.slice", [b1k], {"dim": 2, "start": j, "end": j + 1})
                row = e.op("aten.slice", [b2k], {"dim": 1, "start": j, "end": j + 1})
                t = e.op("aten.mul", [col, row])  # [1,N,M]
                r = e.op("aten.add", [r, e.op("aten.mul", [t, _num(alpha, dt)]) if alpha != 1 else t])
        return _one(conv, n, e, e.op("aten.reshape", [r], {"shape": list(shape)}))
    b1 = e.op("aten.reshape", [e.op("aten.permute", [x1], {"dims": [1, 0, 2]})], {"shape": [N, B * K]})
    b2 = e.op("aten.reshape", [x2], {"shape": [B * K, M]})
    wide = torch.float64 if dt == torch.float32 else dt
    if wide != dt:
        b1, b2 = (e.op("aten._to_copy", [t], {"dtype": wide}) for t in (b1, b2))
    r = _beta_alpha(conv, e, b, e.op("aten.mm", [b1, b2]), wide, "aten.addbmm")
    return _one(conv, n, e, e.op("aten.expand", [r], {"size": list(shape)}))


def vdot(conv, n, b):
    e = _Emit(conv, n)
    m = e.op("aten.mul", [conv.operand(b["self"], "aten.vdot"), conv.operand(b["other"], "aten.vdot")])
    return _one(conv, n, e, e.op("aten.sum", [m]))


def _pnorm(e, d, p, attrs, dt):
    """The p-norm of d over attrs' dims, as ATen's distance kernels compute it."""
    p = float(p)
    a = e.op("aten.abs", [d])
    if p == 0:
        return e.op("aten.sum", [e.op("aten._to_copy", [e.op("aten.ne", [d, "0.0"])], {"dtype": dt})], attrs)
    if p == float("inf"):
        return e.op("aten.amax", [a], attrs)
    if p == 1:
        return e.op("aten.sum", [a], attrs)
    if p == 2:
        return e.op("aten.sqrt", [e.op("aten.sum", [e.op("aten.mul", [d, d])], attrs)])
    return e.op("aten.pow", [e.op("aten.sum", [e.op("aten.pow", [a, _num(p, dt)])], attrs), _num(1.0 / p, dt)])


def dist(conv, n, b):
    dt = _float_out(n)
    e = _Emit(conv, n)
    d = e.op("aten.sub", [conv.operand(b["self"], "aten.dist"), conv.operand(b["other"], "aten.dist")])
    p = b.get("p", 2)
    if float(p) == float("-inf"):
        return _one(conv, n, e, e.op("aten.amin", [e.op("aten.abs", [d])]))
    return _one(conv, n, e, _pnorm(e, d, p, {}, dt))


def _euclid(e, x1, x2):
    """ATen's _euclidean_dist: [-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T, clamped at 0, sqrt."""
    n1 = e.op("aten.sum", [e.op("aten.mul", [x1, x1])], {"dims": [-1], "keepdim": True})
    n2 = e.op("aten.sum", [e.op("aten.mul", [x2, x2])], {"dims": [-1], "keepdim": True})
    a = e.op("aten.cat", [e.op("aten.mul", [x1, "-2.0"]), n1, e.op("aten.ones_like", [n1])], {"dim": -1})
    c = e.op("aten.cat", [x2, e.op("aten.ones_like", [n2]), n2], {"dim": -1})
    r = e.op("aten.matmul", [a, e.op("aten.transpose", [c], {"dim0": -2, "dim1": -1})])
    return e.op("aten.sqrt", [e.op("aten.clamp", [r], {"min": 0.0})])


def _euclidean_dist(conv, n, b):
    e = _Emit(conv, n)
    x1, x2 = conv.operand(b["x1"], "aten._euclidean_dist"), conv.operand(b["x2"], "aten._euclidean_dist")
    return _one(conv, n, e, _euclid(e, x1, x2), reshape=True)


def _cdist_forward(conv, n, b):
    dt, shape = _out(n)
    (_, s1), (_, s2) = _shape(conv, b["x1"]), _shape(conv, b["x2"])
    P, R = s1[-2], s2[-2]
    p, mode = float(b["p"]), b.get("compute_mode")
    e = _Emit(conv, n)
    x1, x2 = conv.operand(b["x1"], "aten._cdist_forward"), conv.operand(b["x2"], "aten._cdist_forward")
    if p == 2 and (mode == 1 or (mode in (None, 0) and (P > 25 or R > 25))):
        return _one(conv, n, e, e.op("aten.expand", [_euclid(e, x1, x2)], {"size": list(shape)}))
    d = e.op("aten.sub", [e.op("aten.unsqueeze", [x1], {"dim": -2}), e.op("aten.unsqueeze", [x2], {"dim": -3})])
    if s1[-1] == 0:
        return _one(conv, n, e, e.op("aten.full", [], {"shape": list(shape), "value": 0, "dtype": dt}))
    return _one(conv, n, e, e.op("aten.expand", [_pnorm(e, d, p, {"dims": [-1]}, dt)], {"size": list(shape)}))


def _pdist_forward(conv, n, b):
    dt, shape = _out(n)
    _, (N, M) = _shape(conv, b["self"])
    e = _Emit(conv, n)
    x = conv.operand(b["self"], "aten._pdist_forward")
    if N < 2 or M == 0:
        return _one(conv, n, e, e.op("aten.full", [], {"shape": list(shape), "value": 0, "dtype": dt}))
    parts = []
    for i in range(N - 1):
        xi = e.op("aten.slice", [x], {"dim": 0, "start": i, "end": i + 1})
        rest = e.op("aten.slice", [x], {"dim": 0, "start": i + 1, "end": N})
        parts.append(_pnorm(e, e.op("aten.sub", [xi, rest]), b.get("p", 2), {"dims": [1]}, dt))
    return _one(conv, n, e, e.op("aten.cat", parts, {"dim": 0}) if len(parts) > 1 else parts[0])


def _dist_grad(e, diff, g, d, p, dt):
    """d dist / d x1 times grad for one pair's difference, as ATen's distance kernels
    (Distance.cpp's backward of each p): 0 where the distance is 0."""
    p = float(p)
    if p == 0:
        return e.op("aten.mul", [diff, "0.0"])
    sg = e.op("aten.sign", [diff])
    if p == 1:
        return e.op("aten.mul", [sg, g])
    zero = e.op("aten.eq", [d, "0.0"])
    if p == float("inf"):
        hit = e.op("aten._to_copy", [e.op("aten.eq", [e.op("aten.abs", [diff]), d])], {"dtype": dt})
        return e.op("aten.mul", [e.op("aten.mul", [sg, g]), hit])
    if p == 2:
        v = e.op("aten.div", [e.op("aten.mul", [g, diff]), d])
    elif p < 2:
        a = e.op("aten.pow", [e.op("aten.abs", [diff]), _num(p - 1, dt)])
        v = e.op("aten.div", [e.op("aten.mul", [e.op("aten.mul", [sg, a]), g]), e.op("aten.pow", [d, _num(p - 1, dt)])])
        if p < 1:
            zero = e.op("aten.logical_or", [zero, e.op("aten.eq", [diff, "0.0"])])
    else:
        a = e.op("aten.pow", [e.op("aten.abs", [diff]), _num(p - 2, dt)])
        v = e.op("aten.div", [e.op("aten.mul", [e.op("aten.mul", [diff, a]), g]), e.op("aten.pow", [d, _num(p - 1, dt)])])
    return e.op("aten.where", [zero, "0.0", v])


def _grad_arg(b):
    return b["grad_output"] if "grad_output" in b else b["grad"]  # PyTorch 2.x's name, 1.13's


def _cdist_backward(conv, n, b):
    dt, shape = _out(n)
    (_, s1), (_, s2) = _shape(conv, b["x1"]), _shape(conv, b["x2"])
    if tuple(s1[:-2]) != tuple(s2[:-2]):
        raise _unsupported("aten._cdist_backward with broadcast batch dims")
    e = _Emit(conv, n)
    what = "aten._cdist_backward"
    x1, x2 = conv.operand(b["x1"], what), conv.operand(b["x2"], what)
    diff = e.op("aten.sub", [e.op("aten.unsqueeze", [x1], {"dim": -2}), e.op("aten.unsqueeze", [x2], {"dim": -3})])
    g = e.op("aten.unsqueeze", [conv.operand(_grad_arg(b), what)], {"dim": -1})
    d = e.op("aten.unsqueeze", [conv.operand(b["cdist"], what)], {"dim": -1})
    v = e.op("aten.sum", [_dist_grad(e, diff, g, d, b["p"], dt)], {"dims": [len(s1) - 1]})
    return _one(conv, n, e, v, reshape=True)


def _pdist_backward(conv, n, b):
    """Pair (i, j), i < j, adds its term to row i and takes it from row j."""
    dt, (N, M) = _out(n)
    e = _Emit(conv, n)
    what = "aten._pdist_backward"
    x = conv.operand(b["self"], what)
    grad, pd = conv.operand(_grad_arg(b), what), conv.operand(b["pdist"], what)
    total, at = None, 0
    for i in range(N - 1):
        k = N - 1 - i
        diff = e.op("aten.sub", [e.op("aten.slice", [x], {"dim": 0, "start": i, "end": i + 1}),
                                 e.op("aten.slice", [x], {"dim": 0, "start": i + 1, "end": N})])
        g, d = (e.op("aten.unsqueeze", [e.op("aten.slice", [t], {"dim": 0, "start": at, "end": at + k})], {"dim": 1})
                for t in (grad, pd))
        at += k
        t = _dist_grad(e, diff, g, d, b["p"], dt)
        parts = [e.op("aten.full", [], {"shape": [i, M], "value": 0, "dtype": dt})] if i else []
        parts += [e.op("aten.sum", [t], {"dims": [0], "keepdim": True}), e.op("aten.neg", [t])]
        row = e.op("aten.cat", parts, {"dim": 0})
        total = row if total is None else e.op("aten.add", [total, row])
    if total is None:
        total = e.op("aten.full", [], {"shape": [N, M], "value": 0, "dtype": dt})
    return _one(conv, n, e, total)


def _trilinear(conv, n, b):
    """i1, i2 and i3 unsqueezed at their expand dims, multiplied, summed over sumdim."""
    e = _Emit(conv, n)
    prod = None
    for k in ("i1", "i2", "i3"):
        x = conv.operand(b[k], "aten._trilinear")
        for d in sorted(b["expand" + k[1]]):
            x = e.op("aten.unsqueeze", [x], {"dim": d})
        prod = x if prod is None else e.op("aten.mul", [prod, x])
    if b["sumdim"]:
        prod = e.op("aten.sum", [prod], {"dims": sorted(b["sumdim"])})
    return _one(conv, n, e, prod, reshape=True)


# ---------------------------------------------------------------- group norm

def _group_view(e, x, N, G, shape):
    return e.op("aten.reshape", [x], {"shape": [N, G, -1] if N * G else [N, G, 0]})


def _channel(e, w, C, rank):
    """A per-channel [C] tensor laid along dim 1 of a rank-`rank` [N, C, ...] tensor."""
    return e.op("aten.reshape", [w], {"shape": [C] + [1] * (rank - 2)})


def native_group_norm(conv, n, b):
    """(out, mean, rstd): x over [N, group, C/group * HxW], biased variance, as ATen."""
    dt, shape = _shape(conv, b["input"])
    N, C, G = b["N"], b["C"], b["group"]
    if not all(isinstance(v, int) for v in (N, C, G, b["HxW"])):
        raise _unsupported("aten.native_group_norm with symbolic sizes")
    e = _Emit(conv, n)
    x = conv.operand(b["input"], "aten.native_group_norm")
    xg = _group_view(e, x, N, G, shape)
    var, mean = e.tmp(), e.tmp()
    e.op("aten.var_mean", [xg], {"dims": [2], "correction": 0, "keepdim": True}, out="%s, %s" % (var, mean))
    rstd = e.op("aten.rsqrt", [e.op("aten.add", [var, _num(b["eps"], dt)])])
    y = e.op("aten.reshape", [e.op("aten.mul", [e.op("aten.sub", [xg, mean]), rstd])], {"shape": list(shape)})
    if b.get("weight") is not None:
        y = e.op("aten.mul", [y, _channel(e, conv.operand(b["weight"], "aten.native_group_norm"), C, len(shape))])
    if b.get("bias") is not None:
        y = e.op("aten.add", [y, _channel(e, conv.operand(b["bias"], "aten.native_group_norm"), C, len(shape))])
    return _many(conv, n, e, [y, mean, rstd], reshape=True)


def native_group_norm_backward(conv, n, b):
    """(dx, dweight, dbias) as layer norm's backward per group: with gw = g * weight,
    dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) over each group."""
    dt, shape = _shape(conv, b["input"])
    N, C, G = b["N"], b["C"], b["group"]
    mask = list(b["output_mask"])
    e = _Emit(conv, n)
    what = "aten.native_group_norm_backward"
    g, x = conv.operand(b["grad_out"], what), conv.operand(b["input"], what)
    mean = e.op("aten.reshape", [conv.operand(b["mean"], what)], {"shape": [N, G, 1]})
    rstd = e.op("aten.reshape", [conv.operand(b["rstd"], what)], {"shape": [N, G, 1]})
    xhat = e.op("aten.reshape", [e.op("aten.mul", [e.op("aten.sub", [_group_view(e, x, N, G, shape), mean]), rstd])],
                {"shape": list(shape)})
    rest = [0] + list(range(2, len(shape)))
    outs = []
    if mask[0]:
        gw = g if b.get("weight") is None else e.op("aten.mul", [g, _channel(e, conv.operand(b["weight"], what), C,
                                                                              len(shape))])
        gwg = _group_view(e, gw, N, G, shape)
        xg = _group_view(e, xhat, N, G, shape)
        m1 = e.op("aten.mean", [gwg], {"dims": [2], "keepdim": True})
        m2 = e.op("aten.mean", [e.op("aten.mul", [gwg, xg])], {"dims": [2], "keepdim": True})
        dx = e.op("aten.sub", [e.op("aten.sub", [gwg, m1]), e.op("aten.mul", [xg, m2])])
        outs.append(e.op("aten.reshape", [e.op("aten.mul", [dx, rstd])], {"shape": list(shape)}))
    else:
        outs.append(None)
    outs.append(e.op("aten.sum", [e.op("aten.mul", [g, xhat])], {"dims": rest}) if mask[1] else None)
    outs.append(e.op("aten.sum", [g], {"dims": rest}) if mask[2] else None)
    names = []
    for k, v in enumerate(outs):
        if v is None:  # not asked for: ATen returns an undefined tensor, which nothing reads
            names.append(e.op("aten.full", [], {"shape": [0], "value": 0, "dtype": dt}, out="%%%s.%d" % (n.name, k)))
        else:
            names.append(_finish(conv, n, e, v, k, reshape=True))
    conv.names[n] = names
    return e.lines


# ---------------------------------------------------------------- linspace, logspace

def _space(log):
    """ATen's CPU formula: step = (end - start) / (steps - 1); the first steps//2 values are
    start + step * i, the others end - step * (steps - 1 - i). linspace computes in the
    result's dtype, logspace base ** v in f64. f32 and f64 results only."""
    def rule(conv, n, b):
        dt, shape = _out(n)
        steps = b["steps"]
        if not isinstance(steps, int):
            raise _unsupported("%s with a symbolic step count" % n.target)
        if dt not in (torch.float32, torch.float64):
            raise _unsupported("%s to %s (ATen's integer and half kernels round in their own vectorised "
                               "order)" % (n.target, str(dt).replace("torch.", "")))
        e = _Emit(conv, n)
        if steps == 0:
            return _one(conv, n, e, e.op("aten.full", [], {"shape": [0], "value": 0, "dtype": dt}))
        wide = torch.float64 if log or not dt.is_floating_point else dt
        ends = []
        for k in ("start", "end"):
            v = b[k]
            if isinstance(v, torch.fx.Node):  # a 0-d tensor: its value in the result's dtype
                t = e.op("aten.reshape", [_arg(conv, e, v, dt, str(n.target))], {"shape": []})
            else:
                t = e.op("aten.full", [], {"shape": [], "value": v if dt.is_floating_point else int(v), "dtype": dt})
            ends.append(e.op("aten._to_copy", [t], {"dtype": wide}))
        start, end = ends
        if steps == 1:
            v = e.op("aten.reshape", [start], {"shape": [1]})
        else:
            step = e.op("aten.div", [e.op("aten.sub", [end, start]), _num(steps - 1, wide)])
            i = e.op("aten.arange", [], {"end": steps, "dtype": torch.int64})
            fi = e.op("aten._to_copy", [i], {"dtype": wide})
            fwd = e.op("aten.add", [start, e.op("aten.mul", [step, fi])])
            back = e.op("aten._to_copy", [e.op("aten.sub", [_num(steps - 1, torch.int64), i])], {"dtype": wide})
            bwd = e.op("aten.sub", [end, e.op("aten.mul", [step, back])])
            v = e.op("aten.where", [e.op("aten.lt", [i, str(steps // 2)]), fwd, bwd])
        if log:
            v = e.op("aten.pow", [_num(float(b.get("base", 10.0)), wide), v])
        return _one(conv, n, e, v)
    return rule


# ---------------------------------------------------------------- scans

def _scan_input(conv, n, b, what):
    """(emitter, x in f64 laid out rank >= 1, dim): fusejit's scan is cumsum; products and
    log-sum-exps go through it in f64, so that an f32 result rounds once."""
    dt, shape = _out(n)
    if dt not in (torch.float32, torch.float64):
        raise _unsupported("%s to %s (exact through cumsum only for f32 and f64)" % (what, str(dt).replace("torch.", "")))
    e = _Emit(conv, n)
    x = _arg(conv, e, b["self"], dt, what)
    x = e.op("aten._to_copy", [x], {"dtype": torch.float64})
    if not shape:
        return e, e.op("aten.reshape", [x], {"shape": [1]}), 0
    return e, x, _dim(b["dim"], len(shape))


def _count(e, mask, d):
    """How many of mask's elements are true up to each position along d."""
    return e.op("aten.cumsum", [e.op("aten._to_copy", [mask], {"dtype": torch.int64})], {"dim": d})


def cumprod(conv, n, b):
    """sign * exp(cumsum(log|x|)) in f64, 0 once a zero was met, NaN once a NaN was met or
    a zero and an infinity both were (0 * inf), as the running product gives."""
    e, x, d = _scan_input(conv, n, b, "aten.cumprod")
    zero = e.op("aten.eq", [x, "0.0"])
    mag = e.op("aten.exp", [_count_sum(e, e.op("aten.log", [e.op("aten.abs", [e.op("aten.where", [zero, "1.0", x])])]), d)])
    odd = e.op("aten.eq", [e.op("aten.remainder", [_count(e, e.op("aten.lt", [x, "0.0"]), d), "2"]), "1"])
    v = e.op("aten.where", [odd, e.op("aten.neg", [mag]), mag])
    seen0 = e.op("aten.gt", [_count(e, zero, d), "0"])
    v = e.op("aten.where", [seen0, "0.0", v])
    seen_inf = e.op("aten.gt", [_count(e, e.op("aten.isinf", [x]), d), "0"])
    seen_nan = e.op("aten.gt", [_count(e, e.op("aten.isnan", [x]), d), "0"])
    bad = e.op("aten.logical_or", [seen_nan, e.op("aten.logical_and", [seen0, seen_inf])])
    return _one(conv, n, e, e.op("aten.where", [bad, "nan", v]), reshape=True)


def _count_sum(e, v, d):
    return e.op("aten.cumsum", [v], {"dim": d})


def logcumsumexp(conv, n, b):
    """log(cumsum(exp(x - m))) + m in f64, m the largest non-NaN value along dim (0 if infinite)."""
    e, x, d = _scan_input(conv, n, b, "aten.logcumsumexp")
    m = e.op("aten.amax", [e.op("aten.where", [e.op("aten.isnan", [x]), "-inf", x])], {"dims": [d], "keepdim": True})
    m = e.op("aten.where", [e.op("aten.isinf", [m]), "0.0", m])
    s = _count_sum(e, e.op("aten.exp", [e.op("aten.sub", [x, m])]), d)
    return _one(conv, n, e, e.op("aten.add", [e.op("aten.log", [s]), m]), reshape=True)


RULES = {
    "signbit": signbit, "copysign": copysign, "fmax": _fmaxmin("aten.maximum"), "fmin": _fmaxmin("aten.minimum"),
    "deg2rad": _pointwise(["self"], lambda e, x, dt: e.op("aten.mul", [x, repr(math.pi / 180.0)])),
    "rad2deg": _pointwise(["self"], lambda e, x, dt: e.op("aten.mul", [x, repr(180.0 / math.pi)])),
    "frac": _pointwise(["self"], lambda e, x, dt: e.op("aten.sub", [x, e.op("aten.trunc", [x])])),
    "heaviside": _pointwise(["self", "values"], _heaviside, float_only=False),
    "hypot": _pointwise(["self", "other"], _hypot),
    "isneginf": _isinf_sign("-"), "isposinf": _isinf_sign(""),
    "logaddexp": _logaddexp(False), "logaddexp2": _logaddexp(True), "nan_to_num": nan_to_num,
    "sgn": sgn, "sinc": _pointwise(["self"], _sinc), "special_entr": _pointwise(["self"], _entr),
    "xlogy": _xlog("aten.log"), "special_xlog1py": _xlog("aten.log1p"),
    "ldexp": _pointwise(["self", "other"], lambda e, x, k, dt: e.op("aten.mul", [x, e.op("aten.pow", ["2.0", k])])),
    "floor_divide": floor_divide, "addcdiv": addcdiv,
    "celu": celu, "elu_backward": elu_backward, "mish": mish, "mish_backward": mish_backward,
    "threshold": threshold, "logit": logit, "logit_backward": logit_backward,
    "log_sigmoid_forward": log_sigmoid_forward, "log_sigmoid_backward": log_sigmoid_backward,
    "_prelu_kernel": _prelu_kernel, "_prelu_kernel_backward": _prelu_kernel_backward,
    "prelu": prelu, "prelu_backward": prelu_backward,
    "max": _maxmin("aten.amax", "aten.argmax", "aten.maximum"),
    "min": _maxmin("aten.amin", "aten.argmin", "aten.minimum"), "aminmax": aminmax,
    "all": _allany(True), "any": _allany(False), "std": _std(False), "std_mean": _std(True),
    "nansum": nansum, "count_nonzero": count_nonzero, "norm": norm, "trace": trace, "renorm": renorm,
    "mse_loss": _loss(_mse), "mse_loss_backward": _loss_backward(_mse_b),
    "huber_loss": _loss(_huber), "huber_loss_backward": _loss_backward(_huber_b),
    "smooth_l1_loss": _loss(_smooth_l1), "smooth_l1_loss_backward": _loss_backward(_smooth_l1_b),
    "soft_margin_loss": _loss(_soft_margin), "soft_margin_loss_backward": _loss_backward(_soft_margin_b),
    "binary_cross_entropy": binary_cross_entropy, "binary_cross_entropy_backward": binary_cross_entropy_backward,
    "binary_cross_entropy_with_logits": binary_cross_entropy_with_logits,
    "mv": mv, "addmv": addmv, "addr": addr, "baddbmm": baddbmm, "addbmm": addbmm, "vdot": vdot,
    "dist": dist, "_cdist_forward": _cdist_forward, "_euclidean_dist": _euclidean_dist,
    "_cdist_backward": _cdist_backward, "_pdist_backward": _pdist_backward, "_pdist_forward": _pdist_forward, "_trilinear": _trilinear,
    "native_group_norm": native_group_norm, "native_group_norm_backward": native_group_norm_backward,
    "linspace": _space(False), "logspace": _space(True),
    "cumprod": cumprod, "logcumsumexp": logcumsumexp,
    "glu": glu, "glu_backward": glu_backward,
}
