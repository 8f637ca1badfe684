"""ATen ops the bridge writes in fusejit's op set: indexing, scatters and the
ops that rearrange a tensor (see decomp.py for the rule protocol).

The ways in: a multi-index becomes one linear index into a reshaped tensor
(prims.take, index_select semantics with an index of any rank); a write of
values at indices becomes index_add into zeros (accumulate) or, for an
overwrite, index_add of the values that no later index writes over (the last
write wins, as in PyTorch's serial CPU loops) plus a mask of the positions
written. Every index goes through take(arange(size), index) once, so that an
index out of range fails the run with fusejit's indexing error instead of
reading or writing elsewhere. scatter_reduce's amax, amin and prod have no
scatter primitive in fusejit: they compare each index with every position of
its dim (one-hot, [.., size, count, ..]) and reduce, which is bounded by
DENSE_LIMIT elements."""
import math
import operator

import torch

from .decomp import _Emit, _Plain, _dim, _shape, fmt_number
from .decomp import _result_type as _out

RULES = {}

# Largest one-hot comparison a rule builds (elements): scatter_reduce's amax,
# amin and prod, and the "last write wins" test of an overwrite with indices
# that may repeat.
DENSE_LIMIT = 1 << 24

_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _unsupported(why):
    from .fx import UnsupportedOp
    return UnsupportedOp([why])


def _rule(*names):
    def deco(f):
        for nm in names:
            RULES[nm] = f
        return f
    return deco


def _numel(shape):
    return int(math.prod(shape))


class _E(_Emit):
    """_Emit with the handful of ops these rules are made of."""

    def __init__(self, conv, n):
        super().__init__(conv, n)
        self.what = "aten." + n.target._schema.name.split("::")[-1] if hasattr(n.target, "_schema") else str(n.target)

    def x(self, v):
        return self.conv.operand(v, self.what)

    def full(self, shape, value, dtype):
        return self.op("aten.full", [], {"shape": list(shape), "value": value, "dtype": dtype})

    def arange(self, n, dtype=torch.int64):
        return self.op("aten.arange", [], {"end": n, "dtype": dtype})

    def cast(self, v, dt):
        return self.op("aten._to_copy", [v], {"dtype": dt})

    def reshape(self, v, shape):
        return self.op("aten.reshape", [v], {"shape": list(shape)})

    def expand(self, v, shape):
        return self.op("aten.expand", [v], {"size": list(shape)})

    def permute(self, v, dims):
        return self.op("aten.permute", [v], {"dims": list(dims)})

    def slice(self, v, d, start, end, step=1):
        a = {"dim": d, "start": start, "end": end}
        if step != 1:
            a["step"] = step
        return self.op("aten.slice", [v], a)

    def take(self, v, idx, d):
        return self.op("prims.take", [v, idx], {"dim": d})

    def where(self, c, a, b):
        return self.op("aten.where", [c, a, b])

    def along(self, v, d, rank):
        """A 1-D v laid along dim d of a rank-`rank` tensor (size 1 elsewhere)."""
        return self.reshape(v, [1] * d + [-1] + [1] * (rank - d - 1))

    def checked(self, idx, size):
        """idx itself, through take(arange(size), idx): an index outside [0, size) fails the run."""
        return self.take(self.arange(size), idx, 0)

    def wrapped(self, idx, size, dt):
        """idx in i64 with the negative ones counted from the end, checked."""
        if dt != torch.int64:
            idx = self.cast(idx, torch.int64)
        idx = self.where(self.op("aten.lt", [idx, "0"]), self.op("aten.add", [idx, str(size)]), idx)
        return self.checked(idx, size)

    def done(self, v, t):
        """The node's result: v in the node's dtype and shape."""
        v = self.cast(v, t[0])
        self.conv.names[self.n] = self.op("aten.reshape", [v], {"shape": list(t[1])}, out="%" + self.n.name)
        return self.lines


def _idx_dtype(conv, v):
    dt = _shape(conv, v)[0]
    if dt in (torch.bool, torch.uint8):
        raise _unsupported("a bool mask index (its result's size depends on the data)")
    return dt


def _dedup_last(e, lin, m, dump):
    """lin (1-D, m entries) with every entry that a later entry repeats sent to `dump`."""
    if m <= 1:
        return lin
    if m * m > DENSE_LIMIT:
        raise _unsupported("an overwrite at %d indices that may repeat (the last-write test would take %d "
                           "elements, over the bridge's limit of %d)" % (m, m * m, DENSE_LIMIT))
    a = e.op("aten.unsqueeze", [lin], {"dim": 1})
    b = e.op("aten.unsqueeze", [lin], {"dim": 0})
    ar = e.arange(m)
    later = e.op("aten.gt", [e.op("aten.unsqueeze", [ar], {"dim": 0}), e.op("aten.unsqueeze", [ar], {"dim": 1})])
    dup = e.op("aten.logical_and", [e.op("aten.eq", [a, b]), later])
    cnt = e.op("aten.sum", [e.cast(dup, torch.int32)], {"dims": [1]})
    return e.where(e.op("aten.gt", [cnt, "0"]), str(dump), lin)


def _put(e, x, dt, shape, axis, lin, m, vals, accumulate, unique=False):
    """x (shape, dtype dt) with vals (shape, but m at axis) written along axis at the 1-D i64
    indices lin (m of them, checked): added, or overwritten (the last write wins; `unique`:
    no index repeats, so none needs the test)."""
    cd = torch.int32 if dt == torch.bool else dt
    if cd != dt:
        x, vals = e.cast(x, cd), e.cast(vals, cd)
    p = shape[axis]
    if accumulate:
        r = e.op("aten.index_add", [x, lin, vals], {"dim": axis})
        return e.cast(r, dt) if cd != dt else r
    if not unique:
        lin = _dedup_last(e, lin, m, p)
    big = list(shape)
    big[axis] = p + 1
    added = e.op("aten.index_add", [e.full(big, 0, cd), lin, vals], {"dim": axis})
    added = e.slice(added, axis, 0, p)
    ones = e.full([m], 1, torch.int64)
    hit = e.op("aten.index_add", [e.full([p + 1], 0, torch.int64), lin, ones], {"dim": 0})
    hit = e.op("aten.gt", [e.slice(hit, 0, 0, p), "0"])
    r = e.where(e.along(hit, axis, len(shape)), added, x)
    return e.cast(r, dt) if cd != dt else r


# ---- advanced indexing: index, _unsafe_index, index_put and their masked forms ----

class _Plan:
    """x[indices] (None entries: the whole dim) as one take: the indexed dims of x
    folded into one of size P (moved to the front when they are not adjacent, as
    PyTorch moves the broadcast index dims there), the indices into one linear
    index `lin` of the broadcast index shape B."""

    def __init__(self, e, conv, shape, indices, clamp=False):
        idx = [(k, t) for k, t in enumerate(indices) if t is not None]
        if not idx:
            raise _Plain()
        self.shape = shape = list(shape)
        self.ks = ks = [k for k, _ in idx]
        self.B = list(torch.broadcast_shapes(*[_shape(conv, t)[1] for _, t in idx]))
        self.adjacent = ks == list(range(ks[0], ks[-1] + 1))
        self.rest = [d for d in range(len(shape)) if d not in ks]
        self.P = _numel([shape[k] for k in ks])
        lin, stride = None, 1
        for k, t in reversed(idx):
            s = shape[k]
            i = e.x(t)
            dt = _idx_dtype(conv, t)
            if clamp:  # _unsafe_masked_index: an index the mask drops may be anything
                i = e.cast(i, torch.int64) if dt != torch.int64 else i
                i = e.where(e.op("aten.lt", [i, "0"]), e.op("aten.add", [i, str(s)]), i)
                i = e.op("aten.clamp", [i], {"min": 0, "max": max(s - 1, 0)})
            else:
                i = e.wrapped(i, s, dt)
            term = e.op("aten.mul", [i, str(stride)]) if stride != 1 else i
            lin = term if lin is None else e.op("aten.add", [lin, term])
            stride *= s
        self.lin = e.expand(lin, self.B)
        self.nb = _numel(self.B)
        if self.adjacent:
            f, l = ks[0], ks[-1]
            self.axis = f
            self.folded = shape[:f] + [self.P] + shape[l + 1:]
            self.result = shape[:f] + self.B + shape[l + 1:]
        else:
            self.axis = 0
            self.folded = [self.P] + [shape[d] for d in self.rest]
            self.result = self.B + [shape[d] for d in self.rest]

    def fold(self, e, x):
        if not self.adjacent:
            x = e.permute(x, self.ks + self.rest)
        return e.reshape(x, self.folded)

    def unfold(self, e, x):
        if self.adjacent:
            return e.reshape(x, self.shape)
        x = e.reshape(x, [self.shape[k] for k in self.ks] + [self.shape[d] for d in self.rest])
        order = self.ks + self.rest
        return e.permute(x, [order.index(d) for d in range(len(self.shape))])

    def get(self, e, x):
        return e.take(self.fold(e, x), self.lin, self.axis)

    def put(self, e, x, dt, values, accumulate):
        """x with values (broadcast to the indexing result's shape) written at the indices."""
        v = e.expand(e.cast(values, dt), self.result)
        vshape = list(self.folded)
        vshape[self.axis] = self.nb
        v = e.reshape(v, vshape)
        lin = e.reshape(self.lin, [self.nb])
        r = _put(e, self.fold(e, x), dt, self.folded, self.axis, lin, self.nb, v, accumulate)
        return self.unfold(e, r)


