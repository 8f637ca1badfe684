"""decomp_math's rules (pointwise functions, reductions, losses, small linear
algebra): forward and gradients against eager, through torch.compile on PyTorch
2.x and aot_function on 1.x, and each op really ran in fusejit (explain)."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("functorch")
import torch.nn.functional as F  # noqa: E402

import fusejit.torch as fjt  # noqa: E402

TORCH2 = "fusejit_host" in fjt.REGISTERED


def through_fusejit(fn):
    if TORCH2:
        torch._dynamo.reset()
        return torch.compile(fn, backend="fusejit_host", dynamic=False)
    return fjt.aot_fusejit(fn, executor="host")


def rnd(*shape, grad=True, lo=-3.0, hi=3.0):
    return (torch.rand(tuple(shape), dtype=torch.float32) * (hi - lo) + lo).requires_grad_(grad)


def check(fn, *args, rtol=1.3e-6, atol=1e-5, allow=()):
    """fn through fusejit vs eager: outputs (each) and the gradients of every input
    that requires grad; then explain: no op of fn's graphs left to PyTorch but views
    and the ops in `allow` (the indexing ops some backward graphs use)."""
    a1 = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    a2 = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out, ref = through_fusejit(fn)(*a1), fn(*a2)
    outs, refs = (list(out), list(ref)) if isinstance(ref, tuple) else ([out], [ref])
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o, r, rtol=rtol, atol=atol, equal_nan=True)
    diff = [(o, r) for o, r in zip(outs, refs) if r.requires_grad]
    if diff:
        gs = [torch.randn_like(r) for _, r in diff]
        torch.autograd.backward([o for o, _ in diff], gs)
        torch.autograd.backward([r for _, r in diff], gs)
        for x, y in zip(a1, a2):
            if y.requires_grad:
                torch.testing.assert_close(x.grad, y.grad, rtol=max(rtol, 1e-5), atol=max(atol, 1e-5), equal_nan=True)
    if TORCH2:
        torch._dynamo.reset()
    ex = fjt.explain(fn, *[a.detach().clone().requires_grad_(a.requires_grad) for a in args])
    left = [(op, why) for _, op, why in ex.fallback if "a region of views only" not in why and op not in allow]
    assert not left and ex.regions, str(ex)


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def _x():
    return rnd(4, 5)


POINTWISE = {
    "copysign": (lambda a, b: torch.copysign(a, b), 2),
    "copysign_scalar": (lambda a: torch.copysign(a, -0.0), 1),
    "ldexp": (lambda a, b: torch.ldexp(a, torch.round(b.detach() * 3)), 2),
    "deg2rad": (torch.deg2rad, 1), "rad2deg": (torch.rad2deg, 1), "frac": (torch.frac, 1),
    "fmax": (torch.fmax, 2), "fmin": (torch.fmin, 2),
    "floor_divide": (lambda a, b: torch.floor_divide(a.detach(), b.detach()) * a, 2),
    "hypot": (torch.hypot, 2), "logaddexp": (torch.logaddexp, 2), "logaddexp2": (torch.logaddexp2, 2),
    "nan_to_num": (lambda a: torch.nan_to_num(torch.log(a)), 1),
    "sgn": (lambda a: torch.sgn(a) * a, 1), "signbit": (lambda a: torch.signbit(a) * a, 1),
    "sinc": (torch.sinc, 1), "entr": (torch.special.entr, 1), "xlogy": (torch.xlogy, 2),
    "xlog1py": (torch.special.xlog1py, 2), "heaviside": (lambda a, b: torch.heaviside(a.detach(), b.detach()) * b, 2),
    "isinf": (lambda a: (torch.isposinf(1 / a) | torch.isneginf(a)) * a, 1),
    "addcdiv": (lambda a, b: torch.addcdiv(a, a, b + 4, value=0.5), 2),
    "celu": (lambda a: F.celu(a, 0.7), 1), "mish": (F.mish, 1), "threshold": (lambda a: F.threshold(a, 0.1, -2.0), 1),
    "logit": (lambda a: torch.logit(torch.sigmoid(a)), 1), "logit_eps": (lambda a: torch.logit(a / 4 + 0.5, 0.2), 1),
    "logsigmoid": (F.logsigmoid, 1), "glu": (lambda a: F.glu(a, 0), 1),
}


@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_pointwise(name):
    fn, k = POINTWISE[name]
    if name in ("entr", "xlog1py", "xlogy"):
        check(fn, *[rnd(4, 4, lo=-0.5, hi=3.0) for _ in range(k)])
    else:
        check(fn, *[rnd(4, 4) for _ in range(k)])


def test_prelu():
    check(lambda x, w: F.prelu(x, w), rnd(2, 3, 4), rnd(3))
    check(lambda x, w: F.prelu(x, w), rnd(2, 3), rnd(1))
    check(lambda x, w: F.prelu(x, w), rnd(5), rnd(1))


REDUCTIONS = {
    "max": lambda x: torch.max(x), "max_dim": lambda x: torch.max(x, 1)[0] * 2,
    "max_dim_idx": lambda x: x * torch.max(x, 0, keepdim=True)[1],
    "min_dim": lambda x: torch.min(x, -1, keepdim=True)[0], "min": lambda x: torch.min(x),
    "aminmax": lambda x: torch.aminmax(x.detach(), dim=0)[0] * x + torch.aminmax(x.detach())[1],
    "all_any": lambda x: torch.all(x > 0, 1) * x.sum(1) + torch.any(x > 2) * 1.0,
    "std": lambda x: torch.std(x, 1, correction=0), "std_mean": lambda x: torch.std_mean(x, 0)[0],
    "nansum": lambda x: torch.nansum(torch.log(x), 1), "count_nonzero": lambda x: torch.count_nonzero(x > 1, 0) * x,
    "norm": lambda x: torch.norm(x, 3, 1), "trace": lambda x: torch.trace(x),
    "safe_softmax": lambda x: torch.ops.aten._safe_softmax(x.masked_fill(x > 1, float("-inf")), 1),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction(name):
    if name == "safe_softmax" and not hasattr(torch.ops.aten, "_safe_softmax"):
        pytest.skip("no aten._safe_softmax in this PyTorch")
    # max/min's backward scatters (aten.scatter), trace's fills the diagonal (aten.index_fill)
    check(REDUCTIONS[name], rnd(4, 5), allow=("aten.scatter", "aten.index_fill"))


def test_max_ties_take_pytorch_index():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [float("nan"), 1.0, float("nan"), 5.0]])
    check(lambda x: torch.max(x, 1), x)
    check(lambda x: torch.min(x, 0), x)
    check(lambda x: torch.max(x.to(torch.int32), 1), x)
    check(lambda x: torch.min(x > 2, 1), x)


LOSSES = {
    "mse": lambda x, y: F.mse_loss(x, y), "mse_sum": lambda x, y: F.mse_loss(x, y, reduction="sum"),
    "huber": lambda x, y: F.huber_loss(x, y, delta=0.5), "smooth_l1": lambda x, y: F.smooth_l1_loss(x, y, beta=0.7),
    "smooth_l1_none": lambda x, y: F.smooth_l1_loss(x, y, reduction="none"),
    "soft_margin": lambda x, y: F.soft_margin_loss(x, torch.sign(y.detach())),
    "bce": lambda x, y: F.binary_cross_entropy(torch.sigmoid(x), torch.sigmoid(y), weight=y.detach().abs()),
    "bce_logits": lambda x, y: F.binary_cross_entropy_with_logits(x, torch.sigmoid(y), pos_weight=torch.ones(5) * 2),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss(name):
    check(LOSSES[name], rnd(4, 5), rnd(4, 5))


PRODUCTS = {
    "mv": (lambda a, v: torch.mv(a, v), [(4, 5), (5,)]),
    "addmv": (lambda s, a, v: torch.addmv(s, a, v, beta=0.5, alpha=2.0), [(4,), (4, 5), (5,)]),
    "addr": (lambda s, a, v: torch.addr(s, a, v, alpha=0.5), [(4, 5), (4,), (5,)]),
    "baddbmm": (lambda s, a, c: torch.baddbmm(s, a, c, beta=0.3), [(2, 3, 4), (2, 3, 5), (2, 5, 4)]),
    "addbmm": (lambda s, a, c: torch.addbmm(s, a, c), [(3, 4), (2, 3, 5), (2, 5, 4)]),
    "vdot": (torch.vdot, [(5,), (5,)]), "dist": (lambda a, b: torch.dist(a, b, 3), [(4, 5), (4, 5)]),
    "bilinear": (lambda a, b, w: F.bilinear(a, b, w), [(3, 4), (3, 5), (2, 4, 5)]),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_product(name):
    fn, shapes = PRODUCTS[name]
    check(fn, *[rnd(*s) for s in shapes], rtol=1e-5)


def test_baddbmm_beta_zero_ignores_nan_in_self():
    if not TORCH2:
        pytest.skip("PyTorch 1.13's eager baddbmm lets self's NaNs through at beta=0 now and then")
    s = torch.full((2, 3, 4), float("nan"))
    check(lambda s, a, c: torch.baddbmm(s, a, c, beta=0.0), s, rnd(2, 3, 5), rnd(2, 5, 4))


def test_distances_forward():
    for p in (0.0, 1.0, 2.0, 3.0, float("inf")):
        check(lambda a, b: torch.cdist(a, b, p) + 0.0, rnd(3, 4, grad=False), rnd(5, 4, grad=False), rtol=1e-5)
        check(lambda a: F.pdist(a, p) + 0.0, rnd(5, 4, grad=False), rtol=1e-5)


def test_group_norm():
    check(lambda x, w, b: F.group_norm(x, 2, w, b, eps=1e-3), rnd(3, 4, 5, 2), rnd(4), rnd(4), rtol=1e-5)
    check(lambda x: F.group_norm(x, 3), rnd(2, 6, 7), rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linspace_logspace(dtype):
    for steps in (0, 1, 2, 7, 50):
        check(lambda x: torch.linspace(-3.3, 7.5, steps, dtype=dtype) + x, rnd(steps))
        check(lambda x: torch.logspace(-1.5, 1.25, steps, base=3.0, dtype=dtype) + x, rnd(steps))


def test_cumprod_with_zeros_and_negatives():
    x = rnd(4, 6)
    with torch.no_grad():
        x[1, 2] = 0.0
        x[3, 0] = 0.0
        x[2, 4] = float("inf")
    check(lambda x: torch.cumprod(x, 1), x.detach().requires_grad_(False))
    # PyTorch 1.13's cumprod backward stacks (aten.stack: decomp_index's rule)
    check(lambda x: torch.cumprod(x, 0) + torch.cumprod(x, -1), rnd(3, 5), allow=("aten.stack",))
    check(lambda x: torch.cumprod(x, 0), rnd(grad=False))


def test_logcumsumexp():
    x = rnd(4, 6)
    with torch.no_grad():
        x[1, :3] = float("-inf")
        x[2, 2] = float("inf")
    check(lambda x: torch.logcumsumexp(x, 1), x.detach().requires_grad_(False))
    check(lambda x: torch.logcumsumexp(x * 10, 0), rnd(5, 3))


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_distances_backward(p):
    x1 = rnd(2, 3, 4)
    with torch.no_grad():
        x1[0, 1] = x1[0, 0]  # a zero distance
    check(lambda a, b: torch.cdist(a, b, p), x1, rnd(2, 5, 4), rtol=1e-5)
    x = rnd(5, 4)
    with torch.no_grad():
        x[3] = x[1]
    check(lambda a: F.pdist(a, p), x, rtol=1e-5)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf")])
def test_renorm(p):
    check(lambda x: torch.renorm(x, p, 1, 2.0), rnd(3, 4, 2), rtol=1e-5)


DTYPE_OPS = {
    "copysign": torch.copysign, "fmax": torch.fmax, "hypot": torch.hypot, "logaddexp": torch.logaddexp,
    "xlogy": torch.xlogy, "floor_divide": torch.floor_divide, "heaviside": torch.heaviside,
    "signbit": lambda a, b: torch.signbit(a), "nan_to_num": lambda a, b: torch.nan_to_num(a / b),
    "sgn": lambda a, b: torch.sgn(a), "sinc": lambda a, b: torch.sinc(a), "max_dim": lambda a, b: torch.max(a, 1),
    "aminmax": lambda a, b: torch.aminmax(a, dim=0), "all": lambda a, b: torch.all(a, 1), "any": lambda a, b: torch.any(a),
    "count_nonzero": lambda a, b: torch.count_nonzero(a, 0), "nansum": lambda a, b: torch.nansum(a, 1),
    "trace": lambda a, b: torch.trace(a), "std": lambda a, b: torch.std(a, 1), "threshold": lambda a, b: F.threshold(a, 1, 5),
    "mv": lambda a, b: torch.mv(a, b[0]), "addr": lambda a, b: torch.addr(a, b[0], b[1]), "frac": lambda a, b: torch.frac(a),
    "logit": lambda a, b: torch.logit(a, 0.1), "mish": lambda a, b: F.mish(a), "glu": lambda a, b: F.glu(a, 0),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.uint8, torch.bool])
def test_dtypes(dtype):
    """Each op at each dtype PyTorch takes it: the same dtype, shape and values (assert_close's
    default tolerance for the dtype), in fusejit."""
    for name, fn in DTYPE_OPS.items():
        a, b = [(torch.randn(4, 4) * 3).to(dtype) if dtype != torch.bool else torch.rand(4, 4) > 0.5 for _ in range(2)]
        try:
            ref = fn(a, b)
        except (RuntimeError, TypeError):
            continue  # PyTorch does not take this dtype
        if name == "addr" and dtype == torch.bool:
            continue  # addr's logical form stays in PyTorch
        if name == "sinc" and dtype in (torch.float16, torch.bfloat16) and not TORCH2:
            continue  # PyTorch 1.13 rounds sinc's steps to the dtype (2.x: once, as fusejit)
        out = through_fusejit(fn)(a, b)
        torch.testing.assert_close(out, ref, equal_nan=True, msg=lambda m: "%s: %s" % (name, m))
        if TORCH2:
            torch._dynamo.reset()
        ex = fjt.explain(fn, a, b)
        left = [(op, why) for _, op, why in ex.fallback if "a region of views only" not in why]
        assert not left and ex.regions, (name, str(ex))
