"""The PyTorch bridge: fusejit as an AOTAutograd compiler and a torch.compile backend.

Shaped like PyTorch's own nvFuser backends were: AOTAutograd traces the joint
forward+backward graph of ATen ops; fusejit's own min-cut partitioner (the
`partition` pass) splits it (`partition`, used as partition_fn); fusejit
compiles the forward and the backward graph (`fw_compiler`, `bw_compiler`).

    import fusejit.torch as fjt
    f = fjt.aot_fusejit(fn, executor="host")          # functorch.compile.aot_function
    m = fjt.aot_fusejit_module(model, executor="host")  # functorch.compile.aot_module

With PyTorch 2.x, importing this module registers torch.compile backends
"fusejit" (executor auto), "fusejit_host" (host), and, like PyTorch's old
nvFuser pair, "nvprims_nvfuser" (auto) and "nvprims_aten" (the aten reference
executor, for debugging) where PyTorch no longer registers those names
themselves ("fusejit_nvprims_nvfuser" / "fusejit_nvprims_aten" always). There,
AOTAutograd's min-cut partitioner (min_cut_rematerialization_partition) splits
the graph and fusejit compiles both halves (see default_partition_fn).
Executors: auto (default), host, nvptx, aten. Tensors must live on the CPU for
host and aten.
"""
import ctypes
import functools
import os
import re
import threading

import torch

from . import Context, FusejitError, _lib
from . import decomp as _decomp
from . import fx as _fx
from . import partition as _part

_lock = threading.Lock()
_ctx = None


def context():
    """The process's fusejit context for the bridge (thread-safe, created once)."""
    global _ctx
    with _lock:
        if _ctx is None:
            _ctx = Context()
            runner = openmp_runner()
            if runner:
                _ctx.set_parallel_runner(runner)
        return _ctx


def openmp_runner():
    """The address of GOMP_parallel in the OpenMP runtime PyTorch's kernels run on
    (ATen's parallel backend OpenMP), else None. The bridge's context runs fusejit's
    host kernels through it, on PyTorch's team of threads: beside a pool of fusejit's
    own, each OpenMP worker spin-waits for a while after PyTorch's parallel ops and
    takes a core from fusejit's threads (the SDPA backward [1,8,512,64] on 2 cores ran
    at 1.4x its time alone)."""
    if "ATen parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return None
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return None
    libs = sorted(p for p in paths if re.match(r"lib(g|i|)omp[^/]*\.so", os.path.basename(p)))
    own = os.path.dirname(os.path.abspath(torch.__file__))
    libs.sort(key=lambda p: not p.startswith((own + os.sep, own + ".libs" + os.sep)))  # torch/lib, torch.libs first
    for path in libs:
        try:
            fn = ctypes.CDLL(path).GOMP_parallel
        except (OSError, AttributeError):
            continue
        return ctypes.cast(fn, ctypes.c_void_p).value
    return None


# torch dtype -> fusejit scalar type (fj_scalar_type)
_FJ_DTYPE = {torch.float64: 0, torch.float32: 1, torch.float16: 2, torch.bfloat16: 3, torch.int64: 4,
             torch.int32: 5, torch.int16: 6, torch.int8: 7, torch.uint8: 8, torch.bool: 9}


def _desc(t, d, keep):
    """Fills fj_tensor d with torch tensor t's data pointer, sizes, strides, dtype and
    device: fusejit reads (or writes) the tensor in place."""
    if t.dtype not in _FJ_DTYPE:
        raise TypeError("fusejit.torch: unsupported dtype %s" % t.dtype)
    d.data = t.data_ptr() if t.numel() else None
    d.dtype = _FJ_DTYPE[t.dtype]
    d.rank = t.dim()
    for k, n in enumerate(t.shape):
        d.sizes[k] = n
    if t.numel() and not t.is_contiguous():
        st = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
        keep.append(st)
        d.strides = ctypes.cast(st, _lib.c_int64_p)
    else:
        d.strides = None
    d.device = 1 if t.device.type == "cuda" else 0
    d.device_index = t.device.index or 0 if t.device.type == "cuda" else 0
    d.flags = 0


