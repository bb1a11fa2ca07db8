"""flashcpu.native, the compiled fast path for torch tensors: built here
against the installed torch (skipped, with the reason, where a compiler,
ninja or torch's headers are missing; a build that fails with them all
present fails the test), then its results against the ctypes path's bytes
for every float dtype, both layouts, strided views and the options the
fast path takes; errors raised as flashcpu.Error with out untouched; what
it does not take left to the general path."""

import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashcpu  # noqa: E402
import flashcpu.native as native  # noqa: E402


def _missing():
    from torch.utils import cpp_extension
    if not shutil.which("ninja"):
        return "ninja is not installed"
    if not (shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")):
        return "no C++ compiler"
    headers = [os.path.join(p, "torch", "extension.h") for p in cpp_extension.include_paths()]
    if not any(os.path.exists(h) for h in headers):
        return "torch's C++ headers are not installed (Debian: libtorch-dev)"
    return None


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    reason = _missing()
    if reason:
        pytest.skip(f"cannot build flashcpu.native: {reason}")
    os.environ["FLASHCPU_NATIVE_DIR"] = str(tmp_path_factory.mktemp("native"))
    module = native.build()
    yield module
    native._module = False  # the other tests keep the ctypes path


def both_paths(compiled, call):
    """call() through the compiled path, then through ctypes."""
    native._module = compiled
    first = call()
    native._module = False
    second = call()
    native._module = compiled
    return first, second


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_same_bytes_as_ctypes(compiled, dtype, layout):
    torch.manual_seed(3)
    shape = (2, 7, 8, 64) if layout == "bshd" else (2, 8, 7, 64)
    kv_shape = (2, 50, 2, 64) if layout == "bshd" else (2, 2, 50, 64)
    q, k, v = (torch.randn(s).to(dtype) for s in (shape, kv_shape, kv_shape))
    for options in ({}, {"causal": True}, {"window": (9, 0), "softcap": 15.0, "scale": 0.2}):
        def call():
            out = torch.full(shape, float("nan"), dtype=dtype)
            assert flashcpu.attention(q, k, v, out=out, layout=layout, **options) is out
            return out
        fast, slow = both_paths(compiled, call)
        assert torch.equal(fast.view(torch.int16 if dtype != torch.float32 else torch.int32),
                           slow.view(torch.int16 if dtype != torch.float32 else torch.int32))
        assert not torch.isnan(fast).any()


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_a_new_output_has_the_given_outputs_bytes(compiled, layout):
    # out=None on torch tensors takes the short path too (compiled or
    # ctypes): q's sizes, v's head_dim (here not q's), q's dtype.
    torch.manual_seed(4)
    shape = (2, 5, 8, 64) if layout == "bshd" else (2, 8, 5, 64)
    kv_shape = (2, 40, 4, 64) if layout == "bshd" else (2, 4, 40, 64)
    q, k = torch.randn(shape).bfloat16(), torch.randn(kv_shape).bfloat16()
    v = torch.randn(kv_shape[:3] + (32,)).bfloat16()
    given = torch.empty(shape[:3] + (32,), dtype=torch.bfloat16)
    flashcpu.attention(q, k, v, out=given, layout=layout, causal=True)
    general = flashcpu.attention(q, k, v, layout=layout, causal=True, return_lse=True)[0]

    def call():
        return flashcpu.attention(q, k, v, layout=layout, causal=True)
    for new in both_paths(compiled, call):
        assert new.dtype == torch.bfloat16 and new.shape == given.shape
        assert torch.equal(new.view(torch.int16), given.view(torch.int16))
        assert torch.equal(new.view(torch.int16), general.view(torch.int16))


def test_strided_views(compiled):
    torch.manual_seed(4)
    big = torch.randn(3, 40, 12, 96)
    q = big[:, :5, :8, :64]            # strides of the big tensor
    k = torch.randn(3, 2, 30, 64).transpose(1, 2)      # [3, 30, 2, 64] head-major memory
    v = torch.randn(3, 2, 40, 64).transpose(1, 2)[:, 5:35]

    def call():
        out = torch.empty(3, 5, 8, 64)
        flashcpu.attention(q, k, v, out=out, causal=True)
        return out
    fast, slow = both_paths(compiled, call)
    assert torch.equal(fast, slow)
    # The compiled function takes these views itself (status 0, not -1).
    from flashcpu import _api, _context
    direct = torch.empty(3, 5, 8, 64)
    params = _api.plain_params_address(True, (-1, -1), 0.0, None)
    assert compiled.attention_into(q, k, v, direct, False, False,
                                   _context.default_context().handle.value, params[1]) == 0
    assert torch.equal(direct, fast)
    expected = flashcpu.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    np.testing.assert_allclose(fast.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_errors_leave_out_untouched(compiled):
    native._module = compiled
    q = torch.randn(1, 3, 8, 64)
    k = torch.randn(1, 20, 3, 64)  # 8 heads are not a multiple of 3
    v = torch.randn(1, 20, 3, 64)
    out = torch.full((1, 3, 8, 64), 7.0)
    with pytest.raises(flashcpu.ShapeMismatchError):
        flashcpu.attention(q, k, v, out=out)
    assert torch.equal(out, torch.full_like(out, 7.0))
    with pytest.raises(flashcpu.InvalidArgumentError):  # a window the library refuses
        flashcpu.attention(q, torch.randn(1, 20, 2, 64), torch.randn(1, 20, 2, 64), out=out,
                           window=(-5, 0))
    assert torch.equal(out, torch.full_like(out, 7.0))


def test_what_it_does_not_take_goes_the_general_way(compiled):
    native._module = compiled
    q = torch.randn(1, 3, 8, 64)
    k = torch.randn(1, 20, 2, 64)
    out = torch.empty(1, 3, 8, 64)
    assert compiled.attention_into(q.double(), k, k, out, False, False, 0, 0) == -1
    assert compiled.attention_into(q[0], k, k, out, False, False, 0, 0) == -1
    with pytest.raises(flashcpu.UnsupportedDtypeError):
        flashcpu.attention(q.double(), k.double(), k.double(), out=out.double())
    with pytest.raises(flashcpu.InvalidArgumentError):
        flashcpu.attention(q, k, k, out=out, layout="hsbd")


def test_off_by_environment(compiled, monkeypatch):
    monkeypatch.setenv("FLASHCPU_NATIVE", "0")
    native.reset()
    assert native.available() is None
    monkeypatch.delenv("FLASHCPU_NATIVE")
    native.reset()
    assert native.available() is not None  # the build is found again


def test_the_transformers_call(compiled):
    from flashcpu import _model_call
    torch.manual_seed(5)
    q = torch.randn(2, 8, 3, 64, dtype=torch.bfloat16)  # [B, H, L, D], as transformers passes
    k = torch.randn(2, 2, 30, 64, dtype=torch.bfloat16)
    v = torch.randn(2, 2, 30, 64, dtype=torch.bfloat16)

    def call():
        return _model_call.attention(q, k, v, True, (-1, -1), 0.0, None)
    fast, slow = both_paths(compiled, call)
    assert fast.shape == (2, 3, 8, 64)
    assert torch.equal(fast.view(torch.int16), slow.view(torch.int16))


def test_the_transformers_call_reports_the_library_error(compiled):
    from flashcpu import _model_call
    q = torch.randn(1, 8, 1, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 3, 5, 64, dtype=torch.bfloat16)  # 8 query heads over 3: no GQA group
    v = torch.randn(1, 3, 5, 64, dtype=torch.bfloat16)
    native._module = compiled
    with pytest.raises(flashcpu.Error, match="heads"):
        _model_call.attention(q, k, v, True, (-1, -1), 0.0, None)


def test_paged_and_append(compiled):
    torch.manual_seed(6)
    k_cache = torch.zeros(6, 16, 2, 64, dtype=torch.bfloat16)
    v_cache = torch.zeros(6, 16, 2, 64, dtype=torch.bfloat16)
    kv = flashcpu.PagedKV(k_cache, v_cache)
    k_new = torch.randn(40, 2, 64, dtype=torch.bfloat16)
    v_new = torch.randn(40, 2, 64, dtype=torch.bfloat16)
    slots = torch.tensor([5 * 16 + i for i in range(16)] + [2 * 16 + i for i in range(16)] +
                         [4 * 16 + i for i in range(8)], dtype=torch.int64)
    native._module = compiled
    flashcpu.kv_append(k_new, v_new, slots, kv)
    assert torch.equal(k_cache[5].view(torch.int16), k_new[:16].view(torch.int16))
    assert torch.equal(v_cache[4, :8].view(torch.int16), v_new[32:].view(torch.int16))
    with pytest.raises(flashcpu.InvalidArgumentError):  # a slot past the pool
        flashcpu.kv_append(k_new[:1], v_new[:1], torch.tensor([6 * 16]), kv)
    plan = flashcpu.Plan([0, 3, 4], [40, 20], [[5, 2, 4], [2, 5, 0]], num_heads=8, kv=kv)
    q = torch.randn(4, 8, 64, dtype=torch.bfloat16)

    def call():
        out = torch.full((4, 8, 64), float("nan"), dtype=torch.bfloat16)
        assert flashcpu.attention_paged(q, kv, plan, out=out, causal=True) is out
        return out
    fast, slow = both_paths(compiled, call)
    assert torch.equal(fast.view(torch.int16), slow.view(torch.int16))
    assert not torch.isnan(fast).any()
    direct = torch.empty(4, 8, 64, dtype=torch.bfloat16)
    from flashcpu import _api
    params = _api.plain_params_address(False, (-1, -1), 0.0, None)
    handle = plan.handle_for(2, 2, kv)
    import ctypes
    assert compiled.attention_paged_into(q, direct, ctypes.addressof(kv._struct), handle.value,
                                         plan.context.handle.value, params[1]) == 0


class _Attention:
    """What transformers passes as the module: is_causal, training."""

    def __init__(self, **fields):
        self.training = False
        self.__dict__.update(fields)


def test_the_compiled_backend_function(compiled):
    import flashcpu.transformers as backend
    native._module = compiled
    function = backend.function()
    assert function is compiled.backend_forward
    torch.manual_seed(8)
    q = torch.randn(2, 8, 3, 64, dtype=torch.bfloat16)  # [B, H, L, D]
    k = torch.randn(2, 2, 30, 64, dtype=torch.bfloat16)
    v = torch.randn(2, 2, 30, 64, dtype=torch.bfloat16)
    mask = torch.ones(2, 1, 3, 30, dtype=torch.bool)
    mask[1, :, :, 25:] = False
    cases = [
        (_Attention(is_causal=True), None, dict(dropout=0.0, scaling=0.1, position_ids=None)),
        (_Attention(), None, dict(scaling=None)),  # no is_causal: causal
        (_Attention(is_causal=True), None, dict(is_causal=False)),
        (_Attention(is_causal=True), mask, dict(dropout=0.0)),  # the Python path
        (_Attention(is_causal=True), None, dict(sliding_window=4)),
        (_Attention(is_causal=True), None, dict(softcap=5.0, dropout=0)),
    ]
    for module, attention_mask, options in cases:
        out, weights = function(module, q, k, v, attention_mask, **options)
        expected, _ = backend.attention_forward(module, q, k, v, attention_mask, **options)
        assert weights is None and out.shape == (2, 3, 8, 64)
        assert torch.equal(out.view(torch.int16), expected.view(torch.int16)), options
    with pytest.raises(flashcpu.Error, match="heads"):  # the library's message
        function(_Attention(is_causal=True), q, k[:, :1].expand(2, 3, 30, 64), v, None)


def test_the_compiled_backend_follows_the_default_context(compiled):
    import flashcpu.transformers as backend
    from flashcpu import _context
    native._module = compiled
    function = backend.function()
    q = torch.randn(1, 4, 1, 32)
    k = torch.randn(1, 2, 9, 32)
    v = torch.randn(1, 2, 9, 32)
    first, _ = function(_Attention(is_causal=True), q, k, v, None)
    _context.default_context().close()
    with pytest.raises(flashcpu.InvalidArgumentError, match="closed"):
        function(_Attention(is_causal=True), q, k, v, None)
    del _context._local.context  # the next call makes a new default context
    again, _ = function(_Attention(is_causal=True), q, k, v, None)
    assert torch.equal(first, again)


def test_the_compiled_backend_reuses_only_a_result_nobody_holds(compiled):
    """A decode result that nobody holds any more (no reference, view or
    weak reference) is handed out again; one still held is never written."""
    import gc
    import weakref
    import flashcpu.transformers as backend
    native._module = compiled
    function = backend.function()
    module = _Attention(is_causal=True)
    torch.manual_seed(9)
    calls = [tuple(torch.randn(s, dtype=torch.bfloat16) for s in
                   ((1, 8, 1, 64), (1, 2, 40, 64), (1, 2, 40, 64))) for _ in range(2)]
    expected = [backend.attention_forward(module, *c, None)[0] for c in calls]

    def call(i):
        return function(module, *calls[i], None, dropout=0.0)[0]

    gc.collect()
    call(0)
    address = call(0).data_ptr()  # the one before was dropped: handed out again
    assert call(1).data_ptr() == address
    held = call(0)
    other = call(1)
    assert held.data_ptr() != other.data_ptr()
    assert torch.equal(held.view(torch.int16), expected[0].view(torch.int16))
    assert torch.equal(other.view(torch.int16), expected[1].view(torch.int16))
    del other
    view = call(0).reshape(1, 1, -1)  # a view holds the storage
    fresh = call(1)
    assert torch.equal(view.view(1, 1, 8, 64).view(torch.int16), expected[0].view(torch.int16))
    assert torch.equal(fresh.view(torch.int16), expected[1].view(torch.int16))
    del view, fresh
    result = call(0)
    address = result.data_ptr()
    watched = weakref.ref(result)
    del result
    assert watched() is not None  # kept for the next call
    assert call(1).data_ptr() != address  # but not handed out while watched
    marked = call(0)
    marked.requires_grad_(True)
    del marked
    assert not call(1).requires_grad
    with torch.inference_mode():
        inside = call(0)
        assert inside.is_inference()
    del inside
    outside = call(1)
    assert not outside.is_inference()
    assert torch.equal(outside.view(torch.int16), expected[1].view(torch.int16))
    big = tuple(torch.randn(s, dtype=torch.float32) for s in
                ((1, 8, 1024, 64), (1, 2, 1024, 64), (1, 2, 1024, 64)))
    watched = weakref.ref(function(module, *big, None)[0])
    assert watched() is None  # 2 MB: not kept alive between calls


def test_the_installed_package_carries_the_extensions_sources():
    """pip installs what flashcpu.native.build() compiles (setup.py's
    package_data lists each file the build reads)."""
    setup = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "python", "setup.py")
    with open(setup) as f:
        text = f.read()
    for path in native._FILES:
        assert f'"{os.path.basename(path)}"' in text, path
