"""Paged KV caches and ragged batches: flashcpu.PagedKV, flashcpu.Plan,
flashcpu.attention_paged and flashcpu.kv_append (the C API's section "paged
KV caches, ragged batches", include/flashcpu/flashcpu.h)."""

import ctypes
import itertools
import weakref

from . import _api, _arrays, _context, _quantized, errors, native
from ._library import Batch, PagedKV as _PagedKVStruct, TreeMask

_lib = None  # set by __init__

LAYOUTS = ("nhd", "hnd")


class PagedKV:
    """One layer's paged K and V caches, read and written in place.

    k_cache [num_pages, page_size, Hkv, D] and v_cache [num_pages, page_size,
    Hkv, Dv] (layout "nhd", FlashAttention's and vLLM's), or [num_pages, Hkv,
    page_size, D] (layout "hnd", FlashInfer's other one): numpy arrays
    (flashcpu.bf16 for bfloat16 bits) or torch CPU tensors of float32,
    float16 or bfloat16, K and V of dtypes of their own, any non-negative
    strides with head_dim contiguous (slices of a larger pool, and K and V
    in one buffer: kv[:, 0] and kv[:, 1] of [num_pages, 2, ...]).
    Either cache may be quantized: a flashcpu.Quantized whose codes have
    that shape (q8_0: the last dim in bytes) and whose scales broadcast to
    it, [num_pages, page_size, Hkv, 1] per token and head in "nhd" (which
    kv_append writes), [1] per tensor, and so on.

    The object keeps the arrays alive and holds their addresses: make it
    again if a cache is reallocated."""

    def __init__(self, k_cache, v_cache, layout="nhd"):
        if layout not in LAYOUTS:
            raise errors.InvalidArgumentError(
                "INVALID_ARGUMENT", f"layout {layout!r}: expected \"nhd\" or \"hnd\"")
        self.layout = layout
        struct = _PagedKVStruct()
        struct.struct_size = ctypes.sizeof(_PagedKVStruct)
        order = (0, 1, 2, 3) if layout == "nhd" else (0, 2, 1, 3)
        names = ("[num_pages, page_size, Hkv, D]" if layout == "nhd"
                 else "[num_pages, Hkv, page_size, D]")
        found, self._keep = [], []
        for side, cache in (("k", k_cache), ("v", v_cache)):
            what = f"{side}_cache"
            if _quantized.is_quantized(cache):
                found.append(self._quantized_side(struct, side, cache, what, names))
                continue
            shape, strides, address = _arrays.geometry(cache)
            if len(shape) != 4:
                raise errors.ShapeMismatchError(
                    "SHAPE_MISMATCH", f"{what} has {len(shape)} dims; expected 4 "
                    f"({layout}: {names})")
            if shape[3] > 1 and strides[3] != 1:
                raise errors.BadLayoutError(
                    "BAD_LAYOUT", f"{what}'s last dim (head_dim) must be contiguous "
                    f"(stride {strides[3]})")
            if any(s < 0 for s in strides):
                raise errors.BadLayoutError("BAD_LAYOUT", f"{what} has a negative stride")
            dims = [shape[axis] for axis in order]
            found.append(dims)
            setattr(struct, side, _arrays._address(shape, address))
            setattr(struct, f"{side}_dtype", _arrays.dtype_of(cache))
            side_strides = getattr(struct, f"{side}_strides")
            for i in range(3):
                side_strides[i] = strides[order[i]]
        (pages, page_size, heads, dim), (v_pages, v_page_size, v_heads, v_dim) = found
        if (pages, page_size, heads) != (v_pages, v_page_size, v_heads):
            raise errors.ShapeMismatchError(
                "SHAPE_MISMATCH", f"k_cache and v_cache disagree: num_pages, page_size, "
                f"Hkv = {[pages, page_size, heads]} and {[v_pages, v_page_size, v_heads]}")
        struct.num_pages, struct.page_size, struct.kv_heads = pages, page_size, heads
        struct.head_dim, struct.v_head_dim = dim, v_dim
        self._struct = struct
        self.k_cache, self.v_cache = (
            c if isinstance(c, _quantized.Quantized) else _arrays.raw(c)
            for c in (k_cache, v_cache))
        # torch caches, always writable and unquantized: kv_append's
        # compiled path needs no checks of them.
        self._torch_caches = all(_arrays.kind_of_or_none(c) == "torch"
                                 for c in (self.k_cache, self.v_cache))

    def _quantized_side(self, struct, side, cache, what, names):
        """Sets one side of struct from a quantized cache; returns its dims
        [num_pages, page_size, Hkv, D]."""
        cache = _quantized.as_quantized(cache)
        tensor_layout = "bshd" if self.layout == "nhd" else "bhsd"
        try:
            view = _quantized.codes_view(cache, tensor_layout, what)
        except errors.ShapeMismatchError as error:
            raise errors.ShapeMismatchError(
                "SHAPE_MISMATCH", f"{error.message} ({self.layout}: {names})") from None
        if any(view.strides[i] < 0 for i in range(3)):
            raise errors.BadLayoutError("BAD_LAYOUT", f"{what} has a negative stride")
        setattr(struct, side, view.data)
        setattr(struct, f"{side}_dtype", view.dtype)
        side_strides = getattr(struct, f"{side}_strides")
        for i in range(3):
            side_strides[i] = view.strides[i]
        scales = _quantized.scales_view(cache, tensor_layout, what, self._keep)
        if scales is not None:
            setattr(struct, f"{side}_scales", ctypes.pointer(scales))
        return [view.dims[i] for i in range(4)]

    num_pages = property(lambda self: self._struct.num_pages)
    page_size = property(lambda self: self._struct.page_size)
    kv_heads = property(lambda self: self._struct.kv_heads)
    head_dim = property(lambda self: self._struct.head_dim)
    v_head_dim = property(lambda self: self._struct.v_head_dim)

    @property
    def geometry(self):
        """(num_pages, page_size, kv_heads, head_dim, v_head_dim)."""
        s = self._struct
        return (s.num_pages, s.page_size, s.kv_heads, s.head_dim, s.v_head_dim)

    @property
    def kernel_key(self):
        """What a C plan chooses its kernels by besides the geometry: the
        dtypes and, per side, whether scales and zero points are present,
        their dtype and whether they vary along a row."""
        s = self._struct
        key = [s.k_dtype, s.v_dtype]
        for scales in (s.k_scales, s.v_scales):
            if scales:
                c = scales.contents
                key.append((bool(c.data), bool(c.zero_points), c.dtype, c.strides[3] == 0))
            else:
                key.append(None)
        return tuple(key)

    def __repr__(self):
        names = dict(_arrays.NAMES)
        names.update({code: name for name, code in _quantized.FORMATS.items()})
        dtypes = [names.get(d, "?") for d in (self._struct.k_dtype, self._struct.v_dtype)]
        dtype = dtypes[0] if dtypes[0] == dtypes[1] else "/".join(dtypes)
        return (f"flashcpu.PagedKV({self.layout}, num_pages={self.num_pages}, "
                f"page_size={self.page_size}, kv_heads={self.kv_heads}, "
                f"head_dim={self.head_dim}, v_head_dim={self.v_head_dim}, {dtype})")