@_rule("index", "_unsafe_index")
def index(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    plan = _Plan(e, conv, shape, list(b["indices"]))
    return e.done(plan.get(e, e.x(b["self"])), _out(n))


@_rule("_unsafe_masked_index")
def unsafe_masked_index(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    plan = _Plan(e, conv, shape, list(b["indices"]), clamp=True)
    r = plan.get(e, e.x(b["self"]))
    fill = b["fill"]
    fill = e.x(fill) if isinstance(fill, torch.fx.Node) else fmt_number(fill)
    return e.done(e.where(e.x(b["mask"]), r, fill), _out(n))


def _mask_put(e, conv, n, b, dt, shape):
    """index_put with one bool mask (None entries before it): values broadcast along
    the masked positions, or one value per true position, in order (static sizes both)."""
    ind = list(b["indices"])
    f = [k for k, t in enumerate(ind) if t is not None]
    if len(f) != 1:
        raise _unsupported("index_put with a bool mask beside other indices")
    f = f[0]
    mt, ms = _shape(conv, ind[f])
    mr = len(ms)
    x = e.x(b["self"])
    acc = bool(b.get("accumulate", False))
    vt, vs = _shape(conv, b["values"])
    v = e.cast(e.x(b["values"]), dt)
    mask = e.x(ind[f])
    if mt != torch.bool:
        mask = e.op("aten.ne", [mask, "0"])
    rank = len(shape)
    tail = rank - f - mr  # dims after the mask's
    pos = len(vs) - tail - 1  # the values' dim that runs over the true positions
    mb = e.reshape(mask, [1] * f + list(ms) + [1] * tail)
    if pos < 0 or vs[pos] == 1:
        if pos >= 0:
            v = e.reshape(v, list(vs[:pos]) + [1] * mr + list(vs[pos + 1:]))
    else:
        k = vs[pos]
        if k == 0:  # no true position (else PyTorch raises: the counts differ)
            return e.done(x, _out(n))
        vfull = e.expand(v, list(shape[:f]) + [k] + list(shape[f + mr:]))
        mf = e.cast(e.reshape(mask, [_numel(ms)]), torch.int64)
        at = e.op("aten.sub", [e.op("aten.cumsum", [mf], {"dim": 0}), "1"])
        at = e.reshape(e.op("aten.clamp", [at], {"min": 0}), list(ms))
        v = e.take(vfull, e.checked(at, k), f)
    if acc:
        cd = torch.int32 if dt == torch.bool else dt
        r = e.op("aten.add", [e.cast(x, cd), e.where(mb, e.cast(v, cd), "0")])
        return e.done(r, _out(n))
    return e.done(e.where(mb, v, x), _out(n))


@_rule("index_put", "_unsafe_index_put")
def index_put(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    if any(t is not None and _shape(conv, t)[0] in (torch.bool, torch.uint8) for t in b["indices"]):
        return _mask_put(e, conv, n, b, dt, shape)
    plan = _Plan(e, conv, shape, list(b["indices"]))
    r = plan.put(e, e.x(b["self"]), dt, e.x(b["values"]), bool(b.get("accumulate", False)))
    return e.done(r, _out(n))


@_rule("_unsafe_masked_index_put_accumulate")
def unsafe_masked_index_put_accumulate(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    plan = _Plan(e, conv, shape, list(b["indices"]), clamp=True)
    v = e.where(e.x(b["mask"]), e.x(b["values"]), "0")
    return e.done(plan.put(e, e.x(b["self"]), dt, v, True), _out(n))


# ---- triangles ----

def _triangle(keep):
    def rule(conv, n, b):
        e = _E(conv, n)
        dt, shape = _shape(conv, b["self"])
        if len(shape) < 2:
            raise _unsupported("a triangle of a rank-%d tensor" % len(shape))
        x = e.x(b["self"])
        rows = e.op("aten.unsqueeze", [e.arange(shape[-2])], {"dim": 1})
        diff = e.op("aten.sub", [e.arange(shape[-1]), rows])
        mask = e.op(keep, [diff, str(int(b.get("diagonal", 0)))])
        return e.done(e.where(mask, x, e.op("aten.zeros_like", [x])), _out(n))
    return rule


RULES["triu"] = _triangle("aten.ge")
RULES["tril"] = _triangle("aten.le")


# ---- scatters: scatter, scatter_reduce, index_reduce, index_copy, index_fill, take, put ----

def _strides(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return st[::-1]


def _grow(e, v, have, want, value, dt):
    """v (shape have) padded at the end of each dim with `value` up to shape want."""
    cur = list(have)
    for k in range(len(cur)):
        if cur[k] < want[k]:
            extra = e.full(cur[:k] + [want[k] - cur[k]] + cur[k + 1:], value, dt)
            v = e.op("aten.cat", [v, extra], {"dim": k})
            cur[k] = want[k]
    return v


def _crop(e, v, have, want):
    for k in range(len(have)):
        if have[k] != want[k]:
            v = e.slice(v, k, 0, want[k])
    return v


class _Scatter:
    """A scatter along dim d of x (shape) at index i (ishape, checked, i64): the flat
    position in x of each index element (lin, [M]) and, on request, the elements a later
    one of the same column writes over (dup)."""

    def __init__(self, e, conv, x_node, d, i, ishape):
        self.e = e
        self.dt, shape = _shape(conv, x_node)
        self.x = e.x(x_node)
        self.rank0 = len(shape) == 0
        self.shape = [1] if self.rank0 else list(shape)
        self.ishape = [1] * len(self.shape) if len(ishape) == 0 else list(ishape)
        if len(self.ishape) != len(self.shape):
            raise _unsupported("a scatter index of rank %d into rank %d" % (len(ishape), len(shape)))
        self.d = d = _dim(d, len(self.shape))
        self.M, self.N = _numel(self.ishape), _numel(self.shape)
        if self.rank0:
            self.x = e.reshape(self.x, [1])
        self.i = e.checked(e.reshape(i, self.ishape), self.shape[d])
        st = _strides(self.shape)
        lin = e.op("aten.mul", [self.i, str(st[d])]) if st[d] != 1 else self.i
        for k in range(len(self.shape)):
            if k != d and self.ishape[k] > 1:
                lin = e.op("aten.add", [lin, e.along(e.op("aten.mul", [e.arange(self.ishape[k]), str(st[k])]),
                                                     k, len(self.shape))])
        self.lin = e.reshape(e.expand(lin, self.ishape), [self.M])

    def src(self, v, vshape):
        """v (vshape) cut to the index's shape and flattened, in x's dtype."""
        e = self.e
        vshape = [1] * len(self.shape) if len(vshape) == 0 else list(vshape)
        v = e.reshape(v, vshape)
        return e.reshape(e.cast(_crop(e, v, vshape, self.ishape), self.dt), [self.M])

    def dup(self):
        """The positions of an index element that a later one of the same column repeats."""
        e, d, r, Id = self.e, self.d, len(self.shape), self.ishape[self.d]
        if Id <= 1:
            return None
        if self.M * Id > DENSE_LIMIT:
            raise _unsupported("an overwrite at %d indices that may repeat (the last-write test would take %d "
                               "elements, over the bridge's limit of %d)" % (self.M, self.M * Id, DENSE_LIMIT))
        a = e.op("aten.unsqueeze", [self.i], {"dim": d + 1})
        b = e.op("aten.unsqueeze", [self.i], {"dim": d})
        ar = e.arange(Id)
        later = e.op("aten.gt", [e.along(ar, d + 1, r + 1), e.along(ar, d, r + 1)])
        hit = e.op("aten.logical_and", [e.op("aten.eq", [a, b]), later])
        cnt = e.op("aten.sum", [e.cast(hit, torch.int32)], {"dims": [d + 1]})
        return e.reshape(e.op("aten.gt", [cnt, "0"]), [self.M])

    def flat(self):
        return self.e.reshape(self.x, [self.N])

    def put(self, vals, accumulate):
        e = self.e
        lin, unique = self.lin, accumulate
        if not accumulate:
            dup = self.dup()
            if dup is not None:
                lin = e.where(dup, str(self.N), lin)
            unique = True
        return _put(e, self.flat(), self.dt, [self.N], 0, lin, self.M, vals, accumulate, unique=unique)

    def touched(self):
        e = self.e
        hit = e.op("aten.index_add", [e.full([self.N], 0, torch.int64), self.lin, e.full([self.M], 1, torch.int64)],
                   {"dim": 0})
        return hit

    def reduce(self, vals, how, include_self):
        """scatter_reduce(x, d, i, vals (flat), how) -> the flat result."""
        e, dt = self.e, self.dt
        x = self.flat()
        if how in ("sum", "add", "mean"):
            cnt = self.touched()
            hit = e.op("aten.gt", [cnt, "0"])
            cd = torch.int32 if dt == torch.bool else dt
            base = e.cast(x, cd) if include_self else e.where(hit, e.full([self.N], 0, cd), e.cast(x, cd))
            total = e.op("aten.index_add", [base, self.lin, e.cast(vals, cd)], {"dim": 0})
            if how != "mean":
                return e.cast(total, dt)
            if include_self:
                cnt = e.op("aten.add", [cnt, "1"])
            cnt = e.op("aten.clamp", [cnt], {"min": 1})
            if dt.is_floating_point:
                m = e.op("aten.div", [total, e.cast(cnt, dt)])
            else:
                m = e.op("aten.div", [total, e.cast(cnt, cd)], {"rounding_mode": "floor"})
            return e.where(hit, e.cast(m, dt), x)
        return self.dense(vals, how, include_self)

    def dense(self, vals, how, include_self):
        """amax / amin / prod: each index against every position of its dim, reduced."""
        e, d, dt, r = self.e, self.d, self.dt, len(self.shape)
        sd = self.shape[d]
        if self.M * sd > DENSE_LIMIT:
            raise _unsupported("scatter_reduce %s over %d x %d elements (fusejit has no scatter-%s primitive; "
                               "the dense form is over the bridge's limit of %d)" % (how, self.M, sd, how, DENSE_LIMIT))
        cd = torch.int32 if dt == torch.bool else dt
        ident = {"prod": 1, "multiply": 1}.get(how)
        if ident is None:
            big = how == "amin"
            if cd.is_floating_point:
                ident = float("inf") if big else float("-inf")
            else:
                ident = torch.iinfo(cd).max if big else torch.iinfo(cd).min
        oh = e.op("aten.eq", [e.op("aten.unsqueeze", [self.i], {"dim": d}), e.along(e.arange(sd), d, r + 1)])
        v = e.op("aten.unsqueeze", [e.cast(e.reshape(vals, self.ishape), cd)], {"dim": d})
        ohs = self.ishape[:d] + [sd, self.ishape[d]] + self.ishape[d + 1:]
        m = e.where(oh, e.expand(v, ohs), e.full(ohs, ident, cd))
        op = {"amax": "aten.amax", "amin": "aten.amin"}.get(how, "aten.prod")
        red = e.op(op, [m], {"dims": [d + 1]})
        red = e.cast(red, cd)
        touched = e.op("aten.gt", [e.op("aten.sum", [e.cast(oh, torch.int32)], {"dims": [d + 1]}), "0"])
        rs = list(self.ishape)
        rs[d] = sd
        region = e.cast(_crop(e, self.x, self.shape, rs), cd)
        if include_self:
            comb = {"amax": "aten.maximum", "amin": "aten.minimum"}.get(how, "aten.mul")
            red = e.op(comb, [red, region])
        res = e.where(touched, red, region)
        if rs != self.shape:
            touched = _grow(e, touched, rs, self.shape, False, torch.bool)
            res = e.where(touched, _grow(e, res, rs, self.shape, 0, cd), e.cast(self.x, cd))
        return e.reshape(e.cast(res, dt), [self.N])


def _index_of(e, conv, v):
    dt = _shape(conv, v)[0]
    i = e.x(v)
    return e.cast(i, torch.int64) if dt != torch.int64 else i


@_rule("scatter")
def scatter(conv, n, b):
    e = _E(conv, n)
    sc = _Scatter(e, conv, b["self"], b["dim"], _index_of(e, conv, b["index"]), _shape(conv, b["index"])[1])
    if b.get("src") is not None:
        vals = sc.src(e.x(b["src"]), _shape(conv, b["src"])[1])
    else:
        v = b["value"]
        vals = e.full([sc.M], v, sc.dt) if not isinstance(v, torch.fx.Node) else \
            e.expand(e.reshape(e.cast(e.x(v), sc.dt), [1]), [sc.M])
    how = b.get("reduce")
    if how is None:
        r = sc.put(vals, False)
    else:
        r = sc.reduce(vals, how, True)
    return e.done(r, _out(n))


@_rule("scatter_reduce")
def scatter_reduce(conv, n, b):
    e = _E(conv, n)
    sc = _Scatter(e, conv, b["self"], b["dim"], _index_of(e, conv, b["index"]), _shape(conv, b["index"])[1])
    vals = sc.src(e.x(b["src"]), _shape(conv, b["src"])[1])
    return e.done(sc.reduce(vals, b["reduce"], bool(b.get("include_self", True))), _out(n))


def _along_index(e, conv, b, src_key):
    """index_* ops: the 1-D index laid along dim and expanded to the source's shape."""
    dt, shape = _shape(conv, b["self"])
    st, ss = _shape(conv, b[src_key])
    ss = list(ss) or [1]
    d = _dim(b["dim"], max(len(shape), 1))
    i = e.reshape(_index_of(e, conv, b["index"]), [-1])
    return e.expand(e.along(i, d, len(ss)), ss), ss, d


@_rule("index_reduce")
def index_reduce(conv, n, b):
    e = _E(conv, n)
    i, ss, d = _along_index(e, conv, b, "source")
    sc = _Scatter(e, conv, b["self"], d, i, ss)
    vals = sc.src(e.x(b["source"]), ss)
    return e.done(sc.reduce(vals, b["reduce"], bool(b.get("include_self", True))), _out(n))


@_rule("index_copy")
def index_copy(conv, n, b):
    e = _E(conv, n)
    i, ss, d = _along_index(e, conv, b, "source")
    sc = _Scatter(e, conv, b["self"], d, i, ss)
    return e.done(sc.put(sc.src(e.x(b["source"]), ss), False), _out(n))


@_rule("index_fill")
def index_fill(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    x = e.x(b["self"])
    shape = list(shape) or [1]
    d = _dim(b["dim"], len(shape))
    it, ishape = _shape(conv, b["index"])
    i = e.wrapped(e.reshape(e.x(b["index"]), [_numel(ishape)]), shape[d], it)
    hit = e.op("aten.index_add", [e.full([shape[d]], 0, torch.int64), i, e.full([_numel(ishape)], 1, torch.int64)],
               {"dim": 0})
    hit = e.along(e.op("aten.gt", [hit, "0"]), d, len(shape))
    v = b["value"]
    v = e.cast(e.x(v), dt) if isinstance(v, torch.fx.Node) else e.full([], v, dt)
    return e.done(e.where(hit, v, e.reshape(x, shape)), _out(n))


@_rule("gather")
def gather(conv, n, b):
    """gather itself, and the two forms fusejit's op does not take: an empty index of any
    integer dtype (PyTorch checks an index's dtype only when it has elements) and a 0-d
    self, which PyTorch gathers from as a 1-D tensor of one element."""
    e = _E(conv, n)
    t = _out(n)
    _, shape = _shape(conv, b["self"])
    _, ishape = _shape(conv, b["index"])
    if _numel(ishape) == 0:
        return e.done(e.full(t[1], 0, t[0]), t)
    x = e.x(b["self"])
    if len(shape) == 0 and len(ishape) == 1:
        x = e.reshape(x, [1])
    return e.done(e.op("aten.gather", [x, _index_of(e, conv, b["index"])], {"dim": b["dim"]}), t)


@_rule("take")
def take(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    it, ishape = _shape(conv, b["index"])
    size = _numel(shape)
    i = e.wrapped(e.x(b["index"]), size, it)
    return e.done(e.take(e.reshape(e.x(b["self"]), [size]), i, 0), _out(n))


@_rule("put")
def put(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    it, ishape = _shape(conv, b["index"])
    size, m = _numel(shape), _numel(ishape)
    i = e.wrapped(e.reshape(e.x(b["index"]), [m]), size, it)
    vals = e.reshape(e.cast(e.x(b["source"]), dt), [m])
    r = _put(e, e.reshape(e.x(b["self"]), [size]), dt, [size], 0, i, m, vals, bool(b.get("accumulate", False)))
    return e.done(r, _out(n))


@_rule("masked_scatter")
def masked_scatter(conv, n, b):
    """The i-th true position of the mask (row-major) takes source's i-th element."""
    e = _E(conv, n)
    t = _out(n)
    dt, shape = t[0], list(t[1])
    st, ss = _shape(conv, b["source"])
    x = e.expand(e.x(b["self"]), shape)
    mask = e.expand(e.x(b["mask"]), shape)
    k, size = _numel(ss), _numel(shape)
    if k == 0:  # no true position (else PyTorch raises)
        return e.done(x, t)
    at = e.op("aten.cumsum", [e.cast(e.reshape(mask, [size]), torch.int64)], {"dim": 0})
    at = e.op("aten.clamp", [e.op("aten.sub", [at, "1"])], {"min": 0})
    v = e.take(e.reshape(e.cast(e.x(b["source"]), dt), [k]), e.checked(at, k), 0)
    return e.done(e.where(mask, e.reshape(v, shape), x), t)


# ---- rearrangements: stack, repeat, roll, rot90, eye, diagonals, slices written back ----

@_rule("stack")
def stack(conv, n, b):
    e = _E(conv, n)
    ts = list(b["tensors"])
    rank = len(_shape(conv, ts[0])[1])
    d = _dim(b.get("dim", 0), rank + 1)
    us = [e.op("aten.unsqueeze", [e.x(t)], {"dim": d}) for t in ts]
    t = _out(n)
    us = [e.cast(u, t[0]) for u in us]
    return e.done(us[0] if len(us) == 1 else e.op("aten.cat", us, {"dim": d}), t)


@_rule("repeat")
def repeat(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    reps = list(b["repeats"])
    shape = [1] * (len(reps) - len(shape)) + list(shape)
    x = e.reshape(e.x(b["self"]), shape)
    inter = [v for r, s in zip(reps, shape) for v in (1, s)]
    x = e.reshape(x, inter)
    x = e.expand(x, [v for r, s in zip(reps, shape) for v in (r, s)])
    return e.done(x, _out(n))


def _roll(e, x, shape, shift, d):
    size = shape[d]
    s = shift % size if size else 0
    if s == 0:
        return x
    return e.op("aten.cat", [e.slice(x, d, size - s, size), e.slice(x, d, 0, size - s)], {"dim": d})


@_rule("roll")
def roll(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    shifts, dims = list(b["shifts"]), list(b.get("dims") or [])
    x = e.x(b["self"])
    if not dims:
        size = _numel(shape)
        x = _roll(e, e.reshape(x, [size]), [size], shifts[0], 0)
    else:
        for s, d in zip(shifts, dims):
            x = _roll(e, x, list(shape), s, _dim(d, len(shape)))
    return e.done(x, _out(n))


@_rule("rot90")
def rot90(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    d0, d1 = [_dim(d, len(shape)) for d in b.get("dims", [0, 1])]
    k = b.get("k", 1) % 4
    x = e.x(b["self"])
    if k == 1:
        x = e.op("aten.transpose", [e.op("aten.flip", [x], {"dims": [d1]})], {"dim0": d0, "dim1": d1})
    elif k == 2:
        x = e.op("aten.flip", [x], {"dims": [d0, d1]})
    elif k == 3:
        x = e.op("aten.transpose", [e.op("aten.flip", [x], {"dims": [d0]})], {"dim0": d0, "dim1": d1})
    return e.done(x, _out(n))


@_rule("eye")
def eye(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    rows, cols = t[1]
    r = e.op("aten.unsqueeze", [e.arange(rows)], {"dim": 1})
    return e.done(e.op("aten.eq", [r, e.arange(cols)]), t)


def _diag_len(s1, s2, off):
    return max(min(s1 - max(-off, 0), s2 - max(off, 0)), 0)


def _to_end(shape, d1, d2):
    """The permutation moving dims d1, d2 to the end, in that order."""
    return [k for k in range(len(shape)) if k not in (d1, d2)] + [d1, d2]


def _inverse(perm):
    return [perm.index(k) for k in range(len(perm))]


def _diag_axes(b, shape):
    """diagonal's and diagonal_scatter's offset, the permutation that moves dim1 and
    dim2 last, and their sizes."""
    off = b.get("offset", 0)
    d1, d2 = _dim(b.get("dim1", 0), len(shape)), _dim(b.get("dim2", 1), len(shape))
    return off, _to_end(shape, d1, d2), shape[d1], shape[d2]


@_rule("diagonal", "diagonal_copy")
def diagonal(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    off, perm, s1, s2 = _diag_axes(b, shape)
    batch = [shape[k] for k in perm[:-2]]
    x = e.reshape(e.permute(e.x(b["self"]), perm), batch + [s1 * s2])
    length = _diag_len(s1, s2, off)
    start = off if off >= 0 else -off * s2
    i = e.op("aten.add", [e.op("aten.mul", [e.arange(length), str(s2 + 1)]), str(start)])
    return e.done(e.take(x, i, len(batch)), _out(n))


def _diag_place(e, x, xlast, rows, cols, off, batch_rank):
    """A [..., rows, cols] tensor holding x[..., i - max(-off, 0)] at (i, i + off), and the
    mask of those positions (x: [..., xlast])."""
    rs = max(-off, 0)
    i = e.op("aten.sub", [e.arange(rows), str(rs)])
    i = e.op("aten.clamp", [i], {"min": 0, "max": max(xlast - 1, 0)})
    v = e.op("aten.unsqueeze", [e.take(x, i, batch_rank)], {"dim": -1})
    r = e.op("aten.unsqueeze", [e.arange(rows)], {"dim": 1})
    mask = e.op("aten.eq", [e.op("aten.sub", [e.arange(cols), r]), str(off)])
    return v, mask


@_rule("diag_embed")
def diag_embed(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    dt, shape = _shape(conv, b["self"])
    off = b.get("offset", 0)
    rank = len(shape) + 1
    d1, d2 = _dim(b.get("dim1", -2), rank), _dim(b.get("dim2", -1), rank)
    length = shape[-1]
    nn_ = length + abs(off)
    if length == 0:
        return e.done(e.full(t[1], 0, t[0]), t)
    v, mask = _diag_place(e, e.x(b["self"]), length, nn_, nn_, off, len(shape) - 1)
    res = e.where(mask, v, e.full([], 0, dt))  # [..., N, N]
    perm = _to_end(list(t[1]), d1, d2)  # the output's dims in res's order
    return e.done(e.permute(res, _inverse(perm)), t)


@_rule("diagonal_scatter")
def diagonal_scatter(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    off, perm, s1, s2 = _diag_axes(b, shape)
    x = e.permute(e.x(b["self"]), perm)
    length = _diag_len(s1, s2, off)
    if length == 0:
        return e.done(x if perm == list(range(len(shape))) else e.permute(x, _inverse(perm)), _out(n))
    src = e.cast(e.x(b["src"]), dt)
    v, mask = _diag_place(e, src, length, s1, s2, off, len(shape) - 2)
    return e.done(e.permute(e.where(mask, v, x), _inverse(perm)), _out(n))


@_rule("select_scatter")
def select_scatter(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    d = _dim(b["dim"], len(shape))
    i = b["index"]
    i = i + shape[d] if i < 0 else i
    x = e.x(b["self"])
    parts = [e.op("aten.unsqueeze", [e.cast(e.x(b["src"]), dt)], {"dim": d})]
    if i > 0:
        parts.insert(0, e.slice(x, d, 0, i))
    if i < shape[d] - 1:
        parts.append(e.slice(x, d, i + 1, shape[d]))
    return e.done(e.op("aten.cat", parts, {"dim": d}) if len(parts) > 1 else parts[0], _out(n))


@_rule("slice_scatter")
def slice_scatter(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    d = _dim(b.get("dim", 0), len(shape))
    size = shape[d]
    start, end, step = slice(b.get("start"), b.get("end"), b.get("step", 1)).indices(size)
    end = max(end, start)
    x = e.x(b["self"])
    src = e.cast(e.x(b["src"]), dt)
    count = len(range(start, end, step))
    if count == 0:
        return e.done(x, _out(n))
    if step == 1:
        parts = ([e.slice(x, d, 0, start)] if start > 0 else []) + [src] + \
            ([e.slice(x, d, end, size)] if end < size else [])
        return e.done(e.op("aten.cat", parts, {"dim": d}) if len(parts) > 1 else src, _out(n))
    p = e.op("aten.sub", [e.arange(size), str(start)])
    inside = e.op("aten.logical_and", [e.op("aten.ge", [p, "0"]), e.op("aten.lt", [p, str(end - start)])])
    inside = e.op("aten.logical_and", [inside, e.op("aten.eq", [e.op("aten.remainder", [p, str(step)]), "0"])])
    q = e.op("aten.clamp", [e.op("aten.div", [p, str(step)], {"rounding_mode": "floor"})], {"min": 0,
                                                                                          "max": count - 1})
    v = e.take(src, q, d)
    return e.done(e.where(e.along(inside, d, len(shape)), v, x), _out(n))


def _strided_index(e, size, stride, offset):
    """The flat storage position of each element of an as_strided view (shape size)."""
    r = len(size)
    lin = e.full([1] * r, offset, torch.int64)
    for k in range(r):
        if size[k] != 1 and stride[k] != 0:
            lin = e.op("aten.add", [lin, e.along(e.op("aten.mul", [e.arange(size[k]), str(stride[k])]), k, r)])
    return e.expand(lin, size)


def _dense_input(conv, v, what):
    """v's storage is its elements in row-major order (as_strided reads storage)."""
    from .fx import meta_stride
    dt, shape = _shape(conv, v)
    st = meta_stride(v)
    val = v.meta.get("val")
    off = val.storage_offset() if hasattr(val, "storage_offset") else 0
    want = _strides(list(shape))
    if st is None or off != 0 or any(s != w for s, w, z in zip(st, want, shape) if z > 1):
        raise _unsupported("%s of a non-contiguous input (it reads the storage)" % what)
    return dt, shape


@_rule("as_strided", "as_strided_copy")
def as_strided(conv, n, b):
    e = _E(conv, n)
    dt, shape = _dense_input(conv, b["self"], "as_strided")
    size, stride = list(b["size"]), list(b["stride"])
    lin = _strided_index(e, size, stride, b.get("storage_offset") or 0)
    x = e.reshape(e.x(b["self"]), [_numel(shape)])
    return e.done(e.take(x, e.checked(lin, _numel(shape)), 0), _out(n))


@_rule("as_strided_scatter")
def as_strided_scatter(conv, n, b):
    e = _E(conv, n)
    dt, shape = _dense_input(conv, b["self"], "as_strided_scatter")
    size, stride = list(b["size"]), list(b["stride"])
    m, total = _numel(size), _numel(shape)
    lin = e.reshape(_strided_index(e, size, stride, b.get("storage_offset") or 0), [m])
    lin = e.checked(lin, total)
    vals = e.reshape(e.cast(e.x(b["src"]), dt), [m])
    r = _put(e, e.reshape(e.x(b["self"]), [total]), dt, [total], 0, lin, m, vals, False)
    return e.done(r, _out(n))


@_rule("unfold", "unfold_copy")
def unfold(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    shape = list(shape) or [1]
    d = _dim(b["dimension"], len(shape))
    size, step = b["size"], b["step"]
    count = (shape[d] - size) // step + 1
    x = e.reshape(e.x(b["self"]), shape)
    i = e.op("aten.add", [e.op("aten.unsqueeze", [e.op("aten.mul", [e.arange(count), str(step)])], {"dim": 1}),
                          e.arange(size)])
    x = e.take(x, i, d)  # shape[:d] + [count, size] + shape[d+1:]
    r = len(shape) + 1
    perm = [k for k in range(r) if k != d + 1] + [d + 1]
    return e.done(e.permute(x, perm), _out(n))


@_rule("pixel_shuffle")
def pixel_shuffle(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    f = b["upscale_factor"]
    *lead, c, h, w = shape
    k = len(lead)
    x = e.reshape(e.x(b["self"]), lead + [c // (f * f), f, f, h, w])
    x = e.permute(x, list(range(k)) + [k, k + 3, k + 1, k + 4, k + 2])
    return e.done(x, _out(n))


@_rule("pixel_unshuffle")
def pixel_unshuffle(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    f = b["downscale_factor"]
    *lead, c, h, w = shape
    k = len(lead)
    x = e.reshape(e.x(b["self"]), lead + [c, h // f, f, w // f, f])
    x = e.permute(x, list(range(k)) + [k, k + 2, k + 4, k + 1, k + 3])
    return e.done(x, _out(n))


@_rule("channel_shuffle", "native_channel_shuffle")
def channel_shuffle(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    g = b["groups"]
    x = e.reshape(e.x(b["self"]), [shape[0], g, shape[1] // g] + list(shape[2:]))
    return e.done(e.op("aten.transpose", [x], {"dim0": 1, "dim1": 2}), _out(n))


@_rule("_chunk_cat")
def chunk_cat(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    nc = b["num_chunks"]
    parts = []
    for v in b["tensors"]:
        dt, shape = _shape(conv, v)
        d = _dim(b["dim"], len(shape))
        chunk = -(-shape[d] // nc)
        x = e.cast(e.x(v), t[0])
        want = list(shape)
        want[d] = chunk * nc
        x = _grow(e, x, list(shape), want, 0, t[0])
        parts.append(e.reshape(x, list(shape[:d]) + [nc, chunk * _numel(shape[d + 1:])]))
    return e.done(e.op("aten.cat", parts, {"dim": d + 1}) if len(parts) > 1 else parts[0], t)


@_rule("block_diag")
def block_diag(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    blocks = []
    for v in b["tensors"]:
        dt, shape = _shape(conv, v)
        shape = {0: [1, 1], 1: [1, shape[0] if shape else 1]}.get(len(shape), list(shape))
        blocks.append((e.cast(e.reshape(e.x(v), shape), t[0]), shape))
    total = sum(s[1] for _, s in blocks)
    rows, at = [], 0
    for x, (r, c) in blocks:
        parts = ([e.full([r, at], 0, t[0])] if at else []) + [x] + \
            ([e.full([r, total - at - c], 0, t[0])] if total - at - c else [])
        rows.append(e.op("aten.cat", parts, {"dim": 1}) if len(parts) > 1 else x)
        at += c
    return e.done(e.op("aten.cat", rows, {"dim": 0}) if len(rows) > 1 else rows[0], t)


@_rule("zero")
def zero(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    return e.done(e.full(t[1], 0, t[0]), t)


# ---- the *_copy forms of views: the view, then a copy ----

def _reshaped(conv, n, b):
    e = _E(conv, n)
    return e.done(e.x(b["self"]), _out(n))


for _name in ("alias_copy", "squeeze_copy", "unsqueeze_copy", "view_copy", "_reshape_copy"):
    RULES[_name] = _reshaped


def _view_copy(conv, n, b):
    if n.target._overloadname == "dtype":
        raise _unsupported("view_copy as another dtype (a bit cast)")
    return _reshaped(conv, n, b)


RULES["view_copy"] = _view_copy


@_rule("expand_copy")
def expand_copy(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    return e.done(e.expand(e.x(b["self"]), t[1]), t)


@_rule("permute_copy")
def permute_copy(conv, n, b):
    e = _E(conv, n)
    return e.done(e.permute(e.x(b["self"]), list(b["dims"])), _out(n))


@_rule("transpose_copy", "t_copy")
def transpose_copy(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    d0, d1 = (b["dim0"], b["dim1"]) if "dim0" in b else (0, 1)
    x = e.x(b["self"])
    if len(shape) >= 2:
        x = e.op("aten.transpose", [x], {"dim0": d0, "dim1": d1})
    return e.done(x, _out(n))


@_rule("narrow_copy")
def narrow_copy(conv, n, b):
    e = _E(conv, n)
    dt, shape = _shape(conv, b["self"])
    d = _dim(b["dim"], len(shape))
    s = b["start"]
    s = s + shape[d] if s < 0 else s
    return e.done(e.slice(e.x(b["self"]), d, s, s + b["length"]), _out(n))


def _copies(view_rule):
    """A multi-output view's *_copy form: each piece copied (a clone of the view)."""
    def rule(conv, n, b):
        lines = view_rule(conv, n, b)
        e = _E(conv, n)
        e.lines = list(lines)
        outs = []
        for k, v in enumerate(conv.names[n]):
            outs.append(e.op("aten.clone", [v], out="%%%s.c%d" % (n.name, k)))
        conv.names[n] = outs
        return e.lines
    return rule


def _install_copies():
    from . import decomp
    RULES["unbind_copy"] = _copies(decomp.unbind)
    RULES["split_with_sizes_copy"] = _copies(decomp.split_with_sizes)
    RULES["split_copy"] = _copies(decomp.split)
    RULES["unsafe_split"] = _copies(decomp.split)
    RULES["unsafe_split_with_sizes"] = _copies(decomp.split_with_sizes)


_install_copies()


# ---- reflection and replication pads, and their backwards ----

def _pad_index(e, size, lo, hi, kind):
    """For each position of a dim padded from size by lo, hi: the input position it reads."""
    i = e.op("aten.sub", [e.arange(size + lo + hi), str(lo)])
    if kind == "replication":
        return e.op("aten.clamp", [i], {"min": 0, "max": size - 1})
    i = e.op("aten.abs", [i])
    return e.op("aten.sub", [str(size - 1), e.op("aten.abs", [e.op("aten.sub", [str(size - 1), i])])])


def _pad_plan(shape, padding):
    """(dim, lo, hi) for each padded dim, last dim first."""
    return [(len(shape) - 1 - k, padding[2 * k], padding[2 * k + 1]) for k in range(len(padding) // 2)]


def _pad(kind):
    def rule(conv, n, b):
        e = _E(conv, n)
        dt, shape = _shape(conv, b["self"])
        x = e.x(b["self"])
        cur = list(shape)
        for d, lo, hi in _pad_plan(shape, list(b["padding"])):
            x = e.op("aten.index_select", [x, _pad_index(e, cur[d], lo, hi, kind)], {"dim": d})
            cur[d] += lo + hi
        return e.done(x, _out(n))
    return rule


def _pad_backward(kind):
    def rule(conv, n, b):
        e = _E(conv, n)
        dt, shape = _shape(conv, b["self"])
        g = e.x(b["grad_output"])
        steps, cur = [], list(shape)
        for d, lo, hi in _pad_plan(shape, list(b["padding"])):
            steps.append((d, list(cur), _pad_index(e, cur[d], lo, hi, kind)))
            cur[d] += lo + hi
        for d, before, i in reversed(steps):
            g = e.op("aten.index_add", [e.full(before, 0, dt), i, g], {"dim": d})
        return e.done(g, _out(n))
    return rule


for _k in ("reflection", "replication"):
    for _nd in (1, 2, 3):
        RULES["%s_pad%dd" % (_k, _nd)] = _pad(_k)
        RULES["%s_pad%dd_backward" % (_k, _nd)] = _pad_backward(_k)


# ---- searches: bucketize, searchsorted, isin, histc ----

def _bound_count(e, seq, vals, right, k, dim):
    """PyTorch's binary search (lower or upper bound) of vals in seq (sorted, NaNs last)
    as counts: of the non-NaN entries that lie before each value, or k when all of them
    do. seq and vals broadcast against each other with the seq's entries along dim."""
    before = e.op("aten.logical_not", [e.op("aten.gt" if right else "aten.ge", [seq, vals])])
    real = e.op("aten.logical_not", [e.op("aten.isnan", [seq])])
    c = e.op("aten.sum", [e.cast(e.op("aten.logical_and", [before, real]), torch.int64)], {"dims": [dim]})
    m = e.op("aten.sum", [e.cast(real, torch.int64)], {"dims": [dim]})
    return e.where(e.op("aten.eq", [c, m]), str(k), c)


def _scalar_or(e, v, what):
    return e.x(v) if isinstance(v, torch.fx.Node) else e.full([], v, what)


@_rule("bucketize")
def bucketize(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    bt, bs = _shape(conv, b["boundaries"])
    x = b["self"]
    xs = _shape(conv, x)[1] if isinstance(x, torch.fx.Node) else ()
    if _numel(bs) * max(_numel(xs), 1) > DENSE_LIMIT:
        raise _unsupported("bucketize over %d x %d comparisons (over the bridge's limit of %d)"
                           % (_numel(bs), _numel(xs), DENSE_LIMIT))
    xv = e.op("aten.unsqueeze", [_scalar_or(e, x, bt)], {"dim": -1})
    return e.done(_bound_count(e, e.x(b["boundaries"]), xv, bool(b.get("right")), bs[0], -1), t)


@_rule("searchsorted")
def searchsorted(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    st, ss = _shape(conv, b["sorted_sequence"])
    seq = e.x(b["sorted_sequence"])
    if b.get("sorter") is not None:
        seq = e.op("aten.gather", [seq, _index_of(e, conv, b["sorter"])], {"dim": -1})
    right = bool(b.get("right")) or b.get("side") == "right"
    x = b["self"]
    xs = _shape(conv, x)[1] if isinstance(x, torch.fx.Node) else ()
    if _numel(ss) * max(xs[-1] if xs else 1, 1) * (1 if len(ss) > 1 else max(_numel(xs), 1)) > DENSE_LIMIT:
        raise _unsupported("searchsorted over more comparisons than the bridge's limit of %d" % DENSE_LIMIT)
    xv = e.op("aten.unsqueeze", [_scalar_or(e, x, st)], {"dim": -1})  # [..., V, 1]
    if len(ss) > 1:
        seq = e.op("aten.unsqueeze", [seq], {"dim": -2})  # [..., 1, K]
    return e.done(_bound_count(e, seq, xv, right, ss[-1], -1), t)


@_rule("isin")
def isin(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    el, te = b["elements"], b["test_elements"]
    es = _shape(conv, el)[1] if isinstance(el, torch.fx.Node) else ()
    ts = _shape(conv, te)[1] if isinstance(te, torch.fx.Node) else ()
    if max(_numel(es), 1) * max(_numel(ts), 1) > DENSE_LIMIT:
        raise _unsupported("isin over %d x %d comparisons (over the bridge's limit of %d)"
                           % (_numel(es), _numel(ts), DENSE_LIMIT))
    x = e.op("aten.unsqueeze", [e.x(el) if isinstance(el, torch.fx.Node) else e.full([], el, torch.float64)],
             {"dim": -1})
    tv = e.reshape(e.x(te), [_numel(ts)]) if isinstance(te, torch.fx.Node) else fmt_number(te)
    hit = e.op("aten.eq", [x, tv])
    hit = e.op("aten.gt", [e.op("aten.sum", [e.cast(hit, torch.int32)], {"dims": [-1]}), "0"])
    if b.get("invert"):
        hit = e.op("aten.logical_not", [hit])
    return e.done(hit, t)


@_rule("histc")
def histc(conv, n, b):
    """PyTorch's histc: bin edges linspace(lo, hi, bins + 1) as its CPU kernel computes them
    (lo, hi the data's min and max when min == max, widened by 1 when equal); an element
    falls in the last bin whose edge it reaches, the top edge included; outside [lo, hi] it
    is not counted."""
    e = _E(conv, n)
    t = _out(n)
    dt, shape = _shape(conv, b["self"])
    bins = int(b.get("bins", 100))
    lo, hi = b.get("min", 0), b.get("max", 0)
    size = _numel(shape)
    x = e.reshape(e.x(b["self"]), [size])
    if size * (bins + 1) > DENSE_LIMIT:
        raise _unsupported("histc over %d x %d comparisons (over the bridge's limit of %d)"
                           % (size, bins + 1, DENSE_LIMIT))
    if size == 0:
        return e.done(e.full([bins], 0, dt), t)
    if lo > hi:
        raise _unsupported("histc with min > max (PyTorch raises the error)")
    if lo == hi:
        lo, hi = e.op("aten.amin", [x]), e.op("aten.amax", [x])
        same = e.op("aten.eq", [lo, hi])
        lo = e.where(same, e.op("aten.sub", [lo, "1"]), lo)
        hi = e.where(same, e.op("aten.add", [hi, "1"]), hi)
    else:
        lo, hi = e.full([], lo, dt), e.full([], hi, dt)
    step = e.op("aten.div", [e.op("aten.sub", [hi, lo]), e.full([], bins, dt)])
    i = e.arange(bins + 1, dt)
    low = e.op("aten.add", [lo, e.op("aten.mul", [step, i])])
    high = e.op("aten.sub", [hi, e.op("aten.mul", [step, e.op("aten.sub", [e.full([], bins, dt), i])])])
    edges = e.where(e.op("aten.lt", [e.arange(bins + 1), str((bins + 1) // 2)]), low, high)
    reached = e.op("aten.le", [edges, e.op("aten.unsqueeze", [x], {"dim": 1})])  # [size, bins + 1]
    pos = e.op("aten.sub", [e.op("aten.sum", [e.cast(reached, torch.int64)], {"dims": [1]}), "1"])
    pos = e.op("aten.clamp", [pos], {"max": bins - 1})
    inside = e.op("aten.logical_and", [e.op("aten.ge", [x, lo]), e.op("aten.le", [x, hi])])
    pos = e.where(inside, pos, str(bins))
    cnt = e.op("aten.index_add", [e.full([bins + 1], 0, dt), pos, e.full([size], 1, dt)], {"dim": 0})
    return e.done(e.slice(cnt, 0, 0, bins), t)


# ---- max_unpool, im2col, col2im ----

def _max_unpool(nd):
    def rule(conv, n, b):
        """Each value written at its plane's flat index. Repeated indices (overlapping
        pooling windows) carry the same value, the one max_pool found there: the rule
        writes the mean of the values at an index, which is that value."""
        e = _E(conv, n)
        t = _out(n)
        dt, shape = _shape(conv, b["self"])
        it, ishape = _shape(conv, b["indices"])
        out_plane = _numel(list(b["output_size"]))
        planes = _numel(shape[:-nd])
        m = _numel(shape[-nd:])
        size = planes * out_plane
        i = e.checked(e.reshape(_index_of(e, conv, b["indices"]), [planes, m]), out_plane)
        base = e.op("aten.mul", [e.op("aten.unsqueeze", [e.arange(planes)], {"dim": 1}), str(out_plane)])
        lin = e.reshape(e.op("aten.add", [i, base]), [planes * m])
        cd = torch.int64 if dt == torch.bool else dt
        vals = e.reshape(e.cast(e.x(b["self"]), cd), [planes * m])
        total = e.op("aten.index_add", [e.full([size], 0, cd), lin, vals], {"dim": 0})
        cnt = e.op("aten.index_add", [e.full([size], 0, torch.int64), lin, e.full([planes * m], 1, torch.int64)],
                   {"dim": 0})
        cnt = e.op("aten.clamp", [cnt], {"min": 1})
        if cd.is_floating_point:
            r = e.op("aten.div", [total, e.cast(cnt, cd)])
        else:
            r = e.op("aten.div", [total, e.cast(cnt, cd)], {"rounding_mode": "floor"})
        return e.done(r, t)
    return rule


RULES["max_unpool2d"] = _max_unpool(2)
RULES["max_unpool3d"] = _max_unpool(3)


def _window_index(e, count, kernel, dil, stride):
    """[kernel, count]: the padded input position each kernel tap of each window reads."""
    k = e.op("aten.unsqueeze", [e.op("aten.mul", [e.arange(kernel), str(dil)])], {"dim": 1})
    return e.op("aten.add", [k, e.op("aten.mul", [e.arange(count), str(stride)])])


def _im2col_sizes(b, spatial):
    kh, kw = b["kernel_size"]
    dh, dw = b["dilation"]
    ph, pw = b["padding"]
    sh, sw = b["stride"]
    h, w = spatial
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    return (kh, kw), (dh, dw), (ph, pw), (sh, sw), (oh, ow)


@_rule("im2col")
def im2col(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    dt, shape = _shape(conv, b["self"])
    lead = list(shape[:-2])
    (kh, kw), (dh, dw), (ph, pw), (sh, sw), (oh, ow) = _im2col_sizes(b, shape[-2:])
    r = len(shape)
    x = e.x(b["self"])
    cur = list(shape)
    for d, p in ((r - 2, ph), (r - 1, pw)):
        if p:
            side = cur[:d] + [p] + cur[d + 1:]
            x = e.op("aten.cat", [e.full(side, 0, dt), x, e.full(side, 0, dt)], {"dim": d})
            cur[d] += 2 * p
    x = e.take(x, _window_index(e, oh, kh, dh, sh), r - 2)  # lead + [kh, oh, W]
    x = e.take(x, _window_index(e, ow, kw, dw, sw), r)  # lead + [kh, oh, kw, ow]
    k = len(lead)
    x = e.permute(x, list(range(k - 1)) + [k - 1, k, k + 2, k + 1, k + 3])
    return e.done(x, t)


@_rule("col2im")
def col2im(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    dt, shape = _shape(conv, b["self"])
    h, w = b["output_size"]
    (kh, kw), (dh, dw), (ph, pw), (sh, sw), (oh, ow) = _im2col_sizes(b, (h, w))
    batch = list(shape[:-2])
    c = shape[-2] // (kh * kw)
    lead = batch + [c]
    k = len(lead)
    x = e.reshape(e.x(b["self"]), lead + [kh, kw, oh, ow])
    x = e.permute(x, list(range(k)) + [k, k + 2, k + 1, k + 3])  # lead + [kh, oh, kw, ow]
    x = e.reshape(x, lead + [kh * oh, kw * ow])
    hp, wp = h + 2 * ph, w + 2 * pw
    iw = e.reshape(_window_index(e, ow, kw, dw, sw), [kw * ow])
    x = e.op("aten.index_add", [e.full(lead + [kh * oh, wp], 0, dt), iw, x], {"dim": k + 1})
    ih = e.reshape(_window_index(e, oh, kh, dh, sh), [kh * oh])
    x = e.op("aten.index_add", [e.full(lead + [hp, wp], 0, dt), ih, x], {"dim": k})
    x = e.slice(e.slice(x, k, ph, ph + h), k + 1, pw, pw + w)
    return e.done(x, t)


# ---- factories whose contents PyTorch leaves undefined: zeros ----

def _empty_like_shape(conv, n, b):
    e = _E(conv, n)
    t = _out(n)
    return e.done(e.full(t[1], 0, t[0]), t)


for _name in ("new_empty", "new_empty_strided", "empty_strided", "empty_permuted"):
    RULES[_name] = _empty_like_shape


@_rule("nonzero_static")
def nonzero_static(conv, n, b):
    """The first `size` nonzero positions (row-major), each true element sent to the slot
    its count of earlier true elements names; the slots past the count hold fill_value."""
    e = _E(conv, n)
    t = _out(n)
    dt, shape = _shape(conv, b["self"])
    size, fill = int(b["size"]), b.get("fill_value", -1)
    total = _numel(shape)
    if not shape or total == 0 or size == 0:
        return e.done(e.full(t[1], fill if total == 0 or size == 0 else 0, t[0]), t)
    m = e.op("aten.ne", [e.reshape(e.x(b["self"]), [total]), "0"])
    rank = e.op("aten.sub", [e.op("aten.cumsum", [e.cast(m, torch.int64)], {"dim": 0}), "1"])
    keep = e.op("aten.logical_and", [m, e.op("aten.lt", [rank, str(size)])])
    slot = e.where(keep, rank, str(size))
    j = e.op("aten.index_add", [e.full([size + 1], 0, torch.int64), slot, e.arange(total)], {"dim": 0})
    j = e.slice(j, 0, 0, size)
    filled = e.op("aten.lt", [e.arange(size), e.op("aten.sum", [e.cast(m, torch.int64)])])
    coords = []
    for s, st in zip(shape, _strides(list(shape))):
        c = e.op("aten.div", [j, str(st)], {"rounding_mode": "floor"})
        coords.append(e.op("aten.unsqueeze", [e.op("aten.remainder", [c, str(s)])], {"dim": 1}))
    c = e.op("aten.cat", coords, {"dim": 1}) if len(coords) > 1 else coords[0]
    return e.done(e.where(e.op("aten.unsqueeze", [filled], {"dim": 1}), c, str(fill)), t)


@_rule("_embedding_bag_forward_only", "_embedding_bag")
def embedding_bag(conv, n, b):
    """The bags' sums, means or maxima (output 0). The other outputs (offset2bag, bag_size,
    max_indices) are PyTorch's bookkeeping for its own backward: the rule takes the call
    only when nothing reads them (inference), and gives them as zeros."""
    from .fx import meta_values
    if any(u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in n.users):
        raise _unsupported("embedding_bag whose offset2bag / bag_size / max_indices are read (PyTorch's "
                           "backward takes them)")
    e = _E(conv, n)
    wt, (rows, dim) = _shape(conv, b["weight"])
    it, (length,) = _shape(conv, b["indices"])
    ot, (no,) = _shape(conv, b["offsets"])
    last = bool(b.get("include_last_offset"))
    bags = no - 1 if last else no
    mode = int(b.get("mode", 0))
    pad = b.get("padding_idx", -1)
    pad = -1 if pad is None else pad
    if length * max(bags, 1) * (dim if mode == 2 else 1) > DENSE_LIMIT:
        raise _unsupported("embedding_bag over %d indices and %d bags (over the bridge's limit of %d)"
                           % (length, bags, DENSE_LIMIT))
    outs = meta_values(n)
    names = []
    for k, v in enumerate(outs[1:], 1):
        names.append(e.op("aten.full", [], {"shape": list(v.shape), "value": 0, "dtype": v.dtype},
                          out="%%%s.%d" % (n.name, k)))
    idx = e.checked(_index_of(e, conv, b["indices"]), rows)
    offs = e.cast(e.x(b["offsets"]), torch.int64)
    starts = e.slice(offs, 0, 0, bags)
    j = e.arange(length)
    bag = e.op("aten.sub", [e.op("aten.sum", [e.cast(e.op("aten.le", [starts, e.op("aten.unsqueeze", [j], {"dim": 1})]),
                                                     torch.int64)], {"dims": [1]}), "1"])
    valid = e.op("aten.ge", [bag, "0"])
    if pad >= 0:
        valid = e.op("aten.logical_and", [valid, e.op("aten.ne", [idx, str(pad)])])
    slot = counted = e.where(valid, bag, str(bags))
    if last and pad < 0 and mode != 2:
        # The last offset, where it falls short of the end, ends the last bag's sum in PyTorch's
        # CPU kernels without a padding_idx; its count (mean), max and the padded forms run on
        # to the end of the indices.
        slot = e.where(e.op("aten.lt", [j, e.slice(offs, 0, bags, bags + 1)]), slot, str(bags))
    vec = e.take(e.x(b["weight"]), idx, 0)  # [length, dim]
    if mode == 2:
        oh = e.op("aten.logical_and", [e.op("aten.eq", [e.op("aten.unsqueeze", [e.arange(bags)], {"dim": 1}),
                                                        slot]), valid])  # [bags, length]
        ident = float("-inf") if wt.is_floating_point else torch.iinfo(wt).min
        m = e.where(e.op("aten.unsqueeze", [oh], {"dim": 2}), e.op("aten.unsqueeze", [vec], {"dim": 0}),
                    e.full([], ident, wt))
        r = e.op("aten.amax", [m], {"dims": [1]})
        some = e.op("aten.gt", [e.op("aten.sum", [e.cast(oh, torch.int64)], {"dims": [1]}), "0"])
        r = e.where(e.op("aten.unsqueeze", [some], {"dim": 1}), r, e.full([], 0, wt))
    else:
        if b.get("per_sample_weights") is not None:
            psw = e.cast(e.x(b["per_sample_weights"]), wt)
            vec = e.op("aten.mul", [vec, e.op("aten.unsqueeze", [psw], {"dim": 1})])
        r = e.op("aten.index_add", [e.full([bags + 1, dim], 0, wt), slot, vec], {"dim": 0})
        r = e.slice(r, 0, 0, bags)
        if mode == 1:
            cnt = e.op("aten.index_add", [e.full([bags + 1], 0, torch.int64), counted,
                                          e.full([length], 1, torch.int64)], {"dim": 0})
            cnt = e.op("aten.clamp", [e.slice(cnt, 0, 0, bags)], {"min": 1})
            r = e.op("aten.div", [r, e.op("aten.unsqueeze", [e.cast(cnt, wt)], {"dim": 1})])
    t0 = outs[0]
    r = e.cast(r, t0.dtype)
    out0 = e.op("aten.reshape", [r], {"shape": list(t0.shape)}, out="%%%s.0" % n.name)
    conv.names[n] = [out0] + names
    return e.lines


@_rule("embedding_renorm")
def embedding_renorm(conv, n, b):
    """The rows the indices name, scaled to norm max_norm where their norm exceeds it
    (PyTorch's factor max_norm / (norm + 1e-7)); the other rows as they are."""
    e = _E(conv, n)
    dt, (rows, dim) = _shape(conv, b["self"])
    it, ishape = _shape(conv, b["indices"])
    x = e.x(b["self"])
    m = _numel(ishape)
    i = e.checked(e.reshape(_index_of(e, conv, b["indices"]), [m]), rows)
    hit = e.op("aten.index_add", [e.full([rows], 0, torch.int64), i, e.full([m], 1, torch.int64)], {"dim": 0})
    p = float(b["norm_type"])
    a = e.op("aten.abs", [x])
    if p == 2:
        norm = e.op("aten.sqrt", [e.op("aten.sum", [e.op("aten.mul", [x, x])], {"dims": [1]})])
    elif p == 1:
        norm = e.op("aten.sum", [a], {"dims": [1]})
    elif p == float("inf"):
        norm = e.op("aten.amax", [a], {"dims": [1]})
    else:
        norm = e.op("aten.pow", [e.op("aten.sum", [e.op("aten.pow", [a, fmt_number(p)])], {"dims": [1]}),
                                 fmt_number(1.0 / p)])
    mx = float(b["max_norm"])
    big = e.op("aten.logical_and", [e.op("aten.gt", [hit, "0"]), e.op("aten.gt", [norm, fmt_number(mx)])])
    scale = e.op("aten.div", [fmt_number(mx), e.op("aten.add", [norm, "1e-07"])])
    scale = e.where(big, scale, e.full([], 1, dt))
    return e.done(e.op("aten.mul", [x, e.op("aten.unsqueeze", [scale], {"dim": 1})]), _out(n))