_CU_STREAM_LEGACY = 1  # the CUDA driver's handle of the legacy default stream (torch's stream 0)


class TensorCall:
    """Runs a compiled fusejit program on torch tensors in place: the inputs'
    memory is read where it is, the outputs are allocated by torch (out_types:
    (dtype, shape[, strides or None]) each, on `device`) and written by fusejit.
    Returns a list."""

    def __init__(self, prog, out_types, device="cpu", name="fusejit_program", in_shapes=None, size_names=()):
        self.prog, self.out_types, self.device = prog, list(out_types), torch.device(device)
        self._lib = prog.ctx._lib
        self.__name__ = name  # torch.fx names call_function targets
        # size_names: symbols no input dim gives (dynamic shapes: the size an output is
        # sliced back to ...), given as the call's last arguments (ints) and bound by name
        self.size_names = list(size_names)
        self._sizes = _SizeFn(in_shapes or [], self.out_types, self.size_names)
        self._dim_names = (ctypes.c_char_p * max(len(self.size_names), 1))(*[n.encode() for n in self.size_names])
        self._tls = threading.local()  # per thread: descriptors kept from the last call

    def _fill(self, arr, slots, i, t):
        """Descriptor i of arr for tensor t: in full when t's layout differs from the
        last call's in that slot, else only the data pointer (the fixed cost per
        tensor stays a few attribute writes)."""
        key = (t.dtype, t.shape, t.stride(), t.device)
        last = slots[i]
        if last is not None and last[0] == key:
            arr[i].data = t.data_ptr() if last[1] else None
            return
        keep = []
        _desc(t, arr[i], keep)
        slots[i] = (key, t.numel() > 0, keep)

    def _run_options(self):
        opts = getattr(self._tls, "opts", None)
        if opts is None:
            opts = self._tls.opts = _lib.RunOptions()
            self._lib.fj_run_options_init(ctypes.byref(opts))
        return opts

    def _descs(self, name, n):
        tls = self._tls
        arr = getattr(tls, name, None)
        if arr is None or len(arr[1]) != n:
            arr = ((_lib.Tensor * max(n, 1))(), [None] * n)
            setattr(tls, name, arr)
        return arr

    def __call__(self, *args):
        sizes = args[len(args) - len(self.size_names):] if self.size_names else ()
        args = args[:len(args) - len(sizes)]
        n, m = len(args), len(self.out_types)
        ins, islots = self._descs("ins", n)
        keep = []
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                a = torch.as_tensor(a)
                keep.append(a)
            self._fill(ins, islots, i, a)
        outs = [torch.empty(shape, dtype=t[0], device=self.device) if stride is None else
                torch.empty_strided(shape, stride, dtype=t[0], device=self.device)
                for t, (shape, stride) in zip(self.out_types, self._sizes(args, sizes))]
        od, oslots = self._descs("outs", m)
        for i, o in enumerate(outs):
            self._fill(od, oslots, i, o)
        if sizes or self.device.type == "cuda":
            opts = self._run_options()  # per thread: one TensorCall may run on several at once
            if sizes:
                vals = (ctypes.c_int64 * len(sizes))(*[int(v) for v in sizes])
                opts.dim_names, opts.dim_values, opts.ndims = self._dim_names, vals, len(sizes)
            if self.device.type == "cuda":  # queued on the caller's current stream, without blocking
                opts.stream = torch.cuda.current_stream(self.device).cuda_stream or _CU_STREAM_LEGACY
            st = self._lib.fj_program_run_with(self.prog._ptr, ctypes.byref(opts), ins, n, od, m)
        else:
            st = self._lib.fj_program_run(self.prog._ptr, ins, n, od, m)
        for i in range(m):
            if od[i].flags & 1:  # FJ_TENSOR_OWNED: an empty output fusejit allocated itself
                self._lib.fj_tensor_release(ctypes.byref(od[i]))
        self.prog.ctx._check(st)
        return outs


