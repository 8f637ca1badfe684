"""Loading libfusejit.so and declaring the C API (include/fusejit/fusejit.h) for ctypes.

The library is found, in order, at $FUSEJIT_LIB (a file), next to this package
(fusejit/libfusejit.so), in the build directories of a source checkout
(../build*/libfusejit.so from python/), then wherever the dynamic loader finds
"fusejit"."""
import ctypes
import ctypes.util
import glob
import os

MAX_DIMS = 8

c_int64_p = ctypes.POINTER(ctypes.c_int64)


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
        ("sizes", ctypes.c_int64 * MAX_DIMS),
        ("strides", c_int64_p),
        ("device", ctypes.c_int),
        ("device_index", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


class CompileOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("executor", ctypes.c_int),
        ("graph", ctypes.c_char_p),
        ("pipeline", ctypes.c_char_p),
        ("target", ctypes.c_char_p),
        ("training", ctypes.c_int),
        ("threads", ctypes.c_int),
    ]


class ValueInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("type", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
        ("sizes", ctypes.c_int64 * MAX_DIMS),
        ("bytes", ctypes.c_size_t),
    ]


class RunOptions(ctypes.Structure):
    """fj_run_options (initialise with fj_run_options_init)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dim_names", ctypes.POINTER(ctypes.c_char_p)),
        ("dim_values", c_int64_p),
        ("ndims", ctypes.c_size_t),
        ("origins", ctypes.POINTER(ctypes.c_char_p)),
        ("stream", ctypes.c_void_p),
        ("saved_on_device", ctypes.c_int),
        ("saved_in_place", ctypes.c_int),
    ]


class CacheStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "kernels_compiled", "kernels_loaded", "memory_hits", "disk_hits", "disk_misses",
        "disk_corrupt", "disk_stores", "disk_evictions")]


def _candidates():
    env = os.environ.get("FUSEJIT_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libfusejit.so")
    root = os.path.dirname(os.path.dirname(here))
    yield os.path.join(root, "build", "libfusejit.so")
    for d in sorted(glob.glob(os.path.join(root, "build?*", "libfusejit.so"))):
        yield d
    found = ctypes.util.find_library("fusejit")
    if found:
        yield found


def load():
    errors = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append("%s: %s" % (path, e))
            continue
        try:
            _declare(lib)
        except AttributeError as e:  # an older library without this API
            errors.append("%s: %s" % (path, e))
            continue
        lib._fusejit_path = path
        return lib
    raise OSError("fusejit: libfusejit.so not found (set FUSEJIT_LIB to its path, or build the "
                  "library in ./build); tried: " + ("; ".join(errors) or "nothing found"))


def _declare(lib):
    vp, sz, i32, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p
    pp = ctypes.POINTER(ctypes.c_void_p)
    T = ctypes.POINTER(Tensor)
    sig = {
        "fj_version": (cp, []),
        "fj_version_number": (i32, []),
        "fj_status_name": (cp, [i32]),
        "fj_context_create": (vp, [vp, vp]),
        "fj_context_destroy": (None, [vp]),
        "fj_context_error": (cp, [vp]),
        "fj_context_clear_diagnostics": (None, [vp]),
        "fj_context_set_cache": (i32, [vp, cp, ctypes.c_uint64]),
        "fj_context_cache_stats": (None, [vp, ctypes.POINTER(CacheStats)]),
        "fj_context_set_parallel_runner": (None, [vp, vp]),
        "fj_module_parse": (i32, [vp, cp, sz, cp, pp]),
        "fj_module_parse_file": (i32, [vp, cp, pp]),
        "fj_module_destroy": (None, [vp]),
        "fj_module_print": (i32, [vp, vp, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(sz)]),
        "fj_module_run_pipeline": (i32, [vp, vp, cp]),
        "fj_module_graph_count": (sz, [vp]),
        "fj_module_graph_name": (cp, [vp, sz]),
        "fj_op_schema": (i32, [vp, cp, ctypes.POINTER(ctypes.c_void_p)]),
        "fj_string_free": (None, [vp, vp]),
        "fj_compile_options_init": (None, [ctypes.POINTER(CompileOptions)]),
        "fj_compile": (i32, [vp, vp, ctypes.POINTER(CompileOptions), pp]),
        "fj_program_destroy": (None, [vp]),
        "fj_program_executor": (i32, [vp]),
        "fj_program_count": (sz, [vp, i32]),
        "fj_program_info": (i32, [vp, i32, sz, ctypes.POINTER(ValueInfo)]),
        "fj_program_run": (i32, [vp, T, sz, T, sz]),
        "fj_run_options_init": (None, [ctypes.POINTER(RunOptions)]),
        "fj_program_run_with": (i32, [vp, ctypes.POINTER(RunOptions), T, sz, T, sz]),
        "fj_program_forward": (i32, [vp, T, sz, T, sz, pp]),
        "fj_program_backward": (i32, [vp, vp, T, sz, T, sz]),
        "fj_saved_count": (sz, [vp]),
        "fj_saved_bytes": (sz, [vp]),
        "fj_saved_info": (i32, [vp, sz, ctypes.POINTER(ValueInfo), T]),
        "fj_saved_destroy": (None, [vp]),
        "fj_tensor_release": (None, [T]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
