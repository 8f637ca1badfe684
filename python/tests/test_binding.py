"""The ctypes binding on NumPy arrays (no PyTorch needed)."""
import threading

import numpy as np
import pytest

import fusejit

TEXT = """
graph @main(%x: f32[N,4], %w: f32[4]) {
  %h = aten.mul(%x, %w)
  %y = aten.tanh(%h)
  %s = aten.sum(%y) {dims=[1]}
  return %y, %s
}
"""


def test_version_and_run():
    assert fusejit.version().count(".") == 2
    ctx = fusejit.Context()
    p = ctx.compile(TEXT, executor="host")
    assert p.info["input"] == [("x", "f32[N,4]"), ("w", "f32[4]")]
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    w = np.array([1, -2, 0.5, 3], np.float32)
    y, s = p.run(x, w)
    np.testing.assert_allclose(y, np.tanh(x * w), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s, np.tanh(x * w).sum(1), rtol=1e-5)
    # strided input (a transposed view)
    xt = np.ascontiguousarray(x.T).T
    y2, _ = p.run(xt, w)
    np.testing.assert_array_equal(y, y2)


def test_errors():
    ctx = fusejit.Context()
    with pytest.raises(fusejit.FusejitError, match="FJ_ERR_PARSE"):
        ctx.parse("graph @main( {")
    p = ctx.compile(TEXT, executor="aten")
    with pytest.raises(fusejit.FusejitError, match="dtype"):
        p.run(np.zeros((3, 4), np.float64), np.zeros(4, np.float32))


def test_nvptx_executor(monkeypatch):
    # no CUDA driver (forced, so the test is the same on a GPU machine): one clear error; auto is host
    monkeypatch.setenv("FUSEJIT_LIBCUDA", "/nonexistent/libcuda.so.1")
    monkeypatch.delenv("FUSEJIT_NVPTX_DEVICE", raising=False)
    ctx = fusejit.Context()
    with pytest.raises(fusejit.FusejitError, match="FJ_ERR_DRIVER: .*nvptx executor needs a CUDA driver"):
        ctx.compile(TEXT, executor="nvptx")
    assert ctx.compile(TEXT, executor="auto").executor == "host"
    # the host emulator of the GPU kernels (a testing aid): the results of host
    monkeypatch.setenv("FUSEJIT_NVPTX_DEVICE", "emulator")
    p = fusejit.Context().compile(TEXT, executor="nvptx")
    assert p.executor == "nvptx"
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    w = np.array([1, -2, 0.5, 3], np.float32)
    y, s = p.run(x, w)
    np.testing.assert_allclose(y, np.tanh(x * w), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s, np.tanh(x * w).sum(1), rtol=1e-5, atol=1e-6)


def test_training_program():
    ctx = fusejit.Context()
    p = ctx.compile("graph @f(%x: f32[3] {nograd}, %w: f32[3]) {\n %y = aten.mul(%x, %w)\n"
                    " %z = aten.sin(%y)\n %s = aten.sum(%z)\n return %s\n}\n", training=True, executor="host")
    x = np.array([0.1, 0.2, 0.3], np.float32)
    w = np.array([1.0, 2.0, 3.0], np.float32)
    (s,), saved = p.forward(x, w)
    assert len(saved) == len(p.info["saved"]) and saved.nbytes > 0
    (gw,) = p.backward(saved, np.float32(1.0))
    assert p.info["gradient"][0][0] == "w"
    np.testing.assert_allclose(s, np.sin(x * w).sum(), rtol=1e-6)
    np.testing.assert_allclose(gw, np.cos(x * w) * x, rtol=1e-5)


def test_finalizers_in_any_order():
    """A reference cycle's finalizers run in any order (PEP 442): the context's
    may run before its programs' and modules', a program's before its saved
    values'. Each waits for the objects made from it (a crash at exit after
    aot_function's compiled functions, before)."""
    import gc
    ctx = fusejit.Context()
    m = ctx.parse(TEXT)
    p = ctx.compile(m, executor="host")
    t = ctx.compile("graph @f(%w: f32[3]) {\n %z = aten.sin(%w)\n %s = aten.sum(%z)\n return %s\n}\n",
                    training=True, executor="host")
    w = np.array([1.0, 2.0, 3.0], np.float32)
    _, saved = t.forward(w)
    ctx.__del__()  # as the cyclic collector may: the context first
    t.__del__()    # then a program whose saved values live on
    x = np.ones((2, 4), np.float32)
    y, _ = p.run(x, np.ones(4, np.float32))
    np.testing.assert_allclose(y, np.tanh(x), rtol=1e-6)
    (gw,) = t.backward(saved, np.float32(1.0))
    np.testing.assert_allclose(gw, np.cos(w), rtol=1e-5)
    assert ctx._ptr and t._ptr
    del saved
    assert t._ptr is None and ctx._ptr
    del p, m, t
    gc.collect()
    assert ctx._ptr is None


def test_threads():
    ctx = fusejit.Context()
    p = ctx.compile(TEXT, executor="host")
    x = np.random.RandomState(0).rand(64, 4).astype(np.float32)
    w = np.ones(4, np.float32)
    want = p.run(x, w)[0]
    errs = []

    def work():
        try:
            for _ in range(20):
                np.testing.assert_array_equal(p.run(x, w)[0], want)
        except Exception as e:  # pragma: no cover
            errs.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs


def test_fork_after_use_keeps_working_in_parent_and_child():
    # DataLoader workers fork a process that already ran fusejit on its thread pool
    import os
    ctx = fusejit.Context()
    p = ctx.compile(TEXT, executor="host")
    x = np.random.default_rng(0).standard_normal((1 << 20, 4)).astype(np.float32)
    w = np.array([1, -2, 0.5, 3], np.float32)
    ref = np.tanh(x * w)
    np.testing.assert_allclose(p.run(x, w)[0], ref, rtol=1e-6, atol=1e-6)
    pid = os.fork()
    if pid == 0:  # the child: the compiled program, and a new compile
        code = 1
        try:
            y, _ = p.run(x, w)
            q = ctx.compile(TEXT.replace("aten.tanh", "aten.sigmoid"), executor="host", threads=2)
            z, _ = q.run(x, w)
            ok = np.allclose(y, ref, atol=1e-6) and np.allclose(z, 1 / (1 + np.exp(-x * w)), atol=1e-6)
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    np.testing.assert_allclose(p.run(x, w)[0], ref, rtol=1e-6, atol=1e-6)


def test_threads_option():
    ctx = fusejit.Context()
    x = np.ones((64, 4), np.float32)
    w = np.ones(4, np.float32)
    for t in (1, 2, 64):
        y, _ = ctx.compile(TEXT, executor="host", threads=t).run(x, w)
        np.testing.assert_allclose(y, np.tanh(1.0) * np.ones((64, 4)), rtol=1e-6)
    with pytest.raises(fusejit.FusejitError, match="threads"):
        ctx.compile(TEXT, executor="host", threads=-1)


def test_structs_match_the_header():
    """The binding's ctypes structs have the C layout: the library's _init
    functions set struct_size to the C sizeof."""
    import ctypes
    from fusejit import _lib
    L = fusejit.lib()
    for cls, init in ((_lib.RunOptions, L.fj_run_options_init), (_lib.CompileOptions, L.fj_compile_options_init)):
        o = cls()
        init(ctypes.byref(o))
        assert o.struct_size == ctypes.sizeof(cls), cls.__name__
