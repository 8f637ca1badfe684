"""Real models through torch.compile(backend="fusejit_host"): what fusejit
supports runs in fusejit, the rest (convolution, pooling, attention where
fusejit has no form yet ...) in PyTorch between its regions. Random weights,
f32, train mode, dropout 0: the forward and every parameter's gradient match
eager (relative L2 at most 1e-4). PyTorch 2.x with torchvision and
transformers (scripts/torch2-env.sh); skipped elsewhere."""
import pytest

torch = pytest.importorskip("torch")
import fusejit.torch as fjt  # noqa: E402

pytestmark = pytest.mark.skipif("fusejit_host" not in fjt.REGISTERED, reason="torch.compile needs PyTorch 2.x")


def rel_l2(a, b):
    a, b = a.detach().double(), b.detach().double()
    n = b.norm()
    return float((a - b).norm() / (n if n > 0 else 1.0))


def check_model(make, *inputs, tol=1e-4):
    torch.manual_seed(0)
    eager = make().train()
    fused = make().train()
    fused.load_state_dict(eager.state_dict())
    torch._dynamo.reset()
    compiled = torch.compile(fused, backend="fusejit_host", dynamic=False)
    ref = fjt.output_tensors(eager(*inputs))
    out = fjt.output_tensors(compiled(*inputs))
    assert len(out) == len(ref) > 0
    for o, r in zip(out, ref):
        assert o.shape == r.shape and o.dtype == r.dtype
        assert rel_l2(o, r) <= tol, rel_l2(o, r)
    torch.manual_seed(1)
    tangents = [torch.randn_like(r) for r in ref if r.requires_grad]
    torch.autograd.backward([r for r in ref if r.requires_grad], tangents)
    torch.autograd.backward([o for o in out if o.requires_grad], tangents)
    pe, pf = dict(eager.named_parameters()), dict(fused.named_parameters())
    checked = 0
    for name, p in pe.items():
        if p.grad is None:
            assert pf[name].grad is None or pf[name].grad.abs().max() == 0, name
            continue
        assert pf[name].grad is not None, name
        assert rel_l2(pf[name].grad, p.grad) <= tol, (name, rel_l2(pf[name].grad, p.grad))
        checked += 1
    assert checked > 0
    ex = fjt.explain(fused, *inputs)
    # fusejit runs at least 90% of the call_function nodes; convolution and pooling
    # stay in PyTorch and do not count
    done, total = ex.counts(exclude=("aten.convolution", "aten.max_pool2d", "aten.linalg"))
    assert total > 0 and done >= 0.9 * total, str(ex)
    assert len(ex.reports) >= 2, str(ex)  # the forward and the backward graphs
    return ex


def test_transformer_encoder_layer():
    ex = check_model(lambda: torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
                     torch.randn(2, 5, 32))
    assert ex.regions


def test_resnet18():
    tv = pytest.importorskip("torchvision")
    # 64x64: at 32x32 the last batch norm sees 2 values per channel, and f32 eager
    # itself is 1.5e-4 from f64
    ex = check_model(lambda: tv.models.resnet18(num_classes=10), torch.randn(2, 3, 64, 64))
    # the convolutions and the pooling stay in PyTorch; batch norm, relu and the residual adds do not
    left = {op for _, op, _ in ex.fallback}
    assert left <= {"aten.convolution", "aten.convolution_backward", "aten.max_pool2d_with_indices",
                    "aten.max_pool2d_with_indices_backward"}, left
    fused = {op for r in ex.regions for op in r}
    assert "aten.relu" in fused or "aten.threshold_backward" in fused, fused


def test_vision_transformer():
    tv = pytest.importorskip("torchvision")
    check_model(lambda: tv.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                    hidden_dim=32, mlp_dim=64, num_classes=10, dropout=0.0),
                torch.randn(2, 3, 32, 32))


def test_gpt2():
    T = pytest.importorskip("transformers")
    cfg = T.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, resid_pdrop=0.0,
                       embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    check_model(lambda: T.GPT2LMHeadModel(cfg), torch.randint(0, 100, (2, 8)))


def test_llama():
    T = pytest.importorskip("transformers")
    cfg = T.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
                        intermediate_size=64, vocab_size=100, max_position_embeddings=64, bos_token_id=0,
                        eos_token_id=0)
    check_model(lambda: T.LlamaForCausalLM(cfg), torch.randint(0, 100, (2, 8)))
