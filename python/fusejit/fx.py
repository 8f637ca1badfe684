"""torch.fx graphs of ATen ops (as make_fx / AOTAutograd produce them) -> fusejit text (IR.md).

Each call_function node whose target is an ATen OpOverload becomes the aten.*
op of the same name (the overload suffix dropped: aten.add.Tensor -> aten.add).
Arguments are matched by their ATen schema names against the op's fusejit
signature (fj_op_schema): tensor arguments and scalars standing for tensors
become operands, the others attributes, with IR.md §3's renames (a reduction's
`dim` list is `dims`, `size` is `shape`, `fill_value` is `value`). Arguments
fusejit has no use for (device, layout, pin_memory, memory_format ...) are
dropped. An op fusejit lacks raises UnsupportedOp naming every such op of the
graph. Shapes and dtypes come from node.meta ('val' or 'tensor_meta').
"""
import math
import operator

import torch

from . import decomp as _decomp

DTYPES = {
    torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "bool",
}

# ATen names fusejit spells differently, and arguments always dropped.
RENAME_OP = {"rsub": "sub", "empty_like": "zeros_like", "fill": "full_like"}
DROP = {"device", "layout", "pin_memory", "memory_format", "non_blocking", "generator", "copy"}


class _Downstream(Exception):
    """An operand whose node was itself unsupported (reported there)."""


class UnsupportedOp(NotImplementedError):
    def __init__(self, ops):
        self.ops = sorted(set(ops))
        super().__init__("fusejit does not support: " + ", ".join(self.ops))


def fmt_number(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    r = repr(v)
    if "e" in r and "." not in r.split("e")[0]:
        return r  # 1e-05 is valid (INT EXP)
    if "." not in r and "e" not in r:
        r += ".0"
    if r.endswith("."):
        r += "0"
    return r


def fmt_attr(v):
    if v is None:
        return "none"
    if isinstance(v, torch.dtype):
        return DTYPES[v]
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple, torch.Size)):
        return "[" + ", ".join(fmt_attr(x) for x in v) + "]"
    if isinstance(v, (bool, int, float)):
        return fmt_number(v)
    if isinstance(v, getattr(torch, "SymInt", ())):
        return dim_text(v)
    if isinstance(v, torch.fx.Node) and isinstance(v.meta.get("val"), getattr(torch, "SymInt", ())):
        return dim_text(v.meta["val"])  # a size computed in the graph (sym_size): its expression
    if hasattr(v, "node") or type(v).__name__ in ("SymInt", "SymFloat"):
        raise UnsupportedOp(["symbolic value %s" % v])
    raise UnsupportedOp(["attribute value %r" % (v,)])


def is_size_node(v):
    """A node that computes a size (sym_size, size arithmetic): a dim expression, not an operand."""
    return isinstance(v, torch.fx.Node) and isinstance(v.meta.get("val"), getattr(torch, "SymInt", ()))


def sym_expr(s):
    """The sympy expression of a SymInt (its value, not a guard), or None for an int."""
    if isinstance(s, int):
        return None
    return s.node.expr


def dim_text(s):
    """A size as IR.md writes it: 4096, s0, s0*s1*4, s0+1, s0-1, s0//2, (s0+1)//2,
    s0+s1 (dim := sum; sum := prod {('+'|'-') prod}; prod := atom {'*' atom |
    '//' INT}). fusejit's parser makes the text canonical."""
    if isinstance(s, int):
        return str(s)
    e = sym_expr(s)
    if e.is_Integer:
        return str(int(e))
    return _sum_text(e)


def _unsupported_size(e):
    return UnsupportedOp(["a size %s (fusejit's sizes are sums, differences and products of symbols and "
                          "integers, and floor division by a positive integer)" % e])


def _sum_text(e):
    """A sympy expression as IR.md's `sum`: positive terms first, then the negative ones."""
    terms = e.args if e.is_Add else (e,)
    pos, neg = [], []
    for t in terms:
        c, rest = t.as_coeff_Mul()
        if not c.is_Integer:
            raise _unsupported_size(e)
        c = int(c)
        if rest == 1:
            text = str(abs(c))
        else:
            text = _prod_text(rest, e)
            if abs(c) != 1:
                text += "*%d" % abs(c)
        (neg if c < 0 else pos).append(text)
    if not pos:
        raise _unsupported_size(e)  # negative for every value of its symbols
    return "+".join(pos) + "".join("-" + t for t in neg)


