"""The torch side: tensors in and out, the host OpenMP runtime, the custom
op, and the transformers backend. Skipped where torch (or transformers) is
not installed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashcpu  # noqa: E402
import reference  # noqa: E402

needs_custom_op = pytest.mark.skipif(
    not hasattr(torch.library, "custom_op"),
    reason=f"torch.library.opcheck needs torch 2.4 or later, not {torch.__version__}")


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


@pytest.mark.parametrize("fmt", ["i8", "u8", "f8_e4m3", "f8_e5m2", "q8_0"])
def test_quantized_torch_tensors(fmt):
    torch.manual_seed(1)
    q = torch.randn(1, 6, 8, 64, dtype=torch.bfloat16)
    k, v = torch.randn(1, 50, 2, 64), torch.randn(1, 50, 2, 64)
    kq, vq = flashcpu.quantize(k, fmt), flashcpu.quantize(v, fmt)
    assert isinstance(kq.codes, torch.Tensor)
    if fmt == "f8_e4m3" and hasattr(torch, "float8_e4m3fn"):
        assert kq.codes.dtype == torch.float8_e4m3fn
        plain = flashcpu.Quantized(kq.codes, scales=kq.scales)  # format from the dtype
        assert plain.format == "f8_e4m3"
    kd, vd = flashcpu.dequantize(kq), flashcpu.dequantize(vq)
    assert isinstance(kd, torch.Tensor) and kd.dtype == torch.float32
    out = flashcpu.attention(q, kq, vq, causal=True)
    assert out.dtype == torch.bfloat16
    expected = reference.attention(q.float().numpy(), kd.numpy(), vd.numpy(), causal=True)[0]
    np.testing.assert_allclose(out.float().numpy(), expected, atol=2e-2)


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


@needs_custom_op
def test_custom_op_and_its_fake():
    import flashcpu.torch_ops  # noqa: F401
    q, k, v = torch.randn(1, 4, 4, 32), torch.randn(1, 9, 2, 32), torch.randn(1, 9, 2, 32)
    out = torch.ops.flashcpu.attention(q, k, v, True)
    np.testing.assert_allclose(out.numpy(), flashcpu.attention(q, k, v, causal=True).numpy())
    torch.library.opcheck(torch.ops.flashcpu.attention.default, (q, k, v, True))


def test_sinks_and_alibi_from_tensors():
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 6, 8, 32), torch.randn(2, 30, 2, 32), torch.randn(2, 30, 2, 32)
    sinks = torch.randn(8).to(torch.bfloat16)
    slopes = torch.rand(2, 8)
    out, lse = flashcpu.attention(q, k, v, causal=True, sinks=sinks, alibi_slopes=slopes,
                                  return_lse=True)
    expected, expected_lse = reference.attention(
        q.numpy(), k.numpy(), v.numpy(), causal=True, sinks=sinks.float().numpy(),
        alibi=slopes.numpy())
    np.testing.assert_allclose(out.numpy(), expected, atol=5e-5, rtol=1e-4)
    np.testing.assert_allclose(lse.numpy(), expected_lse, atol=5e-4)


def paged_case(dtype=torch.float32, layout="nhd", page_size=16, requests=None, seed=3):
    """Torch tensors of a ragged step over a page pool in random order:
    (q, k_cache, v_cache, cu, seq, table)."""
    generator = torch.Generator().manual_seed(seed)
    requests = requests or [(1, 33), (0, 5), (20, 50), (3, 3), (2, 0)]
    used = [-(-s // page_size) for _, s in requests]
    num_pages = sum(used) + 2
    order = torch.randperm(num_pages, generator=generator).to(torch.int32)
    table = torch.full((len(requests), max(used) + 1), -1, dtype=torch.int32)
    at = 0
    for r, count in enumerate(used):
        table[r, :count] = order[at:at + count]
        at += count
    cu = torch.tensor([0] + list(np.cumsum([r for r, _ in requests])), dtype=torch.int32)
    seq = torch.tensor([s for _, s in requests], dtype=torch.int32)
    shape = (num_pages, page_size, 2) if layout == "nhd" else (num_pages, 2, page_size)
    k_cache = torch.randn(shape + (64,), generator=generator).to(dtype)
    v_cache = torch.randn(shape + (64,), generator=generator).to(dtype)
    q = torch.randn(int(cu[-1]), 8, 64, generator=generator).to(dtype)
    return q, k_cache, v_cache, cu, seq, table


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_paged_with_torch_tensors(dtype, layout):
    q, k_cache, v_cache, cu, seq, table = paged_case(dtype, layout)
    kv = flashcpu.PagedKV(k_cache, v_cache, layout=layout)
    sinks = torch.randn(8).to(dtype)
    with flashcpu.Plan(cu, seq, table, num_heads=8, kv=kv) as plan:
        out, lse = flashcpu.attention_paged(q, kv, plan, causal=True, sinks=sinks,
                                            return_lse=True)
        given = torch.full_like(out, 7.0)
        assert flashcpu.attention_paged(q, kv, plan, causal=True, sinks=sinks,
                                        out=given) is given
    assert isinstance(out, torch.Tensor) and out.dtype == dtype
    assert out.shape == (q.shape[0], 8, 64) and lse.shape == (8, q.shape[0])
    expected, expected_lse = reference.paged_attention(
        q.float().numpy(), k_cache.float().numpy(), v_cache.float().numpy(), cu.numpy(),
        seq.numpy(), table.numpy(), layout=layout, causal=True, sinks=sinks.float().numpy())
    atol = 2e-5 if dtype == torch.float32 else 2e-2
    np.testing.assert_allclose(out.float().numpy(), expected, atol=atol, rtol=1e-3)
    finite = np.isfinite(expected_lse)
    np.testing.assert_allclose(lse.numpy()[finite], expected_lse[finite], atol=1e-3)
    assert torch.equal(given, out)


def test_kv_append_with_torch_tensors_then_attention():
    q, k_cache, v_cache, cu, seq, table = paged_case(torch.bfloat16, page_size=4,
                                                     requests=[(5, 5), (9, 9)])
    k_cache.zero_()
    v_cache.zero_()
    kv = flashcpu.PagedKV(k_cache, v_cache)
    k_new, v_new = torch.randn(14, 2, 64), torch.randn(14, 2, 64)  # float32 into bf16
    slots = torch.tensor([int(table[r, j // 4]) * 4 + j % 4
                          for r, n in ((0, 5), (1, 9)) for j in range(n)], dtype=torch.int64)
    flashcpu.kv_append(k_new, v_new, slots, kv)
    with flashcpu.Plan(cu, seq, table, num_heads=8, kv=kv) as plan:
        out = flashcpu.attention_paged(q, kv, plan, causal=True)
    for r, rows in enumerate((slice(0, 5), slice(5, 14))):
        expected = flashcpu.attention(q[None, rows], k_new[None, rows].to(torch.bfloat16),
                                      v_new[None, rows].to(torch.bfloat16), causal=True)
        assert torch.equal(out[rows], expected[0])


@needs_custom_op
def test_paged_custom_ops_and_their_fakes():
    import flashcpu.torch_ops  # noqa: F401
    q, k_cache, v_cache, cu, seq, table = paged_case()
    kv = flashcpu.PagedKV(k_cache, v_cache)
    with flashcpu.Plan(cu, seq, table, num_heads=8, kv=kv) as plan:
        named = plan.as_tensor()
        out = torch.ops.flashcpu.attention_paged(q, k_cache, v_cache, named, "nhd", True)
        assert torch.equal(out, flashcpu.attention_paged(q, kv, plan, causal=True))
        seq2 = seq.clone()
        seq2[0] -= 1  # another step: another plan
        with flashcpu.Plan(cu, seq2, table, num_heads=8, kv=kv) as plan2:
            other = torch.ops.flashcpu.attention_paged(q, k_cache, v_cache,
                                                       plan2.as_tensor(), "nhd", True)
        assert not torch.equal(other[:1], out[:1])
        torch.library.opcheck(torch.ops.flashcpu.attention_paged.default,
                              (q, k_cache, v_cache, named), {"causal": True})
    with pytest.raises(flashcpu.InvalidArgumentError, match="no open flashcpu.Plan"):
        torch.ops.flashcpu.attention_paged(q, k_cache, v_cache, named, "nhd", True)
    with pytest.raises(flashcpu.InvalidArgumentError, match="as_tensor"):
        torch.ops.flashcpu.attention_paged(q, k_cache, v_cache, torch.zeros(2, dtype=torch.int64))
    k_new, v_new = torch.randn(3, 2, 64), torch.randn(3, 2, 64)
    slots = torch.tensor([int(table[0, 0]) * 16 + 5, -1, int(table[2, 1]) * 16],
                         dtype=torch.int64)
    torch.ops.flashcpu.kv_append(k_new, v_new, slots, k_cache, v_cache)
    assert torch.equal(k_cache[int(table[0, 0]), 5], k_new[0])
    assert torch.equal(v_cache[int(table[2, 1]), 0], v_new[2])
    torch.library.opcheck(torch.ops.flashcpu.kv_append.default,
                          (k_new, v_new, slots, k_cache, v_cache))
    q4, k4, v4 = torch.randn(1, 3, 8, 32), torch.randn(1, 9, 2, 32), torch.randn(1, 9, 2, 32)
    sinks = torch.randn(8)
    out4 = torch.ops.flashcpu.attention(q4, k4, v4, True, sinks=sinks)
    assert torch.equal(out4, flashcpu.attention(q4, k4, v4, causal=True, sinks=sinks))


class CausalModule:
    """What the transformers backend reads of the attention module."""
    is_causal = True
    training = False


def test_transformers_sinks_argument():
    import flashcpu.transformers as backend

    torch.manual_seed(4)
    q, k, v = torch.randn(1, 8, 5, 32), torch.randn(1, 2, 12, 32), torch.randn(1, 2, 12, 32)
    s_aux = torch.randn(8)
    out, _ = backend.attention_forward(CausalModule(), q, k, v, None, scaling=0.2, s_aux=s_aux)
    expected, _ = reference.attention(*(x.transpose(1, 2).numpy() for x in (q, k, v)),
                                      causal=True, scale=0.2, sinks=s_aux.numpy())
    np.testing.assert_allclose(out.numpy(), expected, atol=2e-5, rtol=1e-4)


def test_transformers_call_without_masks_reads_strided_views():
    """The backend's call without mask arrays (its short path): q a
    transposed [B, L, H, D] tensor, K and V views into a longer cache, the
    output [B, L, H, D]."""
    import flashcpu.transformers as backend

    torch.manual_seed(5)
    q = torch.randn(2, 3, 8, 32).transpose(1, 2)
    cache_k, cache_v = torch.randn(2, 2, 20, 32), torch.randn(2, 2, 20, 32)
    k, v = cache_k[:, :, :12], cache_v[:, :, :12]
    out, _ = backend.attention_forward(CausalModule(), q, k, v, None, scaling=0.3)
    assert tuple(out.shape) == (2, 3, 8, 32)
    expected, _ = reference.attention(*(x.transpose(1, 2).numpy() for x in (q, k, v)),
                                      causal=True, scale=0.3)
    np.testing.assert_allclose(out.numpy(), expected, atol=2e-5, rtol=1e-4)
    # bf16, one query row: a decode step
    qb, kb, vb = (x.to(torch.bfloat16) for x in (q[:, :, -1:], k, v))
    out, _ = backend.attention_forward(CausalModule(), qb, kb, vb, None, scaling=0.3)
    expected, _ = reference.attention(*(x.float().transpose(1, 2).numpy() for x in (qb, kb, vb)),
                                      causal=True, scale=0.3)
    np.testing.assert_allclose(out.float().numpy(), expected, atol=1e-2, rtol=1e-2)


def test_transformers_call_without_masks_raises_as_attention_does():
    import flashcpu.transformers as backend

    q, k, v = torch.randn(1, 8, 5, 32), torch.randn(1, 3, 12, 32), torch.randn(1, 3, 12, 32)
    with pytest.raises(flashcpu.ShapeMismatchError):  # 8 query heads onto 3
        backend.attention_forward(CausalModule(), q, k, v, None)
    with pytest.raises(flashcpu.UnsupportedDtypeError):
        backend.attention_forward(CausalModule(), q.double(), k[:, :2].double(),
                                  v[:, :2].double(), None)


def test_transformers_short_path_matches_attention():
    """The backend's short path (views packed in one buffer, the library
    called on addresses) gives attention()'s bytes, options included, and
    declines what it does not take."""
    from flashcpu import _model_call

    torch.manual_seed(6)
    q = torch.randn(2, 5, 8, 32).transpose(1, 2)  # [B, H, L, D], strided
    k, v = torch.randn(2, 2, 24, 32)[:, :, :17], torch.randn(2, 2, 24, 48)[:, :, :17]
    for causal, window, softcap in ((True, (-1, -1), 0.0), (True, (6, 0), 5.0),
                                    (False, (-1, -1), 0.0)):
        out = _model_call.attention(q, k, v, causal, window, softcap, 0.3)
        assert out is not None and tuple(out.shape) == (2, 5, 8, 48)
        expected = flashcpu.attention(q, k, v, causal=causal, window=window,
                                      softcap=softcap, scale=0.3, layout="bhsd")
        assert torch.equal(out, expected.transpose(1, 2))
    assert _model_call.attention(q, k.half(), v, True, (-1, -1), 0.0, None) is None
    assert _model_call.attention(q.double(), k, v, True, (-1, -1), 0.0, None) is None
    assert _model_call.attention(q, k, v, True, (-1, -1), 0.0, [0.1]) is None  # unhashable
    free = len(_model_call._packs)
    with pytest.raises(flashcpu.ShapeMismatchError, match="head"):  # 8 query heads onto 3
        _model_call.attention(q, torch.randn(2, 3, 17, 32), torch.randn(2, 3, 17, 32),
                              True, (-1, -1), 0.0, None)
    assert len(_model_call._packs) == free  # the pack went back


def padded_mask(batch, rows, keys, pads, left=True):
    """A transformers-style boolean mask [B, 1, L, S]: bottom-right causal,
    the first (left) or last pads[b] keys of batch b hidden."""
    i = torch.arange(rows).view(-1, 1)
    j = torch.arange(keys).view(1, -1)
    mask = (j <= i + (keys - rows)).expand(batch, 1, rows, keys).clone()
    for b, pad in enumerate(pads):
        if left:
            mask[b, :, :, :pad] = False
        elif pad:
            mask[b, :, :, keys - pad:] = False
    return mask


def test_transformers_mask_plans_follow_the_mask_tensor():
    """A plan is reused only for the same live tensor, unchanged: a new mask
    of the same shape at a recycled address, or one changed in place, gets
    its own; an inference tensor (no version counter) works, and a layer
    index that does not grow plans again; the plan goes with its mask."""
    import gc

    import flashcpu.transformers as backend

    def fresh(mask, keys, rows):
        return backend._plan_mask(mask[:, :, :, :keys], rows)

    def same(a, b):
        return a[0] == b[0] and a[1] == b[1] and (
            (a[2] is None and b[2] is None) or torch.equal(a[2], b[2]))

    for step in range(12):  # new masks of one shape, freed in turn
        pads = (step % 3, (step * 5) % 4)
        mask = padded_mask(2, 6, 9, pads)
        for layer in range(3):
            assert same(backend._mask_plan(mask, 9, 6, layer), fresh(mask, 9, 6))
        del mask
    mask = padded_mask(2, 6, 9, (0, 0))
    first = backend._mask_plan(mask, 9, 6, 0)
    assert backend._mask_plan(mask, 9, 6, 1) is first
    mask[1, :, :, :2] = False  # changed in place
    assert same(backend._mask_plan(mask, 9, 6, 2), fresh(mask, 9, 6))
    with torch.inference_mode():
        frozen = padded_mask(2, 6, 9, (1, 0))
        first = backend._mask_plan(frozen, 9, 6, 0)
        assert same(first, fresh(frozen, 9, 6))
        assert backend._mask_plan(frozen, 9, 6, 1) is first
        frozen[0, :, :, :3] = False  # no version to tell, but a new forward
        assert same(backend._mask_plan(frozen, 9, 6, 0), fresh(frozen, 9, 6))
    entry = backend._local.planned
    del frozen
    gc.collect()
    assert entry.plan is None  # an additive mask is not kept past its tensor


def test_transformers_full_causal_mask_plans_no_lengths():
    """A causal mask over every key (a step without padding) plans as plain
    causal, which takes the short path; padding keeps its lengths."""
    import flashcpu.transformers as backend

    for rows in (1, 6):
        assert backend._plan_mask(padded_mask(2, rows, 9, (0, 0), left=False), rows) == \
            (True, None, None)
    causal, lengths, additive = backend._plan_mask(padded_mask(2, 1, 9, (0, 3), left=False), 1)
    assert causal and lengths == [9, 6] and additive is None


@pytest.mark.parametrize("case", ["batch-1 causal mask", "right-padded prompt",
                                  "left padding", "right padding, decode"])
def test_transformers_masks_match_the_reference(case):
    import flashcpu.transformers as backend

    torch.manual_seed(7)
    rows = 1 if "decode" in case else 6
    q, k, v = torch.randn(2, 8, rows, 32), torch.randn(2, 2, 11, 32), torch.randn(2, 2, 11, 32)
    if case == "batch-1 causal mask":
        mask = padded_mask(1, rows, 11, (0,))
    else:
        mask = padded_mask(2, rows, 11, (0, 3), left=case == "left padding")
    if case == "right-padded prompt":  # each row of the prompt sees its own prefix
        mask = torch.zeros(2, 1, rows, 11, dtype=torch.bool)
        for b, n in enumerate((6, 4)):
            mask[b, 0, :, :n] = torch.ones(rows, n).tril().bool()
            mask[b, 0, n:, :] = mask[b, 0, n - 1]
    with torch.inference_mode():
        out, _ = backend.attention_forward(CausalModule(), q, k, v, mask, scaling=0.25)
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf")).numpy()
    expected, _ = reference.attention(*(x.transpose(1, 2).numpy() for x in (q, k, v)),
                                      scale=0.25, additive=additive)
    np.testing.assert_allclose(out.numpy(), expected, atol=2e-5, rtol=1e-4)


def tiny_llama(transformers, seed):
    """A random f32 Llama of 2 layers, 8 query and 2 KV heads, vocabulary 128."""
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=2, num_attention_heads=8,
                                      num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).eval()


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
    model = tiny_llama(transformers, seed=0)
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


def test_transformers_generate_with_padding_in_inference_mode():
    """Left-padded prompts under torch.inference_mode (masks without a
    version counter): the same greedy tokens as sdpa."""
    transformers = pytest.importorskip("transformers")
    import flashcpu.transformers as backend
    name = backend.register()
    model = tiny_llama(transformers, seed=1)
    ids = torch.randint(1, 128, (2, 16))
    attention_mask = torch.ones_like(ids)
    attention_mask[0, :5] = 0
    results = {}
    with torch.inference_mode():
        for backend_name in ("sdpa", name):
            model.set_attn_implementation(backend_name)
            results[backend_name] = model.generate(ids, attention_mask=attention_mask,
                                                   max_new_tokens=6, do_sample=False,
                                                   pad_token_id=0)
    assert torch.equal(results[name], results["sdpa"])


def test_transformers_gpt_oss_with_sinks():
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "GptOssConfig"):
        pytest.skip("this transformers has no gpt-oss")
    import flashcpu.transformers as backend
    name = backend.register()
    config = transformers.GptOssConfig(
        vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
        num_experts_per_tok=2, sliding_window=8, max_position_embeddings=256,
        layer_types=["sliding_attention", "full_attention"])
    torch.manual_seed(0)
    model = transformers.GptOssForCausalLM(config).eval()
    for layer in model.model.layers:  # learned sinks, not the initial zeros
        layer.self_attn.sinks.data.normal_()
    ids = torch.randint(0, 128, (1, 20))
    with torch.no_grad():
        model.set_attn_implementation("eager")
        expected = model(ids).logits
        model.set_attn_implementation(name)
        logits = model(ids).logits
    assert (logits - expected).abs().max().item() < 1e-4