def _tree_words(tree_bits, rows, most_keys, what="tree_bits"):
    """(uint64 words [rows', W] C-contiguous, W) from a boolean array [T, K]
    (bit t of row q: mask[q, t]; K >= most_keys) or the packed uint64 words
    [T, W]."""
    import numpy
    array = _arrays._numpy_of(tree_bits, what)
    if array.ndim != 2:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"{what} has {array.ndim} dims; expected 2 (boolean "
            "[T, num_keys], or uint64 words [T, ceil(num_keys / 64)])")
    if array.shape[0] < rows:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"{what} has {array.shape[0]} rows; the batch packs {rows}")
    if array.dtype == numpy.bool_:
        keys = array.shape[1]
        if keys < most_keys:
            raise errors.ShapeMismatchError(
                "SHAPE_MISMATCH", f"{what} has {keys} columns; tree_num_keys reaches "
                f"{most_keys}")
        words = max(1, (keys + 63) // 64)
        padded = numpy.zeros((array.shape[0], words * 64), dtype=numpy.bool_)
        padded[:, :keys] = array
        packed = numpy.packbits(padded, axis=-1, bitorder="little")
        return numpy.ascontiguousarray(packed).view("<u8"), words
    if array.dtype not in (numpy.uint64, numpy.int64):
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", f"{what} must be boolean [T, num_keys] or uint64 words, "
            f"not {array.dtype}")
    return numpy.ascontiguousarray(array).view(numpy.uint64), array.shape[1]


