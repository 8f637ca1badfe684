"""fusejit: a thin ctypes binding of fusejit's C API (include/fusejit/fusejit.h).

    import numpy as np, fusejit
    ctx = fusejit.Context()
    prog = ctx.compile("graph @main(%x: f32[N]) { %y = aten.exp(%x) return %y }")
    (y,) = prog.run(np.ones(4, np.float32))

NumPy arrays go in (any strides; fusejit copies non-dense ones) and come out
(fusejit allocates the outputs; they are copied into NumPy arrays and released).
Training programs (training=True) run forward() and backward(). Errors raise
FusejitError with the library's message. The PyTorch bridge is fusejit.torch.
"""
import ctypes
import threading

import numpy as np

from . import _lib

__all__ = ["Context", "Module", "Program", "Saved", "FusejitError", "version", "EXECUTORS"]

_L = None


def lib():
    global _L
    if _L is None:
        _L = _lib.load()
    return _L


def version():
    return lib().fj_version().decode()


EXECUTORS = {"auto": 0, "host": 1, "aten": 2, "nvptx": 3}
_EXEC_NAMES = {v: k for k, v in EXECUTORS.items()}
ROLES = {"input": 0, "output": 1, "saved": 2, "tangent": 3, "gradient": 4}

_NP = [np.float64, np.float32, np.float16, None, np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_]
_FJ = {np.dtype(t): i for i, t in enumerate(_NP) if t is not None}
DTYPE_NAMES = ["f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool"]


class FusejitError(RuntimeError):
    def __init__(self, status, message):
        self.status = status
        super().__init__(message)


class _Owner:
    """A C object that others made from it (a context's modules and programs, a
    program's saved values) need until they are destroyed: it is destroyed by the
    last of __del__ and its children's release, whatever order Python finalizes
    them in (a reference cycle's finalizers run in any order, PEP 442, as at exit
    after torch's compiled functions)."""
    _nchild = 0
    _closed = False

    def _retain(self):
        with self._lock:
            self._nchild += 1

    def _release(self):
        with self._lock:
            self._nchild -= 1
            last = self._closed and self._nchild == 0
        if last:
            self._free()

    def __del__(self):
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            self._closed = True
            last = self._nchild == 0
        if last:
            self._free()