def _region_symbols(region):
    """The names of the symbols in the sizes of a region's values and size arguments."""
    names = set()

    def add(v):
        if isinstance(v, torch.fx.Node):
            v = v.meta.get("val")
        if isinstance(v, getattr(torch, "SymInt", ())):
            names.update(str(x) for x in _fx.sym_expr(v).free_symbols)
        elif isinstance(v, torch.Tensor):
            for d in v.shape:
                add(d)
        elif isinstance(v, (list, tuple)):
            for x in v:
                add(x)
    for n in region:
        add(n.meta.get("val"))
        for a in list(n.args) + list(n.kwargs.values()):
            add(a)
    return names


class _SizeFn:
    """The outputs' sizes and strides of a region for the inputs of one call.
    Static ones are constants; a symbolic one (dynamic shapes: s0*64, s0-1,
    (s0+1)//2) is evaluated from the symbols' values, read off the input dims:
    a dim that is a plain symbol gives it, and a dim that is a sum or a product
    known but for one symbol (s0+1, s1+s0 with s0 known, s0*64) gives that
    symbol, in the order found here. Strides that are symbolic become the dense
    ones."""

    def __init__(self, in_shapes, out_types, size_names=()):
        self.steps = []  # (symbol, input, dim, how, code): how "=", "-" (dim - code), "/" (dim // code)
        self.size_names = list(size_names)  # given by the call (TensorCall.size_names)
        known = set(self.size_names)
        dims = [(i, d, _fx.sym_expr(s)) for i, shape in enumerate(in_shapes) for d, s in enumerate(shape)]
        dims = [x for x in dims if x[2] is not None and not x[2].is_Integer]
        progress = True
        while progress:
            progress = False
            for i, d, e in dims:
                free = {str(x): x for x in e.free_symbols}
                unknown = [x for n, x in free.items() if n not in known]
                if len(unknown) != 1:
                    continue
                x = unknown[0]
                step = None
                if e == x:
                    step = (str(x), i, d, "=", None)
                elif e.is_Add and e.coeff(x) == 1 and x not in (e - x).free_symbols:
                    step = (str(x), i, d, "-", compile(str(e - x), "<size>", "eval"))
                elif e.is_Mul:
                    k, dep = e.as_independent(x, as_Mul=True)
                    if dep == x:
                        step = (str(x), i, d, "/", compile(str(k), "<size>", "eval"))
                if step:
                    self.steps.append(step)
                    known.add(str(x))
                    progress = True
        self.known = known
        self.plan = []
        for t in out_types:
            shape = [int(s) if _fx.sym_expr(s) is None else compile(str(_fx.sym_expr(s)), "<size>", "eval")
                     for s in t[1]]
            stride = t[2] if len(t) > 2 else None
            if stride is not None and any(not isinstance(x, int) for x in stride):
                stride = None
            self.plan.append((shape, stride))
        self.static = all(isinstance(x, int) for shape, _ in self.plan for x in shape)
        for shape, _ in self.plan:
            for x in shape:
                if not isinstance(x, int):
                    missing = [n for n in x.co_names if n not in known]
                    if missing:
                        raise _fx.UnsupportedOp(["an output size of %s, which no input dim gives" %
                                                 ", ".join(missing)])

    def __call__(self, args, sizes=()):
        if self.static:
            return self.plan
        env = dict(zip(self.size_names, sizes))
        for name, i, d, how, code in self.steps:
            v = args[i].shape[d]
            env[name] = v if how == "=" else v - eval(code, {}, env) if how == "-" else v // eval(code, {}, env)
        return [([x if isinstance(x, int) else eval(x, {}, env) for x in shape], stride)
                for shape, stride in self.plan]


def _boxed(fn):
    """AOTAutograd's boxed calling convention: fn(list_of_args)."""
    def call(args):
        r = fn(*args)
        args.clear()
        return r
    call._boxed_call = True
    return call


