"""flashcpu.attention, flashcpu.merge_states and flashcpu.info."""

import ctypes

from . import _arrays, _context, _model_call, _quantized, errors
from ._library import AdditiveMask, AttentionParams, FLAG_CAUSAL, KernelInfo, Tensor

_lib = None  # set by __init__
_defaults = None  # AttentionParams at the library's defaults


def new_params():
    """AttentionParams at the library's defaults."""
    global _defaults
    if _defaults is None:
        defaults = AttentionParams()
        _lib.flashcpu_attention_params_init(ctypes.byref(defaults))
        _defaults = defaults
    return AttentionParams.from_buffer_copy(_defaults)


def set_options(params, keep, *, heads, batches, causal, window, softcap, scale,
                sinks, alibi_slopes):
    """Sets what flashcpu_attention and flashcpu_attention_paged share:
    batches is B (or R, the requests) for [B, Hq] ALiBi slopes. Arrays the
    call reads go to keep."""
    params.scale = 0.0 if scale is None else _arrays.float32(scale, "scale", "1/sqrt(D)")
    params.flags = FLAG_CAUSAL if causal else 0
    try:
        left, right = window
    except (TypeError, ValueError):
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", f"window {window!r}: expected (left, right)") from None
    params.window_left = _arrays.integer(left, "window left")
    params.window_right = _arrays.integer(right, "window right")
    params.softcap = _arrays.float32(softcap or 0.0, "softcap", "off")
    if sinks is not None:
        address, code, array = _arrays.small_vector(
            sinks, "sinks", lambda shape: None if shape == (heads,) else
            f"shape {list(shape)}; expected [Hq] = [{heads}]",
            (_arrays.F32, _arrays.F16, _arrays.BF16))
        params.sinks, params.sinks_dtype = address, code
        keep.append(array)
    if alibi_slopes is not None:
        def check(shape):
            if shape in ((heads,), (1, heads), (batches, heads)):
                return None
            return (f"shape {list(shape)}; expected [Hq] = [{heads}] or "
                    f"[B, Hq] = [{batches}, {heads}]")
        address, _, array = _arrays.small_vector(alibi_slopes, "alibi_slopes", check)
        stride = 0
        if len(array.shape) == 2 and array.shape[0] > 1:
            stride = _arrays.row_stride(array)
            if stride < heads:  # rows that share memory (a broadcast view): a copy
                address, _, array = _arrays.small_vector(_arrays.contiguous(array),
                                                         "alibi_slopes", check)
                stride = heads
        params.alibi_slopes, params.alibi_batch_stride = address, stride
        keep.append(array)


_plain = {}  # (causal, window, softcap, scale) -> (AttentionParams, address)


def _new_plain(causal, window, softcap, scale):
    params = new_params()
    set_options(params, None, heads=0, batches=0, causal=causal, window=window,
                softcap=softcap, scale=scale, sinks=None, alibi_slopes=None)
    return params


def plain_params_address(causal, window, softcap, scale):
    """plain_params and its address, shared for these options, or None
    where they cannot be a dict key. A caller that passes the address keeps
    the pair while the call runs (another thread may drop it from the
    cache meanwhile)."""
    try:
        key = (bool(causal), tuple(window), softcap, scale)
        found = _plain.get(key)
    except TypeError:
        return None
    if found is None:
        params = _new_plain(causal, window, softcap, scale)
        if len(_plain) >= 64:
            _plain.clear()
        found = _plain[key] = (params, ctypes.addressof(params))
    return found


def plain_params(causal, window, softcap, scale):
    """The params of a call that passes no arrays in them (no masks,
    lengths, sinks, slopes or scales): made once per option set and shared
    read-only (the library takes them as const), so a call in a model's
    loop skips new_params and set_options; made each time (and checked)
    where the options are unhashable."""
    found = plain_params_address(causal, window, softcap, scale)
    return found[0] if found is not None else _new_plain(causal, window, softcap, scale)