class Context(_Owner):
    """A fusejit context: allocator, diagnostics, kernel cache. Thread-safe."""

    def __init__(self, cache_dir=None, cache_max_bytes=0):
        self._lock = threading.Lock()
        self._lib = lib()
        self._ptr = self._lib.fj_context_create(None, None)
        if not self._ptr:
            raise MemoryError("fusejit: could not create a context")
        if cache_dir is not None:
            self._check(self._lib.fj_context_set_cache(self._ptr, cache_dir.encode(), cache_max_bytes))

    def _free(self):
        if getattr(self, "_ptr", None):
            self._lib.fj_context_destroy(self._ptr)
            self._ptr = None

    def _check(self, st):
        if st != 0:
            name = self._lib.fj_status_name(st).decode()
            msg = self._lib.fj_context_error(self._ptr).decode(errors="replace")
            raise FusejitError(st, "%s: %s" % (name, msg or "failed"))

    def error(self):
        return self._lib.fj_context_error(self._ptr).decode(errors="replace")

    def set_parallel_runner(self, address):
        """Host kernels run on an embedder's threads: address (an int) is a C function
        with GOMP_parallel's signature, fj_context_set_parallel_runner's runner; None:
        back to fusejit's own pool. Set it before running programs."""
        self._lib.fj_context_set_parallel_runner(self._ptr, address)

    def parse(self, text, name="<python>"):
        m = ctypes.c_void_p()
        data = text.encode() if isinstance(text, str) else bytes(text)
        self._check(self._lib.fj_module_parse(self._ptr, data, len(data), name.encode(), ctypes.byref(m)))
        return Module(self, m.value)

    def parse_file(self, path):
        m = ctypes.c_void_p()
        self._check(self._lib.fj_module_parse_file(self._ptr, str(path).encode(), ctypes.byref(m)))
        return Module(self, m.value)

    def compile(self, module, executor="auto", graph=None, pipeline=None, target=None, training=False,
                threads=0):
        """threads: the host executor runs on at most this many threads (0: all cores)."""
        if isinstance(module, str):
            module = self.parse(module)
        o = _lib.CompileOptions()
        self._lib.fj_compile_options_init(ctypes.byref(o))
        if executor not in EXECUTORS:
            raise ValueError("executor must be one of %s" % ", ".join(EXECUTORS))
        o.executor = EXECUTORS[executor]
        o.graph = graph.encode() if graph else None
        o.pipeline = pipeline.encode() if pipeline is not None else None
        o.target = target.encode() if target else None
        o.training = 1 if training else 0
        o.threads = int(threads)
        p = ctypes.c_void_p()
        self._check(self._lib.fj_compile(self._ptr, module._ptr, ctypes.byref(o), ctypes.byref(p)))
        return Program(self, p.value, module)

    def op_schema(self, op):
        """{'operands': [...], 'results': [...], 'attributes': [...]} for an op, or None when unknown."""
        s = ctypes.c_void_p()
        if self._lib.fj_op_schema(self._ptr, op.encode(), ctypes.byref(s)) != 0:
            self._lib.fj_context_clear_diagnostics(self._ptr)
            return None
        text = ctypes.string_at(s.value).decode()
        self._lib.fj_string_free(self._ptr, s.value)
        out = {}
        for line in text.splitlines():
            key, _, rest = line.partition(":")
            out[key.strip()] = rest.split()
        return out

    def cache_stats(self):
        cs = _lib.CacheStats()
        self._lib.fj_context_cache_stats(self._ptr, ctypes.byref(cs))
        return {n: getattr(cs, n) for n, _ in cs._fields_}


class Module:
    def __init__(self, ctx, ptr):
        self.ctx, self._ptr = ctx, ptr
        ctx._retain()

    def __del__(self):
        if getattr(self, "_ptr", None):
            self.ctx._lib.fj_module_destroy(self._ptr)
            self._ptr = None
            self.ctx._release()

    def __str__(self):
        s, n = ctypes.c_char_p(), ctypes.c_size_t()
        self.ctx._check(self.ctx._lib.fj_module_print(self.ctx._ptr, self._ptr, ctypes.byref(s), ctypes.byref(n)))
        text = ctypes.string_at(s, n.value).decode()
        self.ctx._lib.fj_string_free(self.ctx._ptr, s)
        return text

    def run_pipeline(self, pipeline):
        self.ctx._check(self.ctx._lib.fj_module_run_pipeline(self.ctx._ptr, self._ptr, pipeline.encode()))
        return self

    def graph_names(self):
        L = self.ctx._lib
        return [L.fj_module_graph_name(self._ptr, i).decode() for i in range(L.fj_module_graph_count(self._ptr))]