def _graph_module(nplaceholders, fn, name, outputs):
    """A GraphModule calling fn; it returns a list with fn's result k at each
    position where outputs holds k, and None where it holds None."""
    import operator
    g = torch.fx.Graph()
    ph = [g.placeholder("arg_%d" % i) for i in range(nplaceholders)]
    fn.__name__ = name
    call = g.call_function(fn, tuple(ph))
    g.output([g.call_function(operator.getitem, (call, k)) if k is not None else None for k in outputs])
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    gm._fusejit_compiled = True
    return gm


EXECUTOR_DEVICE = {"host": "cpu", "aten": "cpu", "nvptx": "cuda", "auto": None}


class Report:
    """What fusejit did with one FX graph: the regions it compiled (each a list of
    op names) and the nodes left to PyTorch, each with its reason."""

    def __init__(self, name):
        self.name = name
        self.regions = []      # [[op name, ...], ...]
        self.fallback = []     # [(node name, op name, reason), ...]
        self.counted = 0       # call_function nodes (getitems left out)
        self.fused = 0         # of them, compiled by fusejit

    def __repr__(self):
        return "Report(%s: %d regions, %d/%d ops in fusejit, %d left to PyTorch)" % (
            self.name, len(self.regions), self.fused, self.counted, len(self.fallback))


_reports = threading.local()


def _record(rep):
    sink = getattr(_reports, "sink", None)
    if sink is not None:
        sink.append(rep)


_LINE = re.compile(r":(\d+):\d+: (?:error|warning)")


def compile_graph(gm, example_inputs, executor="auto", name="main", state=None):
    """Compiles an FX graph of ATen ops: the regions fusejit supports each become one
    fusejit program; every other node runs as its ATen call in PyTorch. Returns a
    callable(*tensors) -> list (None kept where the graph returns None). state: a
    dict shared by one torch.compile graph's forward and backward compiles (which
    attention dropout masks fusejit drew in the forward)."""
    ctx = context()
    _fx.ensure_meta(gm, example_inputs)
    _decomp.seed_dropouts(gm)
    _decomp.seed_attention(gm, state)
    conv = _fx.Converter(ctx)
    device = _device(executor)
    reasons = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and not _part.is_getitem(n):
            r = conv.support(gm, n, device)
            if r is not None:
                reasons[n] = r
    rep = Report(name)
    compiled = {}

    def reported(n):  # the graph's tensor ops: not size arithmetic, not the bridge's helpers (a dropout's seed)
        return (n.op == "call_function" and not _part.is_getitem(n) and not n.meta.get("fusejit_aux")
                and not _fx.is_size_node(n))

    def make_call(region, inputs, outputs):
        return compiled[id(region[0])]

    # the graph's size inputs that are plain symbols (AOTAutograd's backward takes them):
    # a region whose inputs do not give a symbol it needs takes it from one of these
    sym_nodes = {}
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if n.op == "placeholder" and isinstance(v, getattr(torch, "SymInt", ())) and _fx.sym_expr(v).is_Symbol:
            sym_nodes.setdefault(str(_fx.sym_expr(v)), n)
    progs = {}  # text -> program: a retry recompiles only the regions that changed
    for attempt in range(64):
        regions = _part.propose(gm.graph, lambda n: n not in reasons)
        split = _decomp.attention_pairs_split(gm.graph, regions)
        if split:
            reasons.update(split)
            continue
        compiled.clear()
        failed = False
        for k, region in enumerate(regions):
            inputs, outputs = _part.boundary(region, gm.graph)
            try:
                text = conv.convert(gm, name="%s_r%d" % (name, k), params=inputs, results=outputs, nodes=region)
                prog = progs.get(text) or ctx.compile(text, executor=executor, threads=_threads())
                progs[text] = prog
                # outputs take the strides PyTorch gave them (a view after the region may rely on them)
                types = [_fx.node_type(gm, o) + (_fx.meta_stride(o),) for o in outputs]
                in_shapes = [_fx.node_type(gm, i)[1] for i in inputs]
                given = _SizeFn(in_shapes, []).known
                size_nodes = [sym_nodes[x] for x in sorted(_region_symbols(region) - given) if x in sym_nodes]
                call = TensorCall(prog, types, device, "fusejit_%s_r%d" % (name, k), in_shapes,
                                  [str(_fx.sym_expr(x.meta["val"])) for x in size_nodes])
                call.size_inputs = size_nodes
                compiled[id(region[0])] = call
            except _fx.UnsupportedOp as e:  # a node the converter refused after all
                bad = [n for n in region if n.op == "call_function" and not _part.is_getitem(n)
                       and conv.support(gm, n, device) is not None] or region
                for n in bad:
                    reasons[n] = "; ".join(e.ops)
                failed = True
                break
            except FusejitError as e:
                m = _LINE.search(str(e))
                line = int(m.group(1)) if m else 0
                bad = conv.lines[line - 2] if 2 <= line < len(conv.lines) + 2 else None
                msg = str(e).split(": error: ", 1)[-1]
                for n in ([bad] if bad is not None else [n for n in region if not _part.is_getitem(n)]):
                    reasons[n] = "fusejit refused it: " + msg
                failed = True
                break
        if not failed:
            break
    else:  # every retry refused another node: leave the graph to PyTorch
        for n in gm.graph.nodes:
            reasons.setdefault(n, "fusejit refused 64 of this graph's nodes; the rest stays in PyTorch too")
        regions = []
    if name == "fw":
        _decomp.record_attention_seeds(gm.graph, regions, state)
    new = _part.rebuild(gm, regions, make_call)
    for region in regions:
        rep.regions.append([_part.op_name(n) for n in region if reported(n)])
    for n in gm.graph.nodes:
        rep.counted += reported(n)
    rep.fused = sum(len(r) for r in rep.regions)
    in_region = {n for r in regions for n in r}
    for n in gm.graph.nodes:
        if reported(n) and n not in in_region:
            why = reasons.get(n, "a region of views only (a kernel would gain nothing)")
            rep.fallback.append((n.name, _part.op_name(n), why))
    _record(rep)
    out = [n for n in new.graph.nodes if n.op == "output"][0].args[0]
    single = not isinstance(out, (list, tuple))
    run = new.forward

    def call(*args):
        r = run(*args)
        return [r] if single else list(r)
    call.report = rep
    call.graph_module = new
    return call


