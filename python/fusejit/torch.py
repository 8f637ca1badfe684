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
import functools
import threading

import numpy as np
import torch

from . import Context
from . import fx as _fx

_lock = threading.Lock()
_ctx = None


def context():
    """The process's fusejit context for the bridge (thread-safe, created once)."""
    global _ctx
    with _lock:
        if _ctx is None:
            _ctx = Context()
        return _ctx


def _to_numpy(t):
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        raise TypeError("fusejit.torch: bf16 tensors are not supported by the NumPy bridge")
    return t.numpy()


def _boxed(fn):
    """AOTAutograd's boxed calling convention: fn(list_of_args)."""
    def call(args):
        r = fn(*args)
        args.clear()
        return r
    call._boxed_call = True
    return call


class FusejitCall:
    """Runs a fusejit program on torch tensors; returns a list of tensors (None where
    `none_at` says an output is absent)."""

    def __init__(self, prog, nouts=None, positions=None):
        self.prog = prog
        self.positions = positions  # out index -> program output index, or None
        self.nouts = nouts

    def __call__(self, *args):
        outs = self.prog.run(*[_to_numpy(a) for a in args])
        ts = [torch.from_numpy(o) for o in outs]
        if self.positions is None:
            return ts
        return [ts[p] if p is not None else None for p in self.positions]


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


def compile_graph(gm, example_inputs, executor="auto", name="main"):
    """Compiles an FX graph of ATen ops into a callable(*tensors) -> list (None kept)."""
    ctx = context()
    _fx.ensure_meta(gm, example_inputs)
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    keep = [o for o in outs if o is not None]
    positions, k = [], 0
    for o in outs:
        positions.append(k if o is not None else None)
        k += o is not None
    text = _fx.Converter(ctx).convert(gm, name=name, results=keep)
    prog = ctx.compile(text, executor=executor)
    return FusejitCall(prog, positions=positions)


def fw_compiler(gm, example_inputs, executor="auto"):
    if getattr(gm, "_fusejit_compiled", False):
        return _boxed(gm)
    return _boxed(compile_graph(gm, example_inputs, executor, "fw"))


bw_compiler = fw_compiler


TRAIN_PIPELINE = "verify,decompose,canonicalize,recompute,partition{mode=mincut}"


def partition(joint_gm, joint_inputs, executor="auto", num_fwd_outputs=None, **kwargs):
    """fusejit's min-cut partitioner as AOTAutograd's partition_fn: converts the joint
    graph to @f.joint, runs fusejit's `partition` pass, compiles @f.fw and @f.bw, and
    returns forward and backward GraphModules that call them."""
    ctx = context()
    primals, second = joint_inputs
    nprim = len(primals)
    _fx.ensure_meta(joint_gm, list(primals) + list(second))
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
    m.run_pipeline(TRAIN_PIPELINE)
    fw = ctx.compile(m, executor=executor, graph="f.fw", pipeline="verify")
    bw = ctx.compile(m, executor=executor, graph="f.bw", pipeline="verify")
    nsaved = len(fw.info["output"]) - K
    fw_call = FusejitCall(fw)
    pos, k = [], 0
    for g in grads:
        pos.append(k if g is not None else None)
        k += g is not None

    def fusejit_fw(*args):
        return tuple(fw_call(*args))

    bw_call = FusejitCall(bw)

    def fusejit_bw(*args):
        saved, tans = args[:nsaved], args[nsaved:]
        return bw_call(*saved, *[tans[i] for i in float_out])

    fw_gm = _graph_module(nprim, fusejit_fw, "fusejit_fw", list(range(K + nsaved)))
    bw_gm = _graph_module(nsaved + ntan_all, fusejit_bw, "fusejit_bw", pos)
    fw_gm._fusejit_text = bw_gm._fusejit_text = str(m)
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
        return aot_autograd(fw_compiler=functools.partial(fw_compiler, executor=executor),
                            bw_compiler=functools.partial(bw_compiler, executor=executor),
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
