#!/usr/bin/python3
"""Random valid fusejit graphs (.fj) from a seed, for the differential fuzzer.

    gen_graph.py SEED [--nodes=N] [-o FILE]

The same seed gives the same graph. The generator tracks every value's dtype
and shape itself and only writes ops whose operands it knows to be valid, so
every graph must pass `fusejit-opt FILE`; a graph that does not is a bug of
the generator (run_fuzz.py counts them apart from the compiler's failures).

Coverage (IR.md §3): pointwise unary and binary ops with broadcasting and
scalar operands, comparisons and where, casts between every float dtype and
i64/i32/bool, reductions with and without keepdim (sum mean amax amin var
logsumexp argmax), softmax/log_softmax, layer_norm/rms_norm, linear/matmul,
attention (softmax of scaled, masked q k^T times v, the flash kernel's pattern),
and views of intermediates: reshape (dims merged and split, reductions
reshaped), permute, transpose, t, expand, unsqueeze, squeeze, slice, cat,
flip. Sizes include 1, 0 and odd ones; a graph may have a symbolic batch dim
N (its binding is written in a `// DIMS: N=5` line). The outputs include
several values, usually a reduction reshaped, sometimes a returned input and
the same value returned twice. About 1 graph in 15 has 500-800 nodes.

The first line, `// FUZZ: seed=S nodes=K train=0|1`, tells the runner whether
the graph is differentiable (a float parameter reaches a float output).
"""
import argparse
import random
import sys

FLOATS = ["f32", "f32", "f32", "f64", "f16", "bf16"]
INTS = ["i64", "i32"]
SIZES = [1, 1, 2, 3, 4, 5, 7, 8, 16, 0]

UNARY_SAFE = ["neg", "abs", "tanh", "sigmoid", "sin", "cos", "atan", "erf",
              "relu", "silu", "gelu", "exp", "floor", "ceil", "trunc", "sign",
              "asinh", "hardsigmoid", "hardswish", "elu", "leaky_relu",
              "hardtanh", "softplus", "round"]
BINARY = ["add", "sub", "mul", "maximum", "minimum", "div", "atan2"]
COMPARE = ["lt", "le", "gt", "ge", "eq", "ne"]
REDUCE = ["sum", "mean", "amax", "amin", "var", "logsumexp"]


def is_float(dt):
    return dt in ("f64", "f32", "f16", "bf16")


def promote(a, b):
    if a == b:
        return a
    if is_float(a) and is_float(b):
        if "f64" in (a, b):
            return "f64"
        return "f32"
    if is_float(a):
        return a
    if is_float(b):
        return b
    if "bool" in (a, b):
        return b if a == "bool" else a
    return "i64"


def dim_str(d):
    return str(d)


class Value:
    def __init__(self, name, dtype, shape, kind="node"):
        self.name = name
        self.dtype = dtype
        self.shape = list(shape)
        self.kind = kind      # param | node | reduction

    def rank(self):
        return len(self.shape)

    def concrete(self):
        return all(isinstance(d, int) for d in self.shape)

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