def _threads():
    """fusejit's host threads follow torch.get_num_threads(), so that the two never
    oversubscribe the cores (FUSEJIT_THREADS, where set, sizes fusejit's pool)."""
    return max(1, torch.get_num_threads())


def _device(executor):
    """The torch device an executor's tensors live on ("auto": the one it picks here)."""
    return EXECUTOR_DEVICE.get(executor) or ("cuda" if _auto_is_nvptx() else "cpu")


@functools.lru_cache(maxsize=None)
def _auto_is_nvptx():
    """Whether executor "auto" picks nvptx here (a CUDA driver and a GPU)."""
    try:
        return context().compile("graph @p(%x: f32[1]) {\n  return %x\n}\n", executor="auto").executor == "nvptx"
    except Exception:
        return False


def fw_compiler(gm, example_inputs, executor="auto", state=None):
    if getattr(gm, "_fusejit_compiled", False):
        return _boxed(gm)
    return _boxed(compile_graph(gm, example_inputs, executor, "fw", state))


def bw_compiler(gm, example_inputs, executor="auto", state=None):
    if getattr(gm, "_fusejit_compiled", False):
        return _boxed(gm)
    return _boxed(compile_graph(gm, example_inputs, executor, "bw", state))


TRAIN_PIPELINE = "verify,decompose,canonicalize,recompute,partition{mode=mincut}"
# The host's: an attention's forward saves its logsumexp instead of its weights,
# so that its backward is one kernel (docs/IR.md, partition{attention=true}).
TRAIN_PIPELINE_HOST = "verify,decompose,canonicalize,recompute,partition{mode=mincut,attention=true}"