def _kv_view(x, quantized, layout, what, params, keep):
    """The view of k or v, and for quantized codes (a flashcpu.Quantized, or
    an int8 / uint8 / float8 array: `quantized`) their scales in params."""
    if not quantized:
        return _arrays.view(x, layout, what)
    x = _quantized.as_quantized(x)
    view = _quantized.codes_view(x, layout, what)
    scales = _quantized.scales_view(x, layout, what, keep)
    if scales is not None:
        setattr(params, f"{what}_scales", ctypes.pointer(scales))
    return view


def _additive(mask, batch, heads, rows, keys):
    """An AdditiveMask over a float32 array broadcastable to [B, Hq, L, S]
    (dims of extent 1 broadcast); no copy."""
    shape, strides, address = _arrays.geometry(mask)
    if _arrays.dtype_of(mask) != _arrays.F32:
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", "additive_mask must be float32 (convert it once per step)")
    if len(shape) > 4:
        raise errors.ShapeMismatchError("SHAPE_MISMATCH",
                                        f"additive_mask has {len(shape)} dims; at most 4")
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    strides = (0,) * (4 - len(strides)) + tuple(strides)
    full = (batch, heads, rows, keys)
    result = AdditiveMask(address)
    for i in range(4):
        if shape[i] not in (1, full[i]):
            raise errors.ShapeMismatchError(
                "SHAPE_MISMATCH", f"additive_mask shape {shape} does not broadcast to "
                f"[B, Hq, L, S] = {list(full)}")
        if strides[i] < 0:
            raise errors.BadLayoutError("BAD_LAYOUT", "additive_mask has a negative stride")
        result.strides[i] = 0 if shape[i] == 1 else strides[i]
    return result


def _tree(mask, batch, rows):
    """(TreeMask, packed words) from a boolean array [B or 1, L, num_keys]:
    row i of batch b sees tree key t when mask[b, i, t]. Packed into the
    C layout (a small copy: one bit per entry)."""
    import numpy
    from ._library import TreeMask
    array = mask.cpu().numpy() if _arrays.kind_of(mask) == "torch" else numpy.asarray(mask)
    if array.dtype != numpy.bool_ or array.ndim != 3 or array.shape[0] not in (1, batch):
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", "tree_mask must be a boolean array [B or 1, L, num_keys]")
    if array.shape[1] != rows:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"tree_mask has {array.shape[1]} rows; q has L = {rows}")
    keys = array.shape[2]
    words = (keys + 63) // 64
    padded = numpy.zeros(array.shape[:2] + (words * 64,), dtype=numpy.bool_)
    padded[:, :, :keys] = array
    packed = numpy.packbits(padded, axis=-1, bitorder="little")
    bits = numpy.ascontiguousarray(packed).view("<u8")  # bit t of word t / 64
    tree = TreeMask(bits.ctypes.data, array.shape[1], keys, words,
                    0 if array.shape[0] == 1 else array.shape[1] * words)
    return tree, bits


def _set_int64_array(params, keep, field, values, count, what):
    """count int64 values into params.field (None: left unset)."""
    if values is None:
        return
    array, given = _arrays.int64_array(values, field)
    if given != count:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"{field} has {given} entries; expected {what} = {count}")
    setattr(params, field, array)
    keep.append(array)


def set_query_offsets(params, keep, query_offsets, count, what="B"):
    """count int64 query offsets into params (None: none)."""
    _set_int64_array(params, keep, "query_offsets", query_offsets, count, what)


def set_array_options(params, keep, batch, heads, rows, keys, *, kv_lengths=None,
                      additive_mask=None, tree_mask=None, query_offsets=None):
    """The options that are arrays, into params (keep holds what they point
    to while the call runs)."""
    set_query_offsets(params, keep, query_offsets, batch)
    _set_int64_array(params, keep, "kv_lengths", kv_lengths, batch, "B")
    if additive_mask is not None:
        mask = _additive(additive_mask, batch, heads, rows, keys)
        params.additive_mask = ctypes.pointer(mask)
        keep.append(mask)
    if tree_mask is not None:
        tree, bits = _tree(tree_mask, batch, rows)
        params.tree_mask = ctypes.pointer(tree)
        keep.extend((tree, bits))