class Plan:
    """One step's lengths, block table and tree masks, checked and copied
    once by flashcpu_plan_create, for every layer's attention_paged.

    cu_seqlens_q: int32 [R + 1], request r's query rows are packed rows
      cu_seqlens_q[r] .. cu_seqlens_q[r + 1] - 1 (0-row requests allowed);
    seq_lens_kv: int32 [R], request r's keys (its cached prefix and this
      step's new tokens);
    block_table: int32 [R (or more), max_pages]: request r's key j is in page
      block_table[r, j // page_size]; with block_offsets (FlashInfer's
      indptr, int32 [R + 1]) a flat int32 array of page indices instead,
      request r's pages being block_table[block_offsets[r]:block_offsets[r+1]];
    num_heads: Hq; kv: a PagedKV of the layers' geometry (its data is not
      read; every layer's cache must have the same geometry);
    q_dtype, out_dtype: the dtypes of the layers' q and out (numpy or torch
      float dtypes, or "float32", "float16", "bfloat16"); default: the
      cache's dtype where it is a float one, else float32, and out as q. A
      layer of other q, out or cache dtypes gets a C plan of its own, made
      on its first call;
    tree_bits, tree_num_keys: speculative-verify requests: request r with
      tree_num_keys[r] = n > 0 lets its packed row q see key S_r - n + t only
      when tree_bits[q, t] (boolean [T, max n], or packed uint64 words
      [T, ceil(max n / 64)] as in the C header);
    context: the flashcpu.Context to run on (default: this thread's).

    Index arrays are numpy arrays, torch CPU tensors or sequences of
    integers, converted to int32 once. The plan frees its memory on close(),
    at the end of a with block, or when collected. It runs on its context:
    use it from one thread at a time."""

    def __init__(self, cu_seqlens_q, seq_lens_kv, block_table, *, num_heads, kv,
                 block_offsets=None, tree_bits=None, tree_num_keys=None, context=None,
                 q_dtype=None, out_dtype=None):
        self._handle = None
        self._handles = {}
        self._id = None
        if not isinstance(kv, PagedKV):
            raise errors.InvalidArgumentError(
                "INVALID_ARGUMENT", f"kv must be a flashcpu.PagedKV, not {type(kv).__name__}")
        self.context = _context.resolve(context)
        seq = _arrays.index_array(seq_lens_kv, "seq_lens_kv")
        cu = _arrays.index_array(cu_seqlens_q, "cu_seqlens_q")
        requests = seq.shape[0]
        if cu.shape[0] != requests + 1:
            raise errors.ShapeMismatchError(
                "SHAPE_MISMATCH", f"cu_seqlens_q has {cu.shape[0]} entries; expected "
                f"len(seq_lens_kv) + 1 = {requests + 1}")
        batch = Batch()
        _lib.flashcpu_batch_init(ctypes.byref(batch))
        batch.num_requests = requests
        keep = [cu, seq]
        batch.cu_seqlens_q, batch.seq_lens_kv = cu.ctypes.data, seq.ctypes.data
        if block_offsets is None:
            table = _arrays.index_array(block_table, "block_table", ndim=2)
            if table.shape[0] < requests:
                raise errors.ShapeMismatchError(
                    "SHAPE_MISMATCH", f"block_table has {table.shape[0]} rows; the batch "
                    f"has {requests} requests")
            batch.block_table_stride = table.shape[1]
        else:
            offsets = _arrays.index_array(block_offsets, "block_offsets")
            if offsets.shape[0] != requests + 1:
                raise errors.ShapeMismatchError(
                    "SHAPE_MISMATCH", f"block_offsets has {offsets.shape[0]} entries; "
                    f"expected len(seq_lens_kv) + 1 = {requests + 1}")
            table = _arrays.index_array(block_table, "block_table (with block_offsets)")
            if requests and table.shape[0] < int(offsets.max()):
                raise errors.ShapeMismatchError(
                    "SHAPE_MISMATCH", f"block_table has {table.shape[0]} entries; "
                    f"block_offsets reach {int(offsets.max())}")
            batch.block_offsets = offsets.ctypes.data
            keep.append(offsets)
        batch.block_table = table.ctypes.data or ctypes.addressof(_arrays._EMPTY)
        keep.append(table)
        if (tree_bits is None) != (tree_num_keys is None):
            raise errors.InvalidArgumentError(
                "INVALID_ARGUMENT", "tree_bits and tree_num_keys go together")
        if tree_bits is not None:
            counts = _arrays.index_array(tree_num_keys, "tree_num_keys")
            if counts.shape[0] != requests:
                raise errors.ShapeMismatchError(
                    "SHAPE_MISMATCH", f"tree_num_keys has {counts.shape[0]} entries; "
                    f"expected R = {requests}")
            most = int(counts.max()) if requests else 0
            words, row_stride = _tree_words(tree_bits, int(cu.max()), most)
            tree = TreeMask(words.ctypes.data or ctypes.addressof(_arrays._EMPTY),
                            int(cu.max()), most, row_stride, 0)
            batch.tree_mask = ctypes.pointer(tree)
            batch.tree_num_keys = counts.ctypes.data
            keep.extend((words, counts, tree))
        num_heads = _arrays.integer(num_heads, "num_heads", 0, _arrays.INT32_MAX)
        default = kv._struct.k_dtype if kv._struct.k_dtype in (_arrays.F32, _arrays.F16,
                                                               _arrays.BF16) else _arrays.F32
        q_code = default if q_dtype is None else _arrays.float_code(q_dtype, "q_dtype")
        out_code = q_code if out_dtype is None else _arrays.float_code(out_dtype, "out_dtype")
        self._batch, self._keep = batch, keep
        self.num_heads = num_heads
        self._handle = self._plan_for(q_code, out_code, kv)
        self.num_requests = requests
        self.geometry = kv.geometry
        self.max_keys = int(seq.max()) if requests else 0
        self.cu_seqlens_q = cu  # int32 copies, for the caller's reference
        self.seq_lens_kv = seq

    def _plan_for(self, q_code, out_code, kv):
        """The C plan for these dtypes and kv's kernel key, made once."""
        key = (q_code, out_code, kv.kernel_key)
        handle = self._handles.get(key)
        if handle is None:
            handle = ctypes.c_void_p()
            ctx = self.context.handle
            _context.check(_lib.flashcpu_plan_create(
                ctx, ctypes.byref(self._batch), self.num_heads, q_code, out_code,
                ctypes.byref(kv._struct), ctypes.byref(handle)), ctx)
            self._handles[key] = handle
        return handle

    @property
    def handle(self):
        if self._handle is None:
            raise errors.InvalidArgumentError("INVALID_ARGUMENT", "the plan is closed")
        return self._handle

    def as_tensor(self):
        """An int64 tensor [1] that names this plan to
        torch.ops.flashcpu.attention_paged (torch keeps the planning out of
        the op, and a tensor's value does not specialise compiled graphs).
        It names the plan while the plan is open and referenced."""
        import torch
        if self._handle is None:
            raise errors.InvalidArgumentError("INVALID_ARGUMENT", "the plan is closed")
        if self._id is None:
            self._id = next(_plan_ids)
            _live_plans[self._id] = self
        return torch.tensor([self._id], dtype=torch.int64)

    def handle_for(self, q_code, out_code, kv):
        """The C plan that runs q and out of these dtype codes on kv."""
        if self._handle is None:
            raise errors.InvalidArgumentError("INVALID_ARGUMENT", "the plan is closed")
        return self._plan_for(q_code, out_code, kv)

    @property
    def num_tokens(self):
        """T, the packed query rows of the step."""
        return _lib.flashcpu_plan_num_tokens(self.handle)

    def describe(self):
        """What the plan runs: requests per kernel family, rows, keys."""
        size = _lib.flashcpu_plan_describe(self.handle, None, 0) + 1
        buffer = ctypes.create_string_buffer(size)
        _lib.flashcpu_plan_describe(self.handle, buffer, size)
        return buffer.value.decode(errors="replace")

    def close(self):
        for handle in getattr(self, "_handles", {}).values():
            _lib.flashcpu_plan_destroy(handle)
        self._handles = {}
        self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if _lib is not None:
            self.close()

    def __repr__(self):
        if self._handle is None:
            return "flashcpu.Plan(closed)"
        return (f"flashcpu.Plan({self.num_requests} requests, {self.num_tokens} rows, "
                f"Hq={self.num_heads}, max_keys={self.max_keys})")