def partition(joint_gm, joint_inputs, executor="auto", num_fwd_outputs=None, **kwargs):
    """fusejit's min-cut partitioner as AOTAutograd's partition_fn: converts the joint
    graph to @f.joint, runs fusejit's `partition` pass, compiles @f.fw and @f.bw, and
    returns forward and backward GraphModules that call them. When fusejit cannot
    take the whole joint graph (an op it lacks), AOTAutograd's own partitioner
    splits it instead, and fw_compiler/bw_compiler compile each half's supported
    regions with the rest left to PyTorch."""
    primals, second = joint_inputs
    added = _fx.ensure_meta(joint_gm, list(primals) + list(second))
    try:
        return _partition_whole(joint_gm, joint_inputs, executor, num_fwd_outputs)
    except (_fx.UnsupportedOp, FusejitError):
        _fx.drop_meta(added)
    from functorch.compile import default_partition
    try:
        from functorch.compile import min_cut_rematerialization_partition as mincut
        import networkx  # noqa: F401  (the min-cut partitioner needs it)
    except ImportError:
        mincut = default_partition
    kw = {"num_fwd_outputs": num_fwd_outputs} if num_fwd_outputs is not None else {}
    return mincut(joint_gm, joint_inputs, **kw)


def _out_types(prog):
    """(torch dtype, shape) of each output of a compiled program with static sizes."""
    back = {v: k for k, v in _fx.DTYPES.items()}
    out = []
    for _, ty in prog.info["output"]:
        dt, _, dims = ty.partition("[")
        dims = dims.rstrip("]")
        out.append((back[dt], tuple(int(d) for d in dims.split(",")) if dims else ()))
    return out


_NAME = r"[A-Za-z0-9_.]+"


def _saved_inputs_dropped(text, graph, nout, nparams):
    """The min-cut partition saves inputs for the backward (it recomputes from them):
    @graph returns them after its nout outputs, and a compiled program would copy each
    into an output tensor. Returns the module's text with those results dropped from
    @graph's return and, per original result, the index of the parameter it is (None
    for a computed one); (None, None) when there is nothing to drop. The forward's call
    puts the inputs themselves back, as AOTAutograd's own partitioner does."""
    lines = text.split("\n")
    head = next((i for i, l in enumerate(lines) if l.startswith("graph @" + graph + "(")), None)
    ret = None
    for i in range(head + 1, len(lines)) if head is not None else ():
        if lines[i] == "}":  # the graph's end: no return line
            break
        if lines[i].startswith("  return "):
            ret = i
            break
    if ret is None:
        return None, None
    params = re.findall(r"%(" + _NAME + r"):", lines[head])
    results = [r.strip()[1:] for r in lines[ret][len("  return "):].split(",")]
    if len(params) != nparams:
        return None, None
    where = [params.index(r) if i >= nout and r in params else None for i, r in enumerate(results)]
    kept = [r for r, p in zip(results, where) if p is None]
    if not kept or len(kept) == len(results):
        return None, None
    lines[ret] = "  return " + ", ".join("%" + r for r in kept)
    return "\n".join(lines), where


