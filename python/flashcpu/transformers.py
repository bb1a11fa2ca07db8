"""flashcpu as a Hugging Face transformers attention backend.

    import flashcpu.transformers
    flashcpu.transformers.register()          # name "fcpu"
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="fcpu")

The name avoids the word "flash": transformers sends such names to its
flash-attention kernel loader. The function takes q, k, v as transformers
passes them ([B, H, seq, D]) and reads them in place: GQA without
repeat_kv copies. No mask: causal (bottom-right). A boolean mask that is
bottom-right causal over each sequence's first n keys (no padding, or
right padding in a decode step) becomes causal + kv_lengths; any other
mask (left padding, a right-padded prompt, custom or float masks) becomes
flashcpu's additive mask. A mask is planned once per mask tensor, not per
layer.
sliding_window and softcap (Gemma 2) map to flashcpu's window and softcap;
attention sinks (s_aux, gpt-oss) to flashcpu's sinks.
Where flashcpu.native is built, register() installs its compiled function:
the call without mask, window, softcap, sinks or dropout in C++, every
other call through attention_forward."""

import threading
import weakref

import torch

from . import _api, _model_call, errors, native

NAME = "fcpu"


class _Planned:
    """One mask tensor's plan, dropped when the tensor goes (the plan may
    hold an additive mask as large as the tensor). The weak reference's
    callback holds the plan's box, not this object: no cycle keeps either."""

    def __init__(self, mask, keys, rows, version, layer, plan):
        box = [plan]
        self.box = box
        self.ref = weakref.ref(mask, lambda _ref: box.clear())
        self.keys, self.rows, self.version, self.layer = keys, rows, version, layer

    @property
    def plan(self):
        return self.box[0] if self.box else None


_local = threading.local()  # each thread's last _Planned


def _version(tensor):
    """The tensor's in-place version, None for an inference tensor (which
    keeps none)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


def _mask_plan(attention_mask, keys, rows, layer):
    """The plan of attention_mask[..., :keys] for rows query rows: made once
    per mask tensor and reused by the layers after (every layer of a
    forward gets the same tensor). A tensor changed in place gets a new
    plan; for an inference tensor, which keeps no version, a layer index
    that does not grow (a new forward) does too."""
    version = _version(attention_mask)
    entry = getattr(_local, "planned", None)
    if (entry is not None and entry.plan is not None and entry.ref() is attention_mask and
            entry.keys == keys and entry.rows == rows):
        if version is not None:
            fresh = version == entry.version
        else:
            fresh = layer is not None and entry.layer is not None and layer > entry.layer
        if fresh:
            entry.layer = layer
            return entry.plan
    plan = _plan_mask(attention_mask[:, :, :, :keys], rows)
    _local.planned = _Planned(attention_mask, keys, rows, version, layer, plan)
    return plan


def _plan_mask(mask, rows):
    """(causal, kv_lengths, additive) for a transformers mask [B, 1 or H, L,
    S]: a boolean mask that is bottom-right causal over each batch's first
    n keys (no padding, or right padding in a decode step) becomes causal +
    kv_lengths (none where every n is S), all True becomes no mask;
    anything else an additive float32 mask."""
    if mask.dtype == torch.bool and mask.shape[1] == 1:
        batch, _, length_q, keys = mask.shape
        lengths = mask[:, 0, -1].sum(dim=-1)  # the last row sees all its keys
        i = torch.arange(length_q).view(1, -1, 1)
        j = torch.arange(keys).view(1, 1, -1)
        n = lengths.view(-1, 1, 1)
        causal = (j <= i + (n - rows)) & (j < n)
        if torch.equal(mask[:, 0], causal):
            counts = lengths.tolist()
            if all(count == keys for count in counts):
                return (True, None, None)  # every key: plain causal, the short path
            return (True, counts, None)
        if bool(mask.all()):
            return (False, None, None)
        return (False, None, _additive(mask))
    return (False, None, _additive(mask))


def _additive(mask, dtype=torch.float32):
    """A transformers mask as a float32 additive mask: bool True = visible."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype).masked_fill_(~mask, float("-inf"))
    return mask.to(torch.float32)


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                      sliding_window=None, softcap=None, s_aux=None, is_causal=None,
                      **kwargs):
    """transformers' attention function signature; returns (out [B, L, H, D],
    None)."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if attention_mask is None and s_aux is None and sliding_window is None and not softcap \
            and not dropout:
        # A model's common call (no mask, window, cap or sinks) in the fewest steps.
        out = _model_call.attention(query, key, value, bool(causal), (-1, -1), 0.0, scaling)
        if out is not None:
            return out, None
    if dropout and module.training:
        raise errors.UnsupportedError("UNSUPPORTED", "flashcpu has no attention dropout")
    additive, lengths = None, None
    if attention_mask is not None:
        causal, lengths, additive = _mask_plan(attention_mask, key.shape[-2], query.shape[-2],
                                               getattr(module, "layer_idx", None))
        if lengths is not None and len(lengths) == 1 and query.shape[0] > 1:
            lengths = lengths * query.shape[0]  # a mask of batch 1 for every sequence
    causal = bool(causal)
    window = (-1, -1)
    if sliding_window is not None and causal:
        window = (int(sliding_window) - 1, 0)
    softcap = float(softcap or 0.0)
    if additive is None and lengths is None and s_aux is None:
        out = _model_call.attention(query, key, value, causal, window, softcap, scaling)
        if out is not None:
            return out, None  # the call without mask arrays, in fewer steps
    # Written straight into the [B, L, H, Dv] tensor transformers wants
    # back, through a [B, H, L, Dv] view of it: no copy after the call.
    batch, heads, rows, _ = query.shape
    out = torch.empty((batch, rows, heads, value.shape[-1]), dtype=query.dtype)
    _api.attention(query, key, value, causal=causal, window=window, softcap=softcap,
                   scale=scaling, kv_lengths=lengths, additive_mask=additive, sinks=s_aux,
                   out=out.transpose(1, 2), layout="bhsd")
    return out, None


def function():
    """The attention function to register: the compiled one where
    flashcpu.native is built (the common call in C++, everything else
    through attention_forward), else attention_forward."""
    compiled = native.available()
    if compiled and hasattr(compiled, "backend_forward"):
        compiled.set_backend(attention_forward)
        return compiled.backend_forward
    return attention_forward


def register(name=NAME):
    """Registers the attention function (and sdpa's mask function) under
    name; returns the name."""
    if "flash" in name:
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", "the name must not contain \"flash\": transformers "
            "routes such names to its flash-attention loader")
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask
    AttentionInterface.register(name, function())
    AttentionMaskInterface.register(name, sdpa_mask)
    return name