def _run(ctx, qv, kv, vv, ov, lse_pointer, params):
    """flashcpu_attention on prepared views; raises on a non-zero status."""
    _context.check(_lib.flashcpu_attention(
        ctx.handle, ctypes.byref(qv), ctypes.byref(kv), ctypes.byref(vv), ctypes.byref(ov),
        lse_pointer, ctypes.byref(params)), ctx.handle)


def attention(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None,
              kv_lengths=None, additive_mask=None, tree_mask=None, sinks=None,
              alibi_slopes=None, query_offsets=None, out=None, return_lse=False,
              layout="bshd", context=None):
    """Exact attention softmax(q k^T * scale + masks) v, the way
    flashcpu_attention computes it (include/flashcpu/flashcpu.h).

    q [B, L, Hq, D], k [B, S, Hkv, D], v [B, S, Hkv, Dv] (layout "bshd"), or
    [B, H, seq, D] with layout "bhsd"; numpy arrays or torch CPU tensors of
    float32, float16 or bfloat16 (numpy: flashcpu.bf16(uint16 array) or
    ml_dtypes.bfloat16), any strides with head_dim contiguous, read in
    place. Hq must be a multiple of Hkv (GQA, MQA). k and v may each be
    quantized: a flashcpu.Quantized (codes with their format and scales,
    as flashcpu.quantize returns), or int8 / uint8 / torch float8 codes at
    scale 1; attention is then over the dequantized values.

    causal: bottom-right aligned; window (left, right), -1 unbounded;
    softcap > 0: cap * tanh(score / cap); scale: default 1/sqrt(D);
    kv_lengths: B lengths, each batch reads its first kv_lengths[b] keys;
    additive_mask: float32 broadcastable to [B, Hq, L, S] (-inf hides a key);
    tree_mask: boolean [B or 1, L, num_keys] over the newest num_keys keys;
    sinks: attention sinks (gpt-oss), one logit per query head [Hq], float32,
    float16 or bfloat16: one more key in every row's softmax, of that score
    and a zero value; alibi_slopes: float32 [Hq] or [B, Hq], the bias
    -slope * |p - j| for the row at position p and key j;
    query_offsets: B integers, row i of batch b at position
    i + (S_b - L) + query_offsets[b] (for keys split across calls whose
    results flashcpu.merge_states merges: a part holding keys [a, a + n) of
    S passes S - (a + n)).
    out: an array or tensor to write (same layout), returned; else a new one
    of q's kind and dtype. return_lse: also return the log-sum-exp, float32
    [B, Hq, L], natural log (the sink included).

    The GIL is released during the computation. On error a flashcpu.Error
    subclass is raised and out is left untouched."""
    ctx = _context.resolve(context)
    if (not return_lse and kv_lengths is None and additive_mask is None
            and tree_mask is None and sinks is None and alibi_slopes is None
            and query_offsets is None):
        # The common call in few steps; anything unusual takes the general path.
        given = out
        if out is None and _model_call.both_torch(q, v):
            out = _model_call.new_output(q, v)
        if out is not None and _model_call.attention_into(q, k, v, out, layout, causal, window,
                                                          softcap, scale, ctx):
            return out
        out = given
    if layout not in ("bshd", "bhsd"):
        raise errors.InvalidArgumentError("INVALID_ARGUMENT",
                                          f"layout {layout!r}: expected \"bshd\" or \"bhsd\"")
    qv = _arrays.view(q, layout, "q")
    quantized = (_quantized.is_quantized(k), _quantized.is_quantized(v))
    plain = (kv_lengths is None and additive_mask is None and tree_mask is None and
             sinks is None and alibi_slopes is None and query_offsets is None and
             not any(quantized))
    keep = []
    params = plain_params(causal, window, softcap, scale) if plain else new_params()
    kv, vv = (_kv_view(x, codes, layout, name, params, keep)
              for x, codes, name in ((k, quantized[0], "k"), (v, quantized[1], "v")))
    batch, rows, heads = qv.dims[0], qv.dims[1], qv.dims[2]
    keys, dv = kv.dims[1], vv.dims[3]
    if out is None:
        shape = (batch, rows, heads, dv) if layout == "bshd" else (batch, heads, rows, dv)
        out = _arrays.empty_like_kind(q, shape, qv.dtype)
    _arrays.check_writable(out, "out")
    ov = _arrays.view(out, layout, "out")
    lse = None
    if return_lse:
        lse = _arrays.empty_like_kind(_arrays.raw(q), (batch, heads, rows), _arrays.F32)

    if not plain:
        set_options(params, keep, heads=heads, batches=batch, causal=causal, window=window,
                    softcap=softcap, scale=scale, sinks=sinks, alibi_slopes=alibi_slopes)
    set_array_options(params, keep, batch, heads, rows, keys, kv_lengths=kv_lengths,
                      additive_mask=additive_mask, tree_mask=tree_mask,
                      query_offsets=query_offsets)
    _run(ctx, qv, kv, vv, ov, None if lse is None else _arrays.geometry(lse)[2], params)
    out = _arrays.raw(out)
    return (out, lse) if return_lse else out