def _prod_text(e, whole):
    """A product of symbols, powers and floor divisions (no coefficient) as IR.md's `prod`."""
    factors = e.args if e.is_Mul else (e,)
    out = []
    for f in factors:
        if f.is_Symbol:
            out.append(str(f))
        elif f.is_Pow and f.base.is_Symbol and f.exp.is_Integer and int(f.exp) > 0:
            out.extend([str(f.base)] * int(f.exp))
        elif type(f).__name__ == "FloorDiv" and f.args[1].is_Integer and int(f.args[1]) > 0:
            num = f.args[0]
            inner = str(int(num)) if num.is_Integer else _sum_text(num)
            out.append("((%s)//%d)" % (inner, int(f.args[1])))
        elif f.is_Add:
            out.append("(%s)" % _sum_text(f))
        else:
            raise _unsupported_size(whole)
    return "*".join(out)


def meta_type(node):
    """(dtype, shape) of a node's value from its meta, or None."""
    m = node.meta
    v = m.get("val", None)
    if v is not None and hasattr(v, "shape") and hasattr(v, "dtype"):
        return v.dtype, tuple(v.shape)
    tm = m.get("tensor_meta", None)
    if tm is not None and hasattr(tm, "shape"):
        return tm.dtype, tuple(tm.shape)
    return None


def node_type(gm, node):
    """(dtype, shape) of a node's value: its meta, or for a get_attr (a tensor
    constant) the module attribute itself; None when unknown."""
    t = meta_type(node)
    if t is None and node.op == "get_attr":
        v = gm
        for part in node.target.split("."):
            v = getattr(v, part, None)
        if isinstance(v, torch.Tensor):
            return v.dtype, tuple(v.shape)
    return t


def meta_stride(node):
    """The strides of a node's tensor value from its meta (FakeTensor or
    TensorMetadata), or None."""
    v = node.meta.get("val", node.meta.get("tensor_meta", None))
    try:
        st = v.stride() if callable(getattr(v, "stride", None)) else getattr(v, "stride", None)
        return tuple(st) if st is not None else None
    except (TypeError, ValueError):
        return None


def meta_values(node):
    """A node's value(s) from its meta ('val', else 'tensor_meta'), as a list:
    one for a tensor (a TensorMetadata is a tuple too), each of a multi-output op's."""
    v = node.meta.get("val", node.meta.get("tensor_meta", None))
    return [v] if hasattr(v, "dtype") or not isinstance(v, (list, tuple)) else list(v)


def is_convertible_call(n):
    """An ATen op, or one of the bridge's own functions that has a rule (decomp.FUNCTIONS)."""
    return n.op == "call_function" and (isinstance(n.target, torch._ops.OpOverload) or n.target in _decomp.FUNCTIONS)


def meta_device(node):
    """The device of a node's tensor value(s) from its meta, or None."""
    for x in meta_values(node):
        if isinstance(x, torch.Tensor):
            return x.device
    return None


def fmt_type(dtype, shape):
    return "%s[%s]" % (DTYPES[dtype], ",".join(dim_text(s) for s in shape))


def _ir_name(n):
    return "%" + n


