"""Indexing, scatters and tensor rearrangement written in fusejit's op set
(decomp_index.py): forward and gradients against eager, through torch.compile
(PyTorch 2.x) and aot_function, and the op itself ran in fusejit."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("functorch")

import fusejit.torch as fjt  # noqa: E402

EX = "host"
FRONTS = ["aot_function"] + (["torch.compile"] if "fusejit_host" in fjt.REGISTERED else [])


def through_fusejit(fn, front):
    if front == "torch.compile":
        torch._dynamo.reset()
        return torch.compile(fn, backend="fusejit_host", dynamic=False)
    return fjt.aot_fusejit(fn, executor=EX)


def rnd(*shape, grad=True, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


def idx(high, *shape):
    return torch.randint(0, high, shape)


def check(front, fn, *args, ops=(), rtol=1e-4, atol=1e-5):
    """fn through fusejit vs eager (outputs, gradients of the inputs that need one), and
    none of `ops` (ATen names) left to PyTorch, forward or backward."""
    a1 = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    a2 = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    out = through_fusejit(fn, front)(*a1)
    ref = fn(*a2)
    torch.testing.assert_close(out, ref, rtol=rtol, atol=atol)
    if ref.requires_grad:
        g = torch.randn_like(ref)
        out.backward(g)
        ref.backward(g)
        for x, y in zip(a1, a2):
            if isinstance(y, torch.Tensor) and y.requires_grad:
                torch.testing.assert_close(x.grad, y.grad, rtol=rtol, atol=atol)
    if front == FRONTS[-1]:
        if front == "torch.compile":
            torch._dynamo.reset()
        ex = fjt.explain(fn, *args, executor=EX)
        left = [(op, why) for _, op, why in ex.fallback if op in ops]
        assert not left, str(ex)
        assert ex.counts()[0] > 0, str(ex)


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


@pytest.fixture(params=FRONTS)
def front(request):
    return request.param


# Index tensors are inputs: aot_function cannot take a tensor the function captures.

# ---- advanced indexing ----

T = torch.tensor


def test_index_one_tensor_and_its_backward(front):
    check(front, lambda x, i: x[i] * 2, rnd(4, 3), T([[0, 2], [-1, 1]]),
          ops=("aten.index", "aten.index_put", "aten._unsafe_index_put"))


def test_index_several_tensors_broadcast_none_and_negative(front):
    i, j = T([[0], [-2]]), T([1, -1, 0])
    check(front, lambda x, i, j: x[:, i, j] + 1, rnd(2, 4, 5, 3), i, j, ops=("aten.index", "aten.index_put"))
    # non-adjacent index tensors: the broadcast dims come first
    check(front, lambda x, i, j: x[i, :, j].sin(), rnd(4, 2, 5), i, j, ops=("aten.index", "aten.index_put"))


def test_index_with_a_repeated_index_accumulates_its_gradient(front):
    check(front, lambda x, i: x[i].exp(), rnd(3, 2), T([1, 1, 0, 1]), ops=("aten.index", "aten.index_put"))


def test_index_put_overwrite_and_accumulate(front):
    def put(x, v, i, j):
        return torch.index_put(x * 1, (i, j), v, accumulate=False)

    def acc(x, v, i, j):
        return torch.index_put(x * 1, (i, j), v, accumulate=True)
    check(front, put, rnd(4, 2), rnd(3), T([0, 2, 3]), T([1, 0, 1]), ops=("aten.index_put",))
    check(front, acc, rnd(4, 2), rnd(3), T([0, 0, 3]), T([1, 1, 1]), ops=("aten.index_put",))


def test_index_put_repeated_index_last_write_wins(front):
    check(front, lambda x, v, i: torch.index_put(x * 1, (i,), v), rnd(3, 2, grad=False), rnd(4, 2, grad=False),
          T([2, 0, 2, 2]), ops=("aten.index_put",))


def test_index_put_bool_mask(front):
    if front == "aot_function":
        pytest.skip("aot_function traces a bool mask through nonzero (a data-dependent size)")
    m = T([True, False, True, True])
    f = lambda x, m, v: torch.index_put(x * 1, (m,), v)  # noqa: E731
    check(front, f, rnd(4, 3), m, T(5.0), ops=("aten.index_put",))
    # one value per true position (the values' gradient, x[m], has a data-dependent size)
    check(front, f, rnd(4, 3), m, rnd(3, 3, grad=False), ops=("aten.index_put",))


def test_index_out_of_range_fails_the_run(front):
    with pytest.raises(Exception):
        through_fusejit(lambda x, i: x[i] + 1, front)(rnd(3, grad=False), T([3]))


def test_unsafe_index_of_upsampling(front):
    up = torch.nn.Upsample(scale_factor=2, mode="nearest")
    check(front, lambda x: up(x) * 3, rnd(1, 2, 3, 4),
          ops=("aten._unsafe_index", "aten._unsafe_index_put", "aten.index"))


# ---- triangles ----

@pytest.mark.parametrize("k", [0, 1, -2])
def test_triu_tril(front, k):
    check(front, lambda x: torch.triu(x, k) + torch.tril(x * 2, k), rnd(2, 4, 5), ops=("aten.triu", "aten.tril"))


# ---- scatters ----

def test_scatter_src_and_value(front):
    i = T([[0, 1, 2], [2, 0, 0]])
    check(front, lambda x, s, i: x.scatter(0, i, s) * 2, rnd(3, 4), rnd(2, 3), i, ops=("aten.scatter",))
    # a source larger than the index (PyTorch's own backward refuses its gradient)
    check(front, lambda x, s, i: x.scatter(0, i, s) * 2, rnd(3, 4), rnd(2, 5, grad=False), i, ops=("aten.scatter",))
    check(front, lambda x, i: x.scatter(1, i, 1.5), rnd(3, 4), idx(4, 3, 1), ops=("aten.scatter",))
    for how in ("add", "multiply"):
        check(front, lambda x, s, i: x.scatter(0, i, s, reduce=how), rnd(3, 4, grad=False), rnd(2, 3, grad=False), i,
              ops=("aten.scatter",))


@pytest.mark.parametrize("how", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(front, how, include_self):
    if not hasattr(torch.Tensor, "scatter_reduce"):
        pytest.skip("no scatter_reduce in this PyTorch")
    i = T([[0, 1, 0], [0, 2, 1], [3, 1, 1]])
    f = lambda x, s, i: x.scatter_reduce(0, i, s, how, include_self=include_self)  # noqa: E731
    check(front, f, rnd(4, 3, grad=False), rnd(3, 3, grad=False), i, ops=("aten.scatter_reduce",))
    check(front, f, torch.randint(-5, 5, (4, 3)), torch.randint(-5, 5, (3, 3)), i, ops=("aten.scatter_reduce",))


def test_scatter_reduce_gradients(front):
    check(front, lambda x, s, i: x.scatter_reduce(0, i, s, "sum").sin(), rnd(3, 3), rnd(2, 3),
          T([[0, 1, 0], [0, 2, 1]]), ops=("aten.scatter_reduce",))


@pytest.mark.parametrize("how", ["prod", "mean", "amax", "amin"])
def test_index_reduce(front, how):
    if not hasattr(torch.Tensor, "index_reduce"):
        pytest.skip("no index_reduce in this PyTorch")
    check(front, lambda x, s, i: x.index_reduce(1, i, s, how), rnd(2, 3, grad=False), rnd(2, 4, grad=False),
          T([0, 2, 0, 1]), ops=("aten.index_reduce",))


def test_index_copy_fill_take_put(front):
    check(front, lambda x, s, i: x.index_copy(0, i, s), rnd(3, 2), rnd(2, 2), T([2, 0]), ops=("aten.index_copy",))
    check(front, lambda x, i: x.index_fill(1, i, -2.0), rnd(3, 4), T([-1, 0]), ops=("aten.index_fill",))
    check(front, lambda x, i: torch.take(x, i), rnd(2, 3), T([[0, -1], [5, 3]]), ops=("aten.take",))
    check(front, lambda x, s, i: x.put(i, s, accumulate=True), rnd(2, 3), rnd(3), T([1, -1, 1]), ops=("aten.put",))


def test_masked_scatter(front):
    m = T([[True, False, True], [False, True, True]])
    check(front, lambda x, s, m: x.masked_scatter(m, s), rnd(2, 3), rnd(5), m, ops=("aten.masked_scatter",))


def test_integer_and_bool_dtypes(front):
    check(front, lambda x, s, i: x.index_copy(0, i, s), torch.randint(0, 9, (3, 2)), torch.randint(0, 9, (2, 2)),
          T([2, 0]), ops=("aten.index_copy",))
    check(front, lambda x, i: x[i], torch.rand(2, 3) > 0.5, T([1, 0, 1]), ops=("aten.index",))


# ---- rearrangements ----

def test_stack_repeat_roll_rot90(front):
    check(front, lambda x, y: torch.stack([x, y * 2], 1).sin(), rnd(3, 4), rnd(3, 4), ops=("aten.stack",))
    check(front, lambda x: x.repeat(2, 1, 3) * 2, rnd(3, 4), ops=("aten.repeat",))
    check(front, lambda x: torch.roll(x, (1, -3), (0, 1)) * 2, rnd(3, 4), ops=("aten.roll",))
    check(front, lambda x: torch.roll(x, 5) * 2, rnd(3, 4), ops=("aten.roll",))
    for k in (1, 2, 3):
        check(front, lambda x: torch.rot90(x, k, (0, 2)) * 2, rnd(2, 3, 4), ops=("aten.rot90",))


def test_eye(front):
    if front != "torch.compile":
        pytest.skip("a function without tensor inputs (torch.compile only)")
    check(front, lambda x: torch.eye(3, 5) + x, rnd(3, 5), ops=("aten.eye",))


@pytest.mark.parametrize("off", [0, 2, -1])
def test_diagonals(front, off):
    check(front, lambda x: torch.diagonal(x, off, 2, 0).exp(), rnd(3, 2, 4), ops=("aten.diagonal",))
    check(front, lambda x: torch.diag_embed(x, off, 0, 2) * 2, rnd(2, 3), ops=("aten.diag_embed",))
    check(front, lambda x, s: torch.diagonal_scatter(x, s, off) * 2, rnd(4, 3),
          rnd(3 - max(off, 0) if off >= 0 else 3), ops=("aten.diagonal_scatter",))


def test_trace(front):
    check(front, lambda x: torch.trace(x) * 2, rnd(3, 4), ops=("aten.trace",))


def test_select_and_slice_scatter(front):
    if not fjt.REGISTERED:
        pytest.skip("PyTorch 1.13's own backward of these scatters reads uninitialized memory / refuses sizes")
    check(front, lambda x, s: torch.select_scatter(x, s, dim=1, index=-1) * 2, rnd(3, 4), rnd(3),
          ops=("aten.select_scatter",))
    check(front, lambda x, s: torch.slice_scatter(x, s, dim=1, start=1, end=3) * 2, rnd(3, 4), rnd(3, 2),
          ops=("aten.slice_scatter",))
    check(front, lambda x, s: torch.slice_scatter(x, s, dim=0, start=0, end=5, step=2) * 2, rnd(5, 2), rnd(3, 2),
          ops=("aten.slice_scatter",))


def test_as_strided_forms(front):
    if not fjt.REGISTERED:
        pytest.skip("PyTorch 1.13's own backward of these scatters reads uninitialized memory / refuses sizes")
    # no element twice (an overlapping view's gradient differs between eager and AOTAutograd)
    check(front, lambda x: torch.as_strided(x * 2, (3, 2), (1, 3), 1), rnd(8), ops=("aten.as_strided",))
    check(front, lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 2), 1) * 2, rnd(8), rnd(2, 2),
          ops=("aten.as_strided_scatter",))


def test_unfold_and_pixel_shuffles(front):
    check(front, lambda x: x.unfold(1, 3, 2) * 2, rnd(2, 7, 3), ops=("aten.unfold",))
    check(front, lambda x: torch.pixel_shuffle(x, 2) * 2, rnd(1, 8, 2, 3), ops=("aten.pixel_shuffle",))
    check(front, lambda x: torch.pixel_unshuffle(x, 2) * 2, rnd(1, 2, 4, 6), ops=("aten.pixel_unshuffle",))
    grad = hasattr(torch, "compile")  # PyTorch 1.13 has no derivative for channel_shuffle
    check(front, lambda x: torch.nn.functional.channel_shuffle(x, 2) * 2, rnd(1, 4, 2, 2, grad=grad),
          ops=("aten.channel_shuffle", "aten.native_channel_shuffle"))


def test_block_diag_and_copies(front):
    check(front, lambda x, y: torch.block_diag(x, y) * 2, rnd(2, 3), rnd(1, 2), ops=("aten.block_diag",))
    check(front, lambda x: torch.permute_copy(x, (1, 0)) * 2, rnd(2, 3), ops=("aten.permute_copy",))
    check(front, lambda x: torch.t_copy(x) + torch.transpose_copy(x, 0, 1), rnd(2, 3),
          ops=("aten.t_copy", "aten.transpose_copy"))


# ---- pads ----

@pytest.mark.parametrize("mode,shape,pad", [("reflect", (2, 3, 5), (2, 1)), ("replicate", (2, 3, 5), (3, 0)),
                                            ("reflect", (1, 2, 4, 5), (1, 2, 3, 1)),
                                            ("replicate", (1, 2, 3, 4, 5), (1, 1, 2, 0, 0, 2)),
                                            ("replicate", (1, 2, 4, 5), (-1, 2, 1, -2))])
def test_reflection_and_replication_pads(front, mode, shape, pad):
    if front == "aot_function" and len(shape) == 5 and mode == "reflect":
        pytest.skip("no reflection_pad3d in PyTorch 1.13")
    if any(p < 0 for p in pad) and not fjt.REGISTERED:
        pytest.skip("PyTorch 1.13 refuses negative replication pads")
    check(front, lambda x: torch.nn.functional.pad(x, pad, mode=mode) * 2, rnd(*shape),
          ops=tuple("aten.%s_pad%dd%s" % (k, len(shape) - 2, s) for k in ("reflection", "replication")
                    for s in ("", "_backward")))


# ---- searches ----

def test_bucketize_and_searchsorted(front):
    b = torch.tensor([-1.0, 0.0, 0.0, 0.5, 2.0])
    x = torch.tensor([[-2.0, 0.0, 0.3], [0.5, 2.0, float("nan")]])
    for right in (False, True):
        check(front, lambda x, b: torch.bucketize(x, b, right=right), x, b, ops=("aten.bucketize",))
        check(front, lambda x, b: torch.searchsorted(b, x, right=right, out_int32=True), x, b,
              ops=("aten.searchsorted",))
    seq = torch.sort(torch.randn(2, 6)).values
    check(front, lambda s, x: torch.searchsorted(s, x, side="right"), seq, torch.randn(2, 3),
          ops=("aten.searchsorted",))
    perm = torch.randperm(6).expand(2, 6).contiguous()
    check(front, lambda s, x, p: torch.searchsorted(s, x, sorter=p), torch.gather(seq, 1, torch.argsort(perm, 1)),
          torch.randn(2, 3), perm, ops=("aten.searchsorted",))


def test_isin(front):
    x, t = torch.randint(0, 8, (3, 4)), torch.tensor([1, 5, 5, 7])
    check(front, lambda x, t: torch.isin(x, t), x, t, ops=("aten.isin",))
    check(front, lambda x, t: torch.isin(x, t, invert=True), x, t, ops=("aten.isin",))


@pytest.mark.parametrize("lo,hi", [(0, 0), (-1, 1), (0.5, 0.5)])
def test_histc(front, lo, hi):
    x = torch.cat([torch.randn(50), torch.tensor([-1.0, 1.0, 0.5, 0.0])])
    check(front, lambda x: torch.histc(x, 7, lo, hi), x, ops=("aten.histc",))


# ---- max_unpool, unfold / fold (im2col / col2im) ----

@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_unpool(front, nd):
    pool = getattr(torch.nn.functional, "max_pool%dd" % nd)
    unpool = getattr(torch.nn.functional, "max_unpool%dd" % nd)
    x = torch.randn(*((2, 3) + (6,) * nd))
    y, i = pool(x, 3, 2, return_indices=True)  # overlapping windows: some indices repeat
    check(front, lambda y, i: unpool(y, i, 3, 2, output_size=x.shape[2:]) * 2, y.requires_grad_(), i,
          ops=("aten.max_unpool2d", "aten.max_unpool3d"))


def test_unfold_and_fold(front):
    F = torch.nn.functional
    check(front, lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=(1, 0), stride=(2, 1)) * 2, rnd(2, 3, 5, 7),
          ops=("aten.im2col", "aten.col2im"))
    check(front, lambda c: F.fold(c, (5, 7), (2, 3), dilation=(1, 2), padding=(1, 0), stride=(2, 1)) * 2,
          rnd(2, 18, 9), ops=("aten.im2col", "aten.col2im"))


# ---- nonzero_static, embedding_bag ----

def test_nonzero_static(front):
    if not hasattr(torch, "nonzero_static"):
        pytest.skip("no nonzero_static in this PyTorch")
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    for size in (2, 3, 6):
        check(front, lambda x: torch.nonzero_static(x, size=size, fill_value=-7), x, ops=("aten.nonzero_static",))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_inference(front, mode):
    F = torch.nn.functional
    i, o = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4, 4, 6])
    check(front, lambda w, i, o: F.embedding_bag(i, w, o, mode=mode) * 2, rnd(10, 3, grad=False), i, o,
          ops=("aten._embedding_bag_forward_only", "aten._embedding_bag"))
    if mode == "sum":
        check(front, lambda w, i, o, p: F.embedding_bag(i, w, o, mode=mode, per_sample_weights=p),
              rnd(10, 3, grad=False), i, o, rnd(8, grad=False), ops=("aten._embedding_bag_forward_only",))
    if not fjt.REGISTERED:
        return  # PyTorch 1.13's own kernel aborts on a last offset short of the end
    check(front, lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=4, include_last_offset=True)
          + F.embedding_bag(i, w, o, mode=mode, include_last_offset=True) * 2,
          rnd(10, 3, grad=False), i, o, ops=("aten._embedding_bag_forward_only", "aten._embedding_bag"))


def test_embedding_max_norm(front):
    if not fjt.REGISTERED:
        pytest.skip("PyTorch 1.13's aot_function cannot trace the in-place renorm")
    i = torch.tensor([[1, 2, 4], [4, 3, 9]])
    check(front, lambda w, i: torch.nn.functional.embedding(i, w * 1, max_norm=1.0) * 2, rnd(10, 3, grad=False), i,
          ops=("aten.embedding_renorm",))


def test_overwrite_over_the_dense_limit_stays_in_pytorch():
    if not fjt.REGISTERED:
        pytest.skip("torch.compile needs PyTorch 2.x")
    from fusejit import decomp_index
    m = int(decomp_index.DENSE_LIMIT ** 0.5) + 1  # the last-write test would take m * m elements
    f = lambda x, v, i: torch.index_put(x * 1, (i,), v)  # noqa: E731
    # Distinct indices: with repeats, eager's own index_put is not deterministic at this size
    # (its loop runs in parallel), so only a comparison without repeats can hold.
    x, v, i = rnd(m + 3, grad=False), rnd(m, grad=False), torch.randperm(m + 3)[:m]
    torch._dynamo.reset()
    ex = fjt.explain(f, x, v, i, executor=EX)
    why = [w for _, op, w in ex.fallback if op == "aten.index_put"]
    assert why and "limit" in why[0], str(ex)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, backend="fusejit_host", dynamic=False)(x, v, i), f(x, v, i))


def test_gather_forms_fusejit_ops_refuse(front):
    """An empty index of u8 (PyTorch checks the dtype only of a non-empty index) and a 0-d
    self gathered as one element, forward and backward."""
    check(front, lambda x, i: torch.gather(x * 2, 0, i), rnd(5), torch.zeros(2, 0, dtype=torch.uint8),
          ops=("aten.gather",))
    check(front, lambda x, i: torch.gather(x * 2, 0, i), rnd(()), torch.tensor([0]), ops=("aten.gather",))
    check(front, lambda x, i: torch.gather(x * 2, -1, i), rnd(3, 4), idx(4, 3, 5), ops=("aten.gather",))