def merge_states(states, lses, *, out=None, return_lse=False, layout="bshd",
                 context=None):
    """Merges attention results over disjoint key sets (flashcpu_merge_states):
    states: outputs [B, L, H, Dv] (or "bhsd"), any dtype; lses: their
    float32 [B, H, L] contiguous log-sum-exps. Returns the merged output
    (q's kind and the first state's dtype unless out is given), and its
    lse with return_lse."""
    if len(states) != len(lses) or not states:
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", "merge_states needs as many lses as states, at least one")
    ctx = _context.resolve(context)
    views = (Tensor * len(states))(*[_arrays.view(s, layout, f"states[{i}]")
                                     for i, s in enumerate(states)])
    first = views[0]
    pointers = (ctypes.c_void_p * len(lses))(
        *[_arrays.float32_pointer(x, f"lses[{i}]") for i, x in enumerate(lses)])
    batch, rows, heads, dv = (first.dims[i] for i in range(4))
    for i, x in enumerate(lses):
        if tuple(_arrays.geometry(x)[0]) != (batch, heads, rows):
            raise errors.ShapeMismatchError(
                "SHAPE_MISMATCH", f"lses[{i}] must be [B, H, L] = {[batch, heads, rows]}")
    if out is None:
        shape = (batch, rows, heads, dv) if layout == "bshd" else (batch, heads, rows, dv)
        out = _arrays.empty_like_kind(states[0], shape, first.dtype)
    _arrays.check_writable(out, "out")
    ov = _arrays.view(out, layout, "out")
    lse = _arrays.empty_like_kind(_arrays.raw(states[0]), (batch, heads, rows),
                                  _arrays.F32) if return_lse else None
    _context.check(_lib.flashcpu_merge_states(
        ctx.handle, len(states), views, pointers, ctypes.byref(ov),
        None if lse is None else _arrays.geometry(lse)[2]), ctx.handle)
    out = _arrays.raw(out)
    return (out, lse) if return_lse else out


def info():
    """The library: version, path, CPU features, the default context's ISA
    and threads, and this build's kernels."""
    from . import _library
    features = ctypes.create_string_buffer(512)
    _lib.flashcpu_cpu_features(features, 512)
    kernels, index, item = [], 0, KernelInfo()
    _lib.flashcpu_kernel_info_init(ctypes.byref(item))
    while _lib.flashcpu_kernel_info_get(index, ctypes.byref(item)):
        kernels.append({"name": item.name.decode(), "family": item.family.decode(),
                        "isa": _lib.flashcpu_isa_name(item.isa).decode(),
                        "runnable": bool(item.runnable),
                        "weights_dtype": {0: "f32", 1: "f16", 2: "bf16"}.get(
                            item.weights_dtype, "unknown"),
                        "forced_only": bool(item.forced_only)})
        index += 1
    ctx = _context.default_context()
    return {"version": _lib.flashcpu_version_string().decode(),
            "library": _library.loaded_path,
            "cpu_features": features.value.decode(),
            "isa": ctx.isa, "threads": ctx.threads,
            "host_openmp": ctx.host_runtime,
            "kernels": kernels}