def _partition_whole(joint_gm, joint_inputs, executor, num_fwd_outputs):
    ctx = context()
    primals, second = joint_inputs
    nprim = len(primals)
    device = _device(executor)
    places = [n for n in joint_gm.graph.nodes if n.op == "placeholder"]
    out = [n for n in joint_gm.graph.nodes if n.op == "output"][0].args[0]
    outs = list(out)
    K = num_fwd_outputs if num_fwd_outputs is not None else len(second)
    fw_outs, grads = outs[:K], outs[K:]
    tangents = places[nprim:]
    ntan_all = len(tangents)

    def is_float(n):
        t = _fx.meta_type(n) if isinstance(n, torch.fx.Node) else None
        return t is not None and t[0].is_floating_point

    float_out = [i for i in range(K) if is_float(fw_outs[i])]
    if len(float_out) > len(tangents):
        raise _fx.UnsupportedOp(["a joint graph with fewer tangents than floating-point outputs"])
    params = places[:nprim] + [tangents[i] for i in float_out]
    grad_nodes = [g for g in grads if g is not None]
    text = _fx.Converter(ctx).convert(joint_gm, name="f.joint", params=params, results=fw_outs + grad_nodes,
                                      graph_attrs={"num_fwd_outputs": K})
    m = ctx.parse(text, "aot_joint.fj")
    m.run_pipeline(TRAIN_PIPELINE_HOST if executor == "host" or (executor == "auto" and device == "cpu")
                   else TRAIN_PIPELINE)
    fw_text, where = _saved_inputs_dropped(str(m), "f.fw", K, nprim)
    m_fw = ctx.parse(fw_text, "aot_joint.fj") if fw_text is not None else m
    fw = ctx.compile(m_fw, executor=executor, graph="f.fw", pipeline="verify", threads=_threads())
    bw = ctx.compile(m, executor=executor, graph="f.bw", pipeline="verify", threads=_threads())
    where = where or [None] * len(fw.info["output"])
    nsaved = len(where) - K
    fw_call = TensorCall(fw, _out_types(fw), device)
    pos, k = [], 0
    for g in grads:
        pos.append(k if g is not None else None)
        k += g is not None

    def fusejit_fw(*args):
        res = iter(fw_call(*args))
        return tuple(args[p] if p is not None else next(res) for p in where)

    bw_call = TensorCall(bw, _out_types(bw), device)

    def fusejit_bw(*args):
        saved, tans = args[:nsaved], args[nsaved:]
        return bw_call(*saved, *[tans[i] for i in float_out])

    fw_gm = _graph_module(nprim, fusejit_fw, "fusejit_fw", list(range(K + nsaved)))
    bw_gm = _graph_module(nsaved + ntan_all, fusejit_bw, "fusejit_bw", pos)
    fw_gm._fusejit_text = bw_gm._fusejit_text = str(m)
    rep = Report("joint (fusejit's min-cut partition)")
    ops = [_part.op_name(n) for n in joint_gm.graph.nodes if n.op == "call_function" and not _part.is_getitem(n)]
    rep.regions, rep.counted, rep.fused = [ops], len(ops), len(ops)
    _record(rep)
    return fw_gm, bw_gm


TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def default_partition_fn(executor):
    """fusejit's min-cut partitioner on PyTorch 1.x. PyTorch 2.x's AOTAutograd wants
    FakeTensor metadata on the partitioned graphs' nodes, which the fusejit-compiled
    halves do not carry yet: there, its own min-cut partitioner splits the graph and
    fusejit compiles both halves."""
    if TORCH2:
        from functorch.compile import min_cut_rematerialization_partition
        return min_cut_rematerialization_partition
    return functools.partial(partition, executor=executor)


def aot_fusejit(fn, executor="auto", partition_fn=None):
    """functorch.compile.aot_function with fusejit compiling the forward and the
    backward, and fusejit's min-cut partitioner (see default_partition_fn)."""
    from functorch.compile import aot_function
    return aot_function(fn, fw_compiler=functools.partial(fw_compiler, executor=executor),
                        bw_compiler=functools.partial(bw_compiler, executor=executor),
                        partition_fn=partition_fn or default_partition_fn(executor))


def aot_fusejit_module(mod, executor="auto", partition_fn=None):
    """functorch.compile.aot_module with fusejit (see aot_fusejit)."""
    from functorch.compile import aot_module
    return aot_module(mod, fw_compiler=functools.partial(fw_compiler, executor=executor),
                      bw_compiler=functools.partial(bw_compiler, executor=executor),
                      partition_fn=partition_fn or default_partition_fn(executor))


# ---- torch.compile (PyTorch 2.x) ----