class Gen:
    def __init__(self, seed, nodes):
        self.r = random.Random(seed)
        self.seed = seed
        self.target = nodes
        self.params = []
        self.values = []
        self.lines = []
        self.nid = 0
        self.sym = None           # (name, size) of the symbolic dim, if any
        self.grad_float = False

    # ---- values ----
    def new_name(self):
        self.nid += 1
        return "v%d" % self.nid

    def param(self, dtype, shape):
        v = Value("p%d" % len(self.params), dtype, shape, "param")
        self.params.append(v)
        self.values.append(v)
        return v

    def emit(self, op, operands, attrs, dtype, shape, kind="node"):
        v = Value(self.new_name(), dtype, shape, kind)
        ops = ", ".join(o if isinstance(o, str) else "%" + o.name for o in operands)
        line = "  %%%s = aten.%s(%s)" % (v.name, op, ops)
        if attrs:
            line += " {" + ", ".join("%s=%s" % kv for kv in attrs) + "}"
        # the written type must agree with inference: the verifier checks the
        # generator's (and inference's) idea of every value
        line += " : %s[%s]" % (dtype, ", ".join(map(dim_str, shape)))
        self.lines.append(line)
        self.values.append(v)
        return v

    def emit_multi(self, op, operands, attrs, types, kind="node"):
        vs = [Value(self.new_name(), dt, sh, kind) for dt, sh in types]
        ops = ", ".join(o if isinstance(o, str) else "%" + o.name for o in operands)
        line = "  %s = aten.%s(%s)" % (", ".join("%" + v.name for v in vs), op, ops)
        if attrs:
            line += " {" + ", ".join("%s=%s" % kv for kv in attrs) + "}"
        line += " : " + ", ".join("%s[%s]" % (v.dtype, ", ".join(map(dim_str, v.shape))) for v in vs)
        self.lines.append(line)
        self.values.extend(vs)
        return vs[0]

    def pick(self, pred=lambda v: True, recent=True):
        cands = [v for v in self.values if pred(v)]
        if not cands:
            return None
        if recent and self.r.random() < 0.7:
            cands = cands[-6:]
        return self.r.choice(cands)

    def rand_shape(self, rank=None):
        if rank is None:
            rank = self.r.choice([0, 1, 2, 2, 3, 3, 4])
        shape = [self.r.choice(SIZES) for _ in range(rank)]
        # empty tensors now and then, not everywhere
        shape = [d if d != 0 or self.r.random() < 0.3 else 3 for d in shape]
        if self.sym and rank > 0 and self.r.random() < 0.5:
            shape[0] = self.sym[0]
        return shape

    # ---- ops ----
    def op_param(self):
        dt = self.r.choice(FLOATS) if self.r.random() < 0.85 else self.r.choice(INTS + ["bool"])
        return self.param(dt, self.rand_shape())

    def op_unary(self):
        x = self.pick(lambda v: is_float(v.dtype))
        if x is None:
            return None
        op = self.r.choice(UNARY_SAFE)
        attrs = []
        if op == "gelu" and self.r.random() < 0.5:
            attrs = [("approximate", '"tanh"')]
        if op == "exp":          # keep it finite through chains
            x = self.emit("tanh", [x], [], x.dtype, x.shape)
        if op == "round" and self.r.random() < 0.3:
            attrs = [("decimals", "1")]
        return self.emit(op, [x], attrs, x.dtype, x.shape)

    def op_guarded(self):
        """log/sqrt/rsqrt/reciprocal/log1p on abs(x) + c: defined and finite."""
        x = self.pick(lambda v: is_float(v.dtype))
        if x is None:
            return None
        a = self.emit("abs", [x], [], x.dtype, x.shape)
        a = self.emit("add", [a, "1.0" if self.r.random() < 0.5 else "0.5"], [], x.dtype, x.shape)
        op = self.r.choice(["log", "sqrt", "rsqrt", "reciprocal", "log1p", "log2", "pow"])
        if op == "pow":
            return self.emit("pow", [a, self.r.choice(["2", "0.5", "3.0", "-1.5"])], [], x.dtype, x.shape)
        return self.emit(op, [a], [], x.dtype, x.shape)

    def broadcast_partner(self, x):
        """A value (existing, new param or scalar) that broadcasts with x."""
        c = self.r.random()
        if c < 0.15:
            return self.r.choice(["0.5", "2.0", "-1.25", "3"])
        same = [v for v in self.values if v is not x and v.shape == x.shape and is_float(v.dtype)]
        if same and c < 0.55:
            return self.r.choice(same[-5:])
        # a new parameter of a broadcastable shape: trailing dims, some set to 1
        k = self.r.randint(0, x.rank())
        shape = [d if self.r.random() < 0.7 else 1 for d in x.shape[x.rank() - k:]]
        if self.r.random() < 0.3 and x.rank() < 4:
            shape = [self.r.choice([1, 2])] + x.shape   # broadcasting up a rank
            if shape[0] == 2:
                shape[0] = 1 if x.rank() == 0 else shape[0]
        dt = x.dtype if self.r.random() < 0.8 else self.r.choice(FLOATS)
        return self.param(dt, shape)

    def bshape(self, a, b):
        sa = a.shape if isinstance(a, Value) else []
        sb = b.shape if isinstance(b, Value) else []
        n = max(len(sa), len(sb))
        sa = [1] * (n - len(sa)) + sa
        sb = [1] * (n - len(sb)) + sb
        out = []
        for p, q in zip(sa, sb):
            if p == q or q == 1:
                out.append(p)
            elif p == 1:
                out.append(q)
            else:
                return None
        return out

    def rdtype(self, a, b):
        da = a.dtype if isinstance(a, Value) else None
        db = b.dtype if isinstance(b, Value) else None
        if da is None:
            return db
        if db is None:
            return da
        # PyTorch: a 0-d tensor is weak against a dimensioned one of its category
        if a.rank() == 0 and b.rank() > 0 and is_float(da) == is_float(db):
            return db
        if b.rank() == 0 and a.rank() > 0 and is_float(da) == is_float(db):
            return da
        return promote(da, db)

    def op_binary(self):
        x = self.pick(lambda v: is_float(v.dtype))
        if x is None:
            return None
        y = self.broadcast_partner(x)
        op = self.r.choice(BINARY)
        if self.r.random() < 0.5:
            x, y = y, x
        if isinstance(x, str) and isinstance(y, str):
            return None
        shape = self.bshape(x, y)
        if shape is None:
            return None
        dt = self.rdtype(x, y)
        if op == "div" and isinstance(y, Value):
            # divide by something away from 0
            a = self.emit("abs", [y], [], y.dtype, y.shape)
            y = self.emit("add", [a, "1.0"], [], y.dtype, y.shape)
        elif op == "div" and isinstance(y, str) and float(y) == 0:
            y = "2.0"
        attrs = []
        if op in ("add", "sub") and self.r.random() < 0.2:
            attrs = [("alpha", "2")]
        return self.emit(op, [x, y], attrs, dt, shape)

    def op_int(self):
        """Integer arithmetic and casts: i64/i32 values through add/mul/amax."""
        x = self.pick(lambda v: v.dtype in INTS)
        if x is None:
            f = self.pick(lambda v: is_float(v.dtype))
            if f is None:
                return None
            dt = self.r.choice(INTS)
            return self.emit("_to_copy", [f], [("dtype", dt)], dt, f.shape)
        c = self.r.random()
        if c < 0.4:
            return self.emit(self.r.choice(["add", "mul", "sub"]), [x, self.r.choice(["2", "3", "-1"])], [], x.dtype, x.shape)
        if c < 0.7:
            dt = self.r.choice(FLOATS)
            return self.emit("_to_copy", [x], [("dtype", dt)], dt, x.shape)
        if x.rank() > 0:
            d = self.r.randrange(x.rank())
            return self.emit("amax", [x], [("dims", "[%d]" % d)], x.dtype, x.shape[:d] + x.shape[d + 1:], "reduction")
        return self.emit("neg", [x], [], x.dtype, x.shape)

    def op_compare_where(self):
        x = self.pick(lambda v: is_float(v.dtype) or v.dtype in INTS)
        if x is None:
            return None
        y = self.broadcast_partner(x) if is_float(x.dtype) else self.r.choice(["2", "5"])
        shape = self.bshape(x, y)
        if shape is None:
            return None
        c = self.emit(self.r.choice(COMPARE), [x, y], [], "bool", shape)
        r = self.r.random()
        if r < 0.2:
            return c
        if r < 0.3:
            return self.emit("logical_not", [c], [], "bool", shape)
        if r < 0.4:
            dt = self.r.choice(FLOATS)
            return self.emit("_to_copy", [c], [("dtype", dt)], dt, shape)
        a = self.pick(lambda v: is_float(v.dtype) and self.bshape(v, c) is not None)
        if a is None:
            return c
        b = self.r.choice(["0.0", "1.5"]) if self.r.random() < 0.4 else \
            self.pick(lambda v: is_float(v.dtype) and v.shape == a.shape) or "0.0"
        s = self.bshape(c, a)
        s = self.bshape(Value("t", "f32", s), b) if s is not None else None
        if s is None:
            return c
        if self.r.random() < 0.2 and isinstance(b, str):
            return self.emit("masked_fill", [a, c, b], [], a.dtype, s)
        return self.emit("where", [c, a, b], [], self.rdtype(a, b), s)

    def op_cast(self):
        x = self.pick(lambda v: is_float(v.dtype))
        if x is None:
            return None
        dt = self.r.choice([d for d in ["f32", "f64", "f16", "bf16"] if d != x.dtype])
        return self.emit("_to_copy", [x], [("dtype", dt)], dt, x.shape)

    def op_reduce(self):
        x = self.pick(lambda v: is_float(v.dtype) and v.rank() > 0)
        if x is None:
            return None
        op = self.r.choice(REDUCE + ["argmax", "argmin"])
        keep = self.r.random() < 0.5
        if op in ("argmax", "argmin"):
            d = self.r.randrange(x.rank())
            if x.shape[d] == 0:
                return None          # argmax of an empty dim is an error
            shape = [1 if i == d else s for i, s in enumerate(x.shape)] if keep else \
                x.shape[:d] + x.shape[d + 1:]
            return self.emit(op, [x], [("dim", str(d)), ("keepdim", "true" if keep else "false")], "i64", shape, "reduction")
        k = self.r.randint(1, x.rank())
        dims = sorted(self.r.sample(range(x.rank()), k))
        if op in ("amax", "amin") and any(x.shape[d] == 0 for d in dims):
            return None              # amax of nothing is an error, as in PyTorch
        if self.r.random() < 0.15:
            dims_attr = "[%s]" % ", ".join(str(d - x.rank()) for d in dims)   # negative dims
        else:
            dims_attr = "[%s]" % ", ".join(str(d) for d in dims)
        shape = [1 if i in dims else s for i, s in enumerate(x.shape)] if keep else \
            [s for i, s in enumerate(x.shape) if i not in dims]
        attrs = [("dims", dims_attr), ("keepdim", "true" if keep else "false")]
        if op == "var":
            attrs.append(("correction", self.r.choice(["0", "1"])))
        return self.emit(op, [x], attrs, x.dtype, shape, "reduction")

    def op_softmax(self):
        x = self.pick(lambda v: is_float(v.dtype) and v.rank() > 0)
        if x is None:
            return None
        d = self.r.randrange(x.rank())
        op = self.r.choice(["softmax", "log_softmax"])
        return self.emit(op, [x], [("dim", str(d - x.rank() if self.r.random() < 0.3 else d))], x.dtype, x.shape, "reduction")

    def op_norm(self):
        x = self.pick(lambda v: is_float(v.dtype) and v.rank() > 0 and isinstance(v.shape[-1], int))
        if x is None:
            return None
        k = 1
        if x.rank() > 1 and isinstance(x.shape[-2], int) and self.r.random() < 0.3:
            k = 2
        ns = x.shape[x.rank() - k:]
        nsa = "[%s]" % ", ".join(str(d) for d in ns)
        if self.r.random() < 0.3:
            return self.emit("rms_norm", [x, self.param(x.dtype, ns)], [("normalized_shape", nsa), ("eps", "1e-5")], x.dtype, x.shape, "reduction")
        w = self.param(x.dtype, ns) if self.r.random() < 0.7 else "none"
        b = self.param(x.dtype, ns) if self.r.random() < 0.6 else "none"
        return self.emit("layer_norm", [x, w, b], [("normalized_shape", nsa), ("eps", "1e-5")], x.dtype, x.shape, "reduction")

    def op_matmul(self):
        x = self.pick(lambda v: is_float(v.dtype) and v.rank() >= 1 and isinstance(v.shape[-1], int))
        if x is None:
            return None
        k = x.shape[-1]
        m = self.r.choice([1, 3, 4, 8, 5])
        if self.r.random() < 0.5:
            w = self.param(x.dtype, [m, k])
            b = self.param(x.dtype, [m]) if self.r.random() < 0.6 else None
            ops = [x, w] + ([b] if b else [])
            return self.emit("linear", ops, [], x.dtype, x.shape[:-1] + [m])
        if x.rank() == 1:
            return None
        w = self.param(x.dtype, [k, m])
        return self.emit("matmul", [x, w], [], x.dtype, x.shape[:-1] + [m])

    def factor_shapes(self, shape):
        """A reshape target for shape: dims merged or split (a symbolic dim
        stays where it is, as the -1)."""
        if not all(isinstance(d, int) for d in shape):
            conc = 1
            for d in shape:
                if isinstance(d, int):
                    conc *= d
            rest = self.split(conc)
            return ["-1"] + [str(d) for d in rest], None
        n = 1
        for d in shape:
            n *= d
        target = self.split(n) if n > 0 else [d for d in shape if d != 1] + [1]
        if n > 0 and self.r.random() < 0.2 and len(target) > 0:
            i = self.r.randrange(len(target))
            t2 = list(target)
            t2[i] = -1
            return [str(d) for d in t2], target
        return [str(d) for d in target], target

    def split(self, n):
        out = []
        while n > 1 and len(out) < 3:
            fs = [f for f in range(2, n + 1) if n % f == 0]
            f = self.r.choice(fs)
            out.append(f)
            n //= f
        if n > 1:
            out[-1] *= n
        if self.r.random() < 0.3:
            out.insert(self.r.randint(0, len(out)), 1)
        return out

    def op_reshape(self, x=None):
        x = x or self.pick(lambda v: v.rank() > 0 or self.r.random() < 0.3)
        if x is None:
            return None
        attr, target = self.factor_shapes(x.shape)
        if target is None:   # symbolic: the -1 would be N times a product
            return None
        return self.emit(self.r.choice(["reshape", "reshape", "view"]), [x], [("shape", "[%s]" % ", ".join(attr))], x.dtype, target)

    def op_layout(self):
        x = self.pick(lambda v: v.rank() > 0)
        if x is None:
            return None
        c = self.r.choice(["permute", "transpose", "t", "expand", "unsqueeze", "squeeze", "slice", "cat", "flip", "reshape"])
        n = x.rank()
        if c == "reshape":
            return self.op_reshape(x)
        if c == "permute":
            p = list(range(n))
            self.r.shuffle(p)
            return self.emit("permute", [x], [("dims", "[%s]" % ", ".join(map(str, p)))], x.dtype, [x.shape[i] for i in p])
        if c == "transpose" or (c == "t" and n != 2):
            a, b = self.r.randrange(n), self.r.randrange(n)
            s = list(x.shape)
            s[a], s[b] = s[b], s[a]
            return self.emit("transpose", [x], [("dim0", str(a)), ("dim1", str(b))], x.dtype, s)
        if c == "t":
            return self.emit("t", [x], [], x.dtype, [x.shape[1], x.shape[0]])
        if c == "expand":
            s = [self.r.choice([2, 3, 5]) if d == 1 else d for d in x.shape]
            if n < 4 and self.r.random() < 0.3:
                s = [self.r.choice([1, 2])] + s
            attr = [str(d) if (i < len(s) - n or x.shape[i - (len(s) - n)] == 1) or self.r.random() < 0.5 else "-1"
                    for i, d in enumerate(s)]
            return self.emit("expand", [x], [("size", "[%s]" % ", ".join(attr))], x.dtype, s)
        if c == "unsqueeze":
            d = self.r.randint(0, n)
            return self.emit("unsqueeze", [x], [("dim", str(d))], x.dtype, x.shape[:d] + [1] + x.shape[d:])
        if c == "squeeze":
            ones = [i for i, d in enumerate(x.shape) if d == 1]
            if not ones:
                return None
            if self.r.random() < 0.3:
                return self.emit("squeeze", [x], [], x.dtype, [d for d in x.shape if d != 1])
            d = self.r.choice(ones)
            return self.emit("squeeze", [x], [("dims", "[%d]" % d)], x.dtype, x.shape[:d] + x.shape[d + 1:])
        if c == "flip":
            k = self.r.randint(1, n)
            dims = sorted(self.r.sample(range(n), k))
            return self.emit("flip", [x], [("dims", "[%s]" % ", ".join(map(str, dims)))], x.dtype, x.shape)
        if c == "slice":
            cands = [i for i, d in enumerate(x.shape) if isinstance(d, int)]
            if not cands:
                return None
            d = self.r.choice(cands)
            size = x.shape[d]
            start = self.r.randint(0, size)
            end = self.r.randint(start, size)
            step = self.r.choice([1, 1, 2, 3])
            out = (end - start + step - 1) // step
            s = list(x.shape)
            s[d] = out
            return self.emit("slice", [x], [("dim", str(d)), ("start", str(start)), ("end", str(end)), ("step", str(step))], x.dtype, s)
        if c == "cat":
            cands = [i for i, dd in enumerate(x.shape) if isinstance(dd, int)]
            if not cands:
                return None
            d = self.r.choice(cands)
            others = [v for v in self.values if v is not x and v.dtype == x.dtype and v.rank() == n and
                      isinstance(v.shape[d], int) and
                      all(v.shape[i] == x.shape[i] for i in range(n) if i != d)]
            parts = [x]
            if others and self.r.random() < 0.6:
                parts.append(self.r.choice(others))
            else:
                s = list(x.shape)
                s[d] = self.r.choice([1, 2, 3])
                parts.append(self.param(x.dtype, s))
            if self.r.random() < 0.3:
                parts.append(x)
            s = list(x.shape)
            s[d] = sum(p.shape[d] for p in parts)
            return self.emit("cat", parts, [("dim", str(d))], x.dtype, s)
        return None

    def op_cumsum(self):
        x = self.pick(lambda v: v.dtype in ("f32", "f64") and v.rank() > 0)
        if x is None:
            return None
        d = self.r.randrange(x.rank())
        return self.emit("cumsum", [x], [("dim", str(d))], x.dtype, x.shape)

    def op_block(self):
        """A transformer-ish block: the patterns of tests/lit/regress/."""
        x = self.pick(lambda v: v.dtype == "f32" and v.rank() == 2 and isinstance(v.shape[-1], int) and v.shape[-1] > 0)
        if x is None:
            return None
        k = x.shape[-1]
        h = self.r.choice([k, 2 * k, 3])
        ln = self.emit("layer_norm", [x, self.param("f32", [k]), self.param("f32", [k])],
                       [("normalized_shape", "[%d]" % k), ("eps", "1e-5")], "f32", x.shape, "reduction")
        a = self.emit("linear", [ln, self.param("f32", [h, k]), self.param("f32", [h])], [], "f32", x.shape[:-1] + [h])
        g = self.emit("gelu", [a], [("approximate", '"tanh"')], "f32", a.shape)
        o = self.emit("linear", [g, self.param("f32", [k, h]), self.param("f32", [k])], [], "f32", x.shape)
        return self.emit("add", [o, x], [], "f32", x.shape)

    def op_rownorm(self):
        """Normalisation written out as primitive ops, the statistics reshaped
        into extra outputs (issue 17's heap corruption)."""
        x = self.pick(lambda v: is_float(v.dtype) and v.rank() >= 2 and v.concrete() and v.numel() > 0)
        if x is None:
            return None
        d = x.rank() - 1
        m = self.emit("mean", [x], [("dims", "[%d]" % d), ("keepdim", "true")], x.dtype, x.shape[:-1] + [1], "reduction")
        sq = self.emit("mul", [x, x], [], x.dtype, x.shape)
        msq = self.emit("mean", [sq], [("dims", "[%d]" % d), ("keepdim", "true")], x.dtype, m.shape, "reduction")
        mm = self.emit("mul", [m, m], [], x.dtype, m.shape)
        v = self.emit("sub", [msq, mm], [], x.dtype, m.shape)
        v = self.emit("add", [self.emit("abs", [v], [], x.dtype, m.shape), "1e-3"], [], x.dtype, m.shape)
        s = self.emit("sqrt", [v], [], x.dtype, m.shape)
        dd = self.emit("sub", [x, m], [], x.dtype, x.shape)
        n = self.emit("div", [dd, s], [], x.dtype, x.shape)
        self.op_reshape(m)
        self.op_reshape(self.emit("reciprocal", [s], [], x.dtype, m.shape))
        return n

    def op_attention(self):
        """softmax(q k^T * scale [+ mask] [causal]) v, now and then beside the
        logsumexp of the same scores: the host's flash-attention kernel
        (ir/attention.c) in f32, three kernels in other dtypes; key counts
        up to 300 span several of its blocks of 128."""
        q = self.pick(lambda v: v.dtype in ("f32", "f32", "f64", "f16") and v.rank() in (2, 3) and v.concrete()
                      and v.shape[-1] > 0 and v.shape[-2] > 0)
        if q is None:
            return None
        dt, lead, m, dk = q.dtype, q.shape[:-2], q.shape[-2], q.shape[-1]
        n = self.r.choice([1, 3, 5, 17, 130, 300])
        dv = self.r.choice([1, 4, 7, 33])
        k = self.param(dt, lead + [n, dk])
        kt = self.emit("transpose", [k], [("dim0", "-2"), ("dim1", "-1")], dt, lead + [dk, n])
        s = self.emit("matmul", [q, kt], [], dt, lead + [m, n])
        s = self.emit("mul", [s, "0.25"], [], dt, s.shape)
        if self.r.random() < 0.4:
            s = self.emit("add", [s, self.param(dt, [m, n])], [], dt, s.shape)
        if self.r.random() < 0.3:
            rows = self.emit("arange", [], [("end", str(m)), ("dtype", "i64")], "i64", [m])
            cols = self.emit("arange", [], [("end", str(n)), ("dtype", "i64")], "i64", [n])
            r1 = self.emit("unsqueeze", [rows], [("dim", "1")], "i64", [m, 1])
            keep = self.emit("le", [cols, r1], [], "bool", [m, n])
            s = self.emit("where", [keep, s, "-inf"], [], dt, s.shape)
        if self.r.random() < 0.3:
            self.emit("logsumexp", [s], [("dims", "[-1]")], dt, lead + [m], "reduction")
        p = self.emit("softmax", [s], [("dim", "-1")], dt, s.shape, "reduction")
        return self.emit("matmul", [p, self.param(dt, lead + [n, dv])], [], dt, lead + [m, dv])

    def op_more(self):
        """clamp lerp addcmul var_mean native_layer_norm embedding
        index_select bmm addmm full/arange/ones_like."""
        c = self.r.choice(["clamp", "lerp", "addcmul", "var_mean", "native_layer_norm", "embedding",
                           "index_select", "bmm", "addmm", "source"])
        x = self.pick(lambda v: is_float(v.dtype) and v.rank() > 0 and v.concrete())
        if x is None:
            return None
        n = x.rank()
        if c == "clamp":
            return self.emit("clamp", [x], [("min", "-0.5"), ("max", "0.75")] if self.r.random() < 0.7
                             else [("min", "0")], x.dtype, x.shape)
        if c in ("lerp", "addcmul"):
            a, b = self.param(x.dtype, x.shape), self.param(x.dtype, x.shape[1:])
            attrs = [("value", "0.5")] if c == "addcmul" and self.r.random() < 0.5 else []
            return self.emit(c, [x, a, b], attrs, x.dtype, x.shape)
        if c == "var_mean":
            d = self.r.randrange(n)
            keep = self.r.random() < 0.5
            sh = [1 if i == d else s for i, s in enumerate(x.shape)] if keep else x.shape[:d] + x.shape[d + 1:]
            return self.emit_multi("var_mean", [x], [("dims", "[%d]" % d), ("correction", "0"),
                                   ("keepdim", "true" if keep else "false")], [(x.dtype, sh)] * 2, "reduction")
        if c == "native_layer_norm":
            st = x.shape[:-1] + [1]
            return self.emit_multi("native_layer_norm", [x, self.param(x.dtype, x.shape[-1:]), "none"],
                                   [("normalized_shape", "[%d]" % x.shape[-1]), ("eps", "1e-5")],
                                   [(x.dtype, x.shape), (x.dtype, st), (x.dtype, st)], "reduction")
        if c == "embedding" and n == 2 and x.shape[0] > 0:
            idx = self.param("i64", self.rand_shape(self.r.randint(1, 2)))
            return self.emit("embedding", [x, idx], [], x.dtype, idx.shape + [x.shape[1]])
        if c == "index_select":
            d = self.r.randrange(n)
            if x.shape[d] == 0:
                return None
            idx = self.param("i64", [self.r.choice([1, 2, 5])])
            return self.emit("index_select", [x, idx], [("dim", str(d))], x.dtype,
                             x.shape[:d] + idx.shape + x.shape[d + 1:])
        if c == "bmm" and n == 3:
            m = self.r.choice([1, 2, 5])
            return self.emit("bmm", [x, self.param(x.dtype, [x.shape[0], x.shape[2], m])], [], x.dtype,
                             [x.shape[0], x.shape[1], m])
        if c == "addmm" and n == 2:
            m = self.r.choice([1, 2, 5])
            return self.emit("addmm", [self.param(x.dtype, [m]), x, self.param(x.dtype, [x.shape[1], m])],
                             [("beta", "0.5")] if self.r.random() < 0.3 else [], x.dtype, [x.shape[0], m])
        if c == "source":
            k = self.r.random()
            if k < 0.3:
                return self.emit("ones_like", [x], [], x.dtype, x.shape)
            if k < 0.6 and x.shape[-1] > 0:
                a = self.emit("arange", [], [("end", str(x.shape[-1])), ("dtype", x.dtype)], x.dtype, [x.shape[-1]])
                return self.emit("mul", [x, a], [], x.dtype, x.shape)
            f = self.emit("full", [], [("shape", "[%s]" % ", ".join(map(str, x.shape))), ("value", "0.25"),
                                       ("dtype", x.dtype)], x.dtype, x.shape)
            return self.emit("add", [x, f], [], x.dtype, x.shape)
        return None

    OPS = [("more", 6), ("param", 3), ("unary", 14), ("guarded", 4), ("binary", 14), ("int", 3),
           ("compare_where", 5), ("cast", 3), ("reduce", 9), ("softmax", 3), ("norm", 3),
           ("matmul", 4), ("layout", 12), ("reshape", 4), ("cumsum", 1), ("block", 1), ("rownorm", 2),
           ("attention", 8)]

    def generate(self):
        r = self.r
        if r.random() < 0.25:
            self.sym = ("N", r.choice([1, 3, 5]))
        for _ in range(r.randint(1, 3)):
            self.param(r.choice(FLOATS), self.rand_shape())
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        tries = 0
        while self.nid < self.target and tries < self.target * 20:
            tries += 1
            getattr(self, "op_" + r.choices(names, weights)[0])()
        return self.finish()

    def finish(self):
        r = self.r
        nodes = [v for v in self.values if v.kind != "param"]
        outs = []
        if nodes:
            outs.append(nodes[-1])
            for _ in range(r.randint(0, 3)):
                outs.append(r.choice(nodes))
            reds = [v for v in nodes if v.kind == "reduction" and v.rank() > 0]
            if reds and r.random() < 0.6:
                rv = self.op_reshape(r.choice(reds))
                if rv is not None:
                    outs.append(rv)
        if r.random() < 0.2 or not outs:
            outs.append(r.choice(self.params))
        if r.random() < 0.2:
            outs.append(r.choice(outs))
        train = any(is_float(p.dtype) for p in self.params) and any(is_float(o.dtype) for o in outs)
        head = ["// FUZZ: seed=%d nodes=%d train=%d" % (self.seed, self.nid, int(train))]
        if self.sym and any(self.sym[0] in p.shape for p in self.params):
            head.append("// DIMS: %s=%d" % self.sym)
        params = ", ".join("%%%s: %s[%s]" % (p.name, p.dtype, ", ".join(map(dim_str, p.shape)))
                           for p in self.params)
        body = ["graph @main(%s) {" % params] + self.lines + \
            ["  return " + ", ".join("%" + o.name for o in outs), "}"]
        return "\n".join(head + body) + "\n"


def generate(seed, nodes=None):
    r = random.Random(seed * 7919 + 1)
    if nodes is None:
        nodes = r.randint(510, 800) if r.random() < 1 / 15 else r.randint(2, 40)
    return Gen(seed, nodes).generate()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("seed", type=int)
    ap.add_argument("--nodes", type=int)
    ap.add_argument("-o", dest="out")
    a = ap.parse_args()
    text = generate(a.seed, a.nodes)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