class Converter:
    def __init__(self, ctx):
        self.ctx = ctx
        self._schemas = {}

    def schema(self, op):
        if op not in self._schemas:
            self._schemas[op] = self.ctx.op_schema(op)
        return self._schemas[op]

    def convert(self, gm, name="main", params=None, results=None, graph_attrs=None, nograd=(), nodes=None):
        """Text of one graph @name. params: the nodes its parameters stand for, in order (default:
        the placeholders); results: the nodes to return (default: the output node's, flattened;
        None entries raise); nograd: names of parameters to mark {nograd}; nodes: the nodes to
        convert (default: all), e.g. one region of fusejit.partition. The text has one line per
        converted node (self.lines[k]: the node on line k + 2), for mapping diagnostics back."""
        g = gm.graph
        self.gm = gm
        places = [n for n in g.nodes if n.op == "placeholder"]
        if params is None:
            params = places
        self.names = {}
        self.failed = set()
        self.lines = []
        lines = []
        unsupported = []
        ps = []
        for p in params:
            t = node_type(gm, p)
            if t is None and isinstance(p.meta.get("val", p.meta.get("example_value")), getattr(torch, "SymInt", ())):
                raise UnsupportedOp(["input %s (a symbolic size: dynamic shapes; compile with "
                                     "torch.compile(..., dynamic=False))" % p.name])
            if t is None or t[0] not in DTYPES:
                raise UnsupportedOp(["input %s (not a tensor of a supported dtype)" % p.name])
            self.names[p] = _ir_name(p.name)
            ps.append("%s: %s%s" % (_ir_name(p.name), fmt_type(*t), " {nograd}" if p.name in nograd else ""))
        for n in (g.nodes if nodes is None else nodes):
            if n.op in ("placeholder", "output"):
                continue
            if n.op == "call_function" and n.target is operator.getitem:
                src, idx = n.args
                self.names[n] = self.names[src][idx] if isinstance(self.names.get(src), list) else None
                continue
            if not is_convertible_call(n):
                unsupported.append("%s %s" % (n.op, getattr(n.target, "__name__", n.target)))
                self.failed.add(n)
                continue
            try:
                line = self.node(n)
            except UnsupportedOp as e:
                unsupported.extend(e.ops)
                self.failed.add(n)
                continue
            except _Downstream:
                self.failed.add(n)
                continue
            for ln in ([line] if isinstance(line, str) else line or []):
                lines.append(ln)
                self.lines.append(n)
        if unsupported:
            raise UnsupportedOp(unsupported)
        if results is None:
            out = [n for n in g.nodes if n.op == "output"][0].args[0]
            results = list(out) if isinstance(out, (list, tuple)) else [out]
        rs = []
        for r in results:
            if isinstance(r, torch.fx.Node):
                v = self.names.get(r)
                if v is None or isinstance(v, list):
                    raise UnsupportedOp(["returning %s" % r.name])
                rs.append(v)
            elif isinstance(r, (bool, int, float)):
                rs.append(fmt_number(r))
            else:
                raise UnsupportedOp(["returning %r" % (r,)])
        attrs = ""
        if graph_attrs:
            attrs = " {" + ", ".join("%s=%s" % (k, fmt_attr(v)) for k, v in graph_attrs.items()) + "}"
        body = "".join("  %s\n" % l for l in lines)
        return "graph @%s(%s)%s {\n%sreturn %s\n}\n" % (name, ", ".join(ps), attrs, body + "  ", ", ".join(rs))

    def support(self, gm, n, device="cpu"):
        """None when node n converts on its own, else the reason it stays in PyTorch."""
        if n.op == "call_module":
            return "a module call (%s)" % n.target
        if n.op != "call_function":
            return "not an ATen call (%s)" % n.op
        if not is_convertible_call(n):
            return "not an ATen op (%s)" % getattr(n.target, "__name__", n.target)
        vals = meta_values(n)
        for x in vals:
            if x is None or (len(vals) > 1 and isinstance(x, (int, getattr(torch, "SymInt", int)))):
                continue  # a multi-output op's size results (attention's max_q) are not fusejit's to give
            if not hasattr(x, "dtype") or not hasattr(x, "shape"):
                return "its result is not a tensor (%s)" % type(x).__name__
            if x.dtype not in DTYPES:
                return "dtype %s (fusejit has %s)" % (str(x.dtype).replace("torch.", ""), ", ".join(DTYPES.values()))
            d = getattr(x, "device", None)
            if d is not None and device is not None and d.type not in (device, "meta"):
                return "its result is on %s (this executor runs on %s)" % (d, device)
            try:
                for d in x.shape:
                    dim_text(d)
            except UnsupportedOp as e:
                return "; ".join(e.ops)
        for o in n.all_input_nodes:
            t = node_type(gm, o)
            if t is not None and t[0] not in DTYPES:
                return "operand %s has dtype %s" % (o.name, str(t[0]).replace("torch.", ""))
            d = meta_device(o)
            if d is not None and device is not None and d.type not in (device, "meta"):  # meta: decided at run time
                return "operand %s is on %s (this executor runs on %s)" % (o.name, d, device)
        self.gm = gm
        self.names = {o: (["%%%s.%d" % (o.name, i) for i in range(16)] if isinstance(o.meta.get("val"), (list, tuple))
                          else _ir_name(o.name)) for o in n.all_input_nodes}
        self.failed = set()
        try:
            self.node(n)
        except UnsupportedOp as e:
            return "; ".join(e.ops)
        except _Downstream:
            return "an operand fusejit cannot take"
        return None

    def operand(self, v, what):
        if v is None:
            return "none"
        if isinstance(v, torch.fx.Node):
            if v in self.failed or (v.op == "call_function" and v.target is operator.getitem and v.args[0] in self.failed):
                raise _Downstream()
            r = self.names.get(v)
            if r is None or isinstance(r, list):
                raise UnsupportedOp(["%s: operand %s" % (what, v.name)])
            return r
        if isinstance(v, (bool, int, float)):
            return fmt_number(v)
        raise UnsupportedOp(["%s: operand %r" % (what, v)])

    def node(self, n):
        if n.target in _decomp.FUNCTIONS:
            import inspect
            b = inspect.signature(n.target).bind(*n.args, **n.kwargs).arguments
            return _decomp.FUNCTIONS[n.target](self, n, b)
        schema = n.target._schema
        base = schema.name.split("::")[-1]
        ns = schema.name.split("::")[0]
        full = "%s.%s" % (ns, base)
        if ns != "aten":
            raise UnsupportedOp([str(n.target)])
        rule = _decomp.RULES.get(base)
        if rule is not None:
            b = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
            for a, v in zip(schema.arguments, n.args):
                b[a.name] = v
            b.update(n.kwargs)
            try:
                return rule(self, n, b)
            except _decomp._Plain:
                pass
        base = RENAME_OP.get(base, base)
        op = "aten." + base
        sig = self.schema(op)
        if sig is None:
            raise UnsupportedOp([str(n.target)])
        opnames = [o.rstrip("?*+") for o in sig["operands"]]
        variadic = [o.endswith(("*", "+")) for o in sig["operands"]]
        attrs = sig["attributes"]
        # bind the FX call's arguments to the ATen schema's names
        bound = {}
        for a, v in zip(schema.arguments, n.args):
            bound[a.name] = v
        for k, v in n.kwargs.items():
            bound[k] = v
        if full == "aten.rsub":  # other - alpha * self
            bound["self"], bound["other"] = bound.get("other"), bound.get("self")
        operands = [None] * len(opnames)
        given = [False] * len(opnames)
        out_attrs = []
        for aname, v in bound.items():
            if aname in opnames:
                i = opnames.index(aname)
                if variadic[i]:
                    operands[i] = ", ".join(self.operand(x, op) for x in v)
                else:
                    operands[i] = self.operand(v, op)
                given[i] = True
                continue
            target = aname
            if aname == "dim" and "dims" in attrs and "dim" not in attrs:
                target = "dims"
                if isinstance(v, int):
                    v = [v]
            elif aname == "size" and "shape" in attrs and "size" not in attrs:
                target = "shape"
            elif aname == "fill_value" and "value" in attrs:
                target = "value"
            if target in attrs:
                if v is None:
                    continue
                if isinstance(v, torch.fx.Node) and not is_size_node(v):
                    raise UnsupportedOp(["%s: a tensor for attribute %s" % (op, target)])
                out_attrs.append((target, v))
            elif aname in DROP or v is None:
                continue
            else:
                raise UnsupportedOp(["%s: argument %s" % (str(n.target), aname)])
        # trailing operands left out; a missing one in the middle is `none`
        last = max([i for i, g in enumerate(given) if g], default=-1)
        ops = [operands[i] if given[i] else "none" for i in range(last + 1)]
        attrs_text = ""
        if out_attrs:
            attrs_text = " {" + ", ".join("%s=%s" % (k, fmt_attr(v)) for k, v in out_attrs) + "}"
        nres = len(sig["results"])
        if nres == 1:
            res = _ir_name(n.name)
            self.names[n] = res
        else:
            res_list = [_ir_name("%s.%d" % (n.name, i)) for i in range(nres)]
            self.names[n] = res_list
            res = ", ".join(res_list)
        return "%s = %s(%s)%s" % (res, op, ", ".join(ops), attrs_text)


def ensure_meta(gm, example_inputs):
    """Fills tensor_meta by running the graph once when nodes lack shapes; returns
    the nodes that got it (drop_meta takes it away again)."""
    need = any(meta_type(n) is None and not isinstance(n.meta.get("val"), (list, tuple)) for n in gm.graph.nodes
               if n.op == "placeholder" or (n.op == "call_function" and n.target is not operator.getitem))
    if not need:
        return []
    from torch.fx.passes.shape_prop import ShapeProp
    before = {n for n in gm.graph.nodes if "tensor_meta" in n.meta}
    ShapeProp(gm).propagate(*example_inputs)
    return [n for n in gm.graph.nodes if "tensor_meta" in n.meta and n not in before]


def drop_meta(nodes):
    """Takes back the tensor_meta ensure_meta added (AOTAutograd's partitioners
    read a multi-output node without one as a tuple)."""
    for n in nodes:
        n.meta.pop("tensor_meta", None)
