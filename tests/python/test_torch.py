"""The torch side: tensors in and out, the host OpenMP runtime, the custom
op, and the transformers backend. Skipped where torch (or transformers) is
not installed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashcpu  # noqa: E402
import reference  # noqa: E402


def test_torch_tensors_in_and_out():
    torch.manual_seed(0)
    q = torch.randn(2, 5, 8, 64)
    k = torch.randn(2, 40, 2, 64)
    v = torch.randn(2, 40, 2, 64)
    out, lse = flashcpu.attention(q, k, v, causal=True, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    expected, expected_lse = reference.attention(q.numpy(), k.numpy(), v.numpy(), causal=True)
    np.testing.assert_allclose(out.numpy(), expected, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(lse.numpy(), expected_lse, atol=2e-4)
    qb, kb, vb = (x.to(torch.bfloat16) for x in (q, k, v))
    outb = flashcpu.attention(qb, kb, vb, causal=True)
    assert outb.dtype == torch.bfloat16
    expected_b = reference.attention(*(x.float().numpy() for x in (qb, kb, vb)), causal=True)[0]
    np.testing.assert_allclose(outb.float().numpy(), expected_b, atol=2e-2)
    given = torch.empty_like(q)
    assert flashcpu.attention(q, k, v, out=given) is given


def test_default_context_runs_on_torchs_openmp_runtime():
    torch.matmul(torch.randn(64, 64), torch.randn(64, 64))
    context = flashcpu.Context()
    if context.host_runtime is None:
        pytest.skip("this torch brings no OpenMP runtime of its own")
    assert "threads from the host's OpenMP runtime" in context.describe()
    q, k, v = torch.randn(1, 1, 8, 64), torch.randn(1, 300, 2, 64), torch.randn(1, 300, 2, 64)
    out = flashcpu.attention(q, k, v, context=context)
    expected = reference.attention(q.numpy(), k.numpy(), v.numpy())[0]
    np.testing.assert_allclose(out.numpy(), expected, atol=2e-5, rtol=1e-4)


def test_custom_op_and_its_fake():
    import flashcpu.torch_ops  # noqa: F401
    q, k, v = torch.randn(1, 4, 4, 32), torch.randn(1, 9, 2, 32), torch.randn(1, 9, 2, 32)
    out = torch.ops.flashcpu.attention(q, k, v, True)
    np.testing.assert_allclose(out.numpy(), flashcpu.attention(q, k, v, causal=True).numpy())
    torch.library.opcheck(torch.ops.flashcpu.attention.default, (q, k, v, True))


def test_transformers_backend():
    transformers = pytest.importorskip("transformers")
    import flashcpu.transformers as backend
    from transformers import AttentionInterface
    name = backend.register()
    assert "flash" not in name
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return backend.attention_forward(*args, **kwargs)

    AttentionInterface.register(name, counted)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=2, num_attention_heads=8,
                                      num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 24))
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        expected = model.generate(ids, max_new_tokens=8, do_sample=False)
        reference_logits = model(ids).logits
        model.set_attn_implementation(name)
        tokens = model.generate(ids, max_new_tokens=8, do_sample=False)
        logits = model(ids).logits
    assert calls, "the model never called flashcpu's attention"
    assert torch.equal(tokens, expected)
    assert (logits - reference_logits).abs().max().item() < 1e-4