def attention_paged(q, kv, plan, *, causal=False, window=(-1, -1), softcap=0.0,
                    scale=None, additive_mask=None, sinks=None, alibi_slopes=None,
                    query_offsets=None, out=None, return_lse=False):
    """Attention of a step's packed query rows over one layer's paged cache,
    each request as a batch of its own (flashcpu_attention_paged).

    q [T, Hq, D]: the plan's T packed rows, a numpy array or torch CPU
    tensor of float32, float16 or bfloat16, any strides with head_dim
    contiguous; kv: the layer's PagedKV (the plan's geometry); plan: the
    step's Plan, whose context runs the call. Options as for
    flashcpu.attention, aligned to each request (causal bottom-right to its
    S_r keys); additive_mask: float32 broadcastable to [R, Hq, T, max S_r]
    (usually [Hq or 1, T, max S_r]: entry [h, t, j] for packed row t, key
    j); alibi_slopes: float32 [Hq] or [R, Hq]; query_offsets: R integers
    (flashcpu.attention's, per request). Returns out [T, Hq, Dv] (a
    new array of q's kind and dtype, or out itself), and with return_lse
    the float32 log-sum-exp [Hq, T]. The GIL is released during the call; on
    error a flashcpu.Error subclass is raised and out is left untouched."""
    if not isinstance(plan, Plan):
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", f"plan must be a flashcpu.Plan, not {type(plan).__name__}")
    if not isinstance(kv, PagedKV):
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", f"kv must be a flashcpu.PagedKV, not {type(kv).__name__}")
    ctx = plan.context.handle
    if (out is not None and not return_lse and additive_mask is None and sinks is None
            and alibi_slopes is None and query_offsets is None
            and _paged_compiled(q, kv, plan, out, causal, window, softcap, scale, ctx)):
        return out
    qv = _arrays.rows_view(q, "q")
    tokens, heads = plan.num_tokens, plan.num_heads
    if out is None:
        out = _arrays.empty_like_kind(q, (qv.dims[1], qv.dims[2], kv.v_head_dim), qv.dtype)
    _arrays.check_writable(out, "out")
    ov = _arrays.rows_view(out, "out")
    handle = plan.handle_for(qv.dtype, ov.dtype, kv)
    lse = None
    if return_lse:
        lse = _arrays.empty_like_kind(_arrays.raw(q), (heads, tokens), _arrays.F32)
    params = _api.new_params()
    keep = []
    _api.set_options(params, keep, heads=heads, batches=plan.num_requests, causal=causal,
                     window=window, softcap=softcap, scale=scale, sinks=sinks,
                     alibi_slopes=alibi_slopes)
    if additive_mask is not None:
        mask = _api._additive(additive_mask, plan.num_requests, heads, tokens, plan.max_keys)
        params.additive_mask = ctypes.pointer(mask)
        keep.append(mask)
    _api.set_query_offsets(params, keep, query_offsets, plan.num_requests, "R")
    lse_pointer = None
    if lse is not None:
        shape, _, address = _arrays.geometry(lse)
        lse_pointer = _arrays._address(shape, address)
    _context.check(_lib.flashcpu_attention_paged(
        ctx, handle, ctypes.byref(qv), ctypes.byref(kv._struct), ctypes.byref(ov),
        lse_pointer, ctypes.byref(params)), ctx)
    out = _arrays.raw(out)
    return (out, lse) if return_lse else out