def _make_backend(executor):
    def backend(gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        state = {}  # this graph's forward tells its backward which dropout masks fusejit drew
        return aot_autograd(fw_compiler=functools.partial(fw_compiler, executor=executor, state=state),
                            bw_compiler=functools.partial(bw_compiler, executor=executor, state=state),
                            partition_fn=default_partition_fn(executor))(gm, example_inputs)
    return backend


# name -> executor. The nvprims_* names are PyTorch's old nvFuser backends'
# (gone from PyTorch 2.x's registry); they are registered only where free.
BACKENDS = {"fusejit": "auto", "fusejit_host": "host", "nvprims_nvfuser": "auto", "nvprims_aten": "aten",
            "fusejit_nvprims_nvfuser": "auto", "fusejit_nvprims_aten": "aten"}


def register_backends():
    """Registers the torch.compile backends (PyTorch 2.x); returns their names, or [] when
    this PyTorch has no dynamo backend registry."""
    try:
        from torch._dynamo import register_backend
        from torch._dynamo.backends.registry import list_backends
    except Exception:
        return []
    names = []
    taken = set(list_backends(exclude_tags=()))
    for name, ex in BACKENDS.items():
        if name in taken:
            continue  # PyTorch's own, or registered by an earlier import
        try:
            register_backend(name=name)(_make_backend(ex))
        except Exception:
            continue
        names.append(name)
    return names


REGISTERED = register_backends()


# ---- explain ----

class Explanation:
    """fusejit.torch.explain's result: one Report per FX graph fusejit was given
    (forward and backward graphs, and each graph break's), with totals."""

    def __init__(self, reports):
        self.reports = list(reports)

    @property
    def regions(self):
        return [r for rep in self.reports for r in rep.regions]

    @property
    def fallback(self):
        return [f for rep in self.reports for f in rep.fallback]

    def counts(self, exclude=()):
        """(ops in fusejit, ops in all) over every graph's call_function nodes, leaving out
        the ops whose name (aten.convolution ...) starts with one of `exclude`."""
        def kept(name):
            return not any(name.startswith(e) for e in exclude)
        fused = sum(1 for r in self.regions for op in r if kept(op))
        left = sum(1 for _, op, _ in self.fallback if kept(op))
        return fused, fused + left

    def __str__(self):
        fused, total = self.counts()
        lines = ["fusejit: %d graphs, %d regions; %d of %d ops in fusejit, %d left to PyTorch" % (
            len(self.reports), len(self.regions), fused, total, total - fused)]
        for rep in self.reports:
            lines.append("graph %s: %d regions, %d/%d ops in fusejit" % (rep.name, len(rep.regions), rep.fused,
                                                                       rep.counted))
            for k, r in enumerate(rep.regions):
                lines.append("  region %d (%d ops): %s" % (k, len(r), ", ".join(r)))
            for node, op, why in rep.fallback:
                lines.append("  in PyTorch: %s (%s): %s" % (node, op, why))
        return "\n".join(lines)

    __repr__ = __str__


def output_tensors(out):
    """The tensors of a model's output: a tensor, a list/tuple/dict of them, or a
    ModelOutput (transformers)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in output_tensors(o)]
    return []


def explain(fn, *inputs, executor="host", dynamic=False, **kwinputs):
    """Compiles fn (a function or an nn.Module) with fusejit as torch.compile (PyTorch
    2.x) or aot_function (1.x) would, runs it once on the inputs, and its backward
    when an output needs a gradient (without touching any .grad), and returns an
    Explanation: the regions fusejit compiled, the ops in each, and the ops left to
    PyTorch with the reason for each (like torch._dynamo.explain). dynamic=True
    (PyTorch 2.x): as torch.compile(..., dynamic=True), with symbolic sizes."""
    sink = []
    old = getattr(_reports, "sink", None)
    _reports.sink = sink
    try:
        if TORCH2:
            compiled = torch.compile(fn, backend=_make_backend(executor), dynamic=dynamic)
        elif isinstance(fn, torch.nn.Module):
            compiled = aot_fusejit_module(fn, executor=executor)
        else:
            compiled = aot_fusejit(fn, executor=executor)
        outs = [o for o in output_tensors(compiled(*inputs, **kwinputs)) if o.requires_grad]
        leaves = [t for t in list(inputs) + (list(fn.parameters()) if isinstance(fn, torch.nn.Module) else [])
                  if isinstance(t, torch.Tensor) and t.requires_grad]
        if outs and leaves:
            torch.autograd.grad(outs, leaves, [torch.ones_like(o) for o in outs], allow_unused=True)
    finally:
        _reports.sink = old
    return Explanation(sink)