def _in_desc(arr, keep):
    a = np.asarray(arr)
    if a.dtype not in _FJ:
        raise TypeError("fusejit: unsupported dtype %s" % a.dtype)
    if a.ndim > _lib.MAX_DIMS:
        raise ValueError("fusejit: at most %d dims" % _lib.MAX_DIMS)
    t = _lib.Tensor()
    t.data = a.ctypes.data if a.size else None
    t.dtype = _FJ[a.dtype]
    t.rank = a.ndim
    for k, s in enumerate(a.shape):
        t.sizes[k] = s
    if a.size and not a.flags.c_contiguous:
        if any(s % a.itemsize for s in a.strides):
            a = np.ascontiguousarray(a)
            t.data = a.ctypes.data
        else:
            st = (ctypes.c_int64 * max(a.ndim, 1))(*[s // a.itemsize for s in a.strides])
            keep.append(st)
            t.strides = ctypes.cast(st, _lib.c_int64_p)
    keep.append(a)
    return t


def _take_owned(L, t):
    """A NumPy copy of an fusejit-allocated output, which is then released."""
    shape = tuple(t.sizes[k] for k in range(t.rank))
    dt = _NP[t.dtype]
    if dt is None:
        dt = np.uint16  # bf16 as its bit pattern
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
    if n:
        buf = (ctypes.c_char * n).from_address(t.data)
        arr = np.frombuffer(buf, dtype=dt).reshape(shape).copy()
    else:
        arr = np.zeros(shape, dtype=dt)
    L.fj_tensor_release(ctypes.byref(t))
    return arr


class Program(_Owner):
    """A compiled graph. run() may be called from several threads at once."""

    def __init__(self, ctx, ptr, module=None):
        self._lock = threading.Lock()
        self.ctx, self._ptr = ctx, ptr
        ctx._retain()
        L = ctx._lib
        self.executor = _EXEC_NAMES.get(L.fj_program_executor(ptr), "?")
        self.info = {}
        for role, r in ROLES.items():
            vals = []
            for i in range(L.fj_program_count(ptr, r)):
                vi = _lib.ValueInfo()
                ctx._check(L.fj_program_info(ptr, r, i, ctypes.byref(vi)))
                vals.append((vi.name.decode(), vi.type.decode()))
            self.info[role] = vals

    def _free(self):
        if getattr(self, "_ptr", None):
            self.ctx._lib.fj_program_destroy(self._ptr)
            self._ptr = None
            self.ctx._release()

    def _inputs(self, arrays, role="input"):
        keep = []
        n = len(arrays)
        arr = (_lib.Tensor * max(n, 1))()
        for i, a in enumerate(arrays):
            arr[i] = _in_desc(a, keep)
        return arr, n, keep

    def _outputs(self, n):
        return (_lib.Tensor * max(n, 1))()

    def run(self, *inputs):
        L = self.ctx._lib
        ins, n, keep = self._inputs(inputs)
        nout = len(self.info["output"])
        outs = self._outputs(nout)
        self.ctx._check(L.fj_program_run(self._ptr, ins, n, outs, nout))
        return [_take_owned(L, outs[i]) for i in range(nout)]

    def forward(self, *inputs):
        """Training programs: (outputs, Saved)."""
        L = self.ctx._lib
        ins, n, keep = self._inputs(inputs)
        nout = len(self.info["output"])
        outs = self._outputs(nout)
        s = ctypes.c_void_p()
        self.ctx._check(L.fj_program_forward(self._ptr, ins, n, outs, nout, ctypes.byref(s)))
        return [_take_owned(L, outs[i]) for i in range(nout)], Saved(self, s.value)

    def backward(self, saved, *tangents):
        """Training programs: the gradients (one per self.info['gradient'])."""
        L = self.ctx._lib
        ins, n, keep = self._inputs(tangents)
        ng = len(self.info["gradient"])
        outs = self._outputs(ng)
        self.ctx._check(L.fj_program_backward(self._ptr, saved._ptr, ins, n, outs, ng))
        return [_take_owned(L, outs[i]) for i in range(ng)]


class Saved:
    """The values a forward run saved for the backward."""

    def __init__(self, prog, ptr):
        self.prog, self._ptr = prog, ptr
        prog._retain()

    def __del__(self):
        if getattr(self, "_ptr", None):
            self.prog.ctx._lib.fj_saved_destroy(self._ptr)
            self._ptr = None
            self.prog._release()

    def __len__(self):
        return self.prog.ctx._lib.fj_saved_count(self._ptr)

    @property
    def nbytes(self):
        return self.prog.ctx._lib.fj_saved_bytes(self._ptr)

    def info(self):
        L = self.prog.ctx._lib
        out = []
        for i in range(len(self)):
            vi = _lib.ValueInfo()
            self.prog.ctx._check(L.fj_saved_info(self._ptr, i, ctypes.byref(vi), None))
            out.append((vi.name.decode(), tuple(vi.sizes[k] for k in range(vi.rank)), vi.bytes))
        return out