def _paged_compiled(q, kv, plan, out, causal, window, softcap, scale, ctx):
    """attention_paged through flashcpu.native where it is built and takes
    these tensors: True when it ran (raising what the library said)."""
    compiled = native.loaded()
    if not compiled or _arrays._KINDS.get(type(q)) != "torch":
        return False
    codes = _arrays.torch_float_code(q.dtype), _arrays.torch_float_code(out.dtype)
    shared = _api.plain_params_address(causal, window, softcap, scale)
    if None in codes or shared is None:
        return False
    handle = plan.handle_for(codes[0], codes[1], kv)
    status = compiled.attention_paged_into(q, out, ctypes.addressof(kv._struct), handle.value,
                                           ctx.value, shared[1])
    if status > 0:
        _context.check(status, ctx)
    return status == 0


def kv_append(k_new, v_new, slot_mapping, kv, context=None):
    """Writes a step's new K and V rows into their pages, in place (vLLM's
    reshape_and_cache, flashcpu_kv_append): k_new [T, Hkv, D], v_new
    [T, Hkv, Dv] of any dtype (converted to the cache's, rounding to nearest
    even), slot_mapping int64 [T] (other integer arrays are converted): row
    t goes to token slot page * page_size + offset; -1 skips the row. Every
    slot is -1 or below num_pages * page_size, none twice; on error nothing
    is written."""
    if not isinstance(kv, PagedKV):
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", f"kv must be a flashcpu.PagedKV, not {type(kv).__name__}")
    ctx = _context.resolve(context).handle
    compiled = native.loaded() if kv._torch_caches else None
    if compiled and _arrays._KINDS.get(type(slot_mapping)) == "torch":
        status = compiled.kv_append_into(k_new, v_new, slot_mapping,
                                         ctypes.addressof(kv._struct), ctx.value)
        if status > 0:
            _context.check(status, ctx)
        if status == 0:
            return
    for side in ("k", "v"):
        cache, what = getattr(kv, f"{side}_cache"), f"kv's {side}_cache"
        if not isinstance(cache, _quantized.Quantized):
            _arrays.check_writable(cache, what)
            continue
        _arrays.check_writable(cache.codes, what)
        scales = getattr(kv._struct, f"{side}_scales")
        _quantized.check_written_scales(cache, scales.contents if scales else None, what)
    kn = _arrays.rows_view(k_new, "k_new")
    vn = _arrays.rows_view(v_new, "v_new")
    slots = _arrays.index_array(slot_mapping, "slot_mapping", bits=64)
    if slots.shape[0] != kn.dims[1]:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"slot_mapping has {slots.shape[0]} entries; k_new has "
            f"T = {kn.dims[1]} rows")
    _context.check(_lib.flashcpu_kv_append(
        ctx, ctypes.byref(kn), ctypes.byref(vn),
        slots.ctypes.data or ctypes.addressof(_arrays._EMPTY), ctypes.byref(kv._struct)),
        ctx)


# ---- plans as torch tensors, for the torch op

_live_plans = weakref.WeakValueDictionary()
_plan_ids = itertools.count(1)


def plan_of_tensor(tensor):
    """The open Plan whose as_tensor() gave tensor."""
    if tensor.dim() != 1 or tensor.numel() != 1 or str(tensor.dtype) != "torch.int64":
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", "plan must be the int64 tensor of one element that "
            "flashcpu.Plan.as_tensor() returns")
    plan = _live_plans.get(int(tensor[0]))
    if plan is None or plan._handle is None:
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", "plan names no open flashcpu.Plan (closed, or collected)")
    return plan
