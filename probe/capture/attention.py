"""The `probe` attention back-end: softmax attention that also returns its log-sum-exp.

transformers calls a registered attention function with the post-RoPE, post-QK-norm query,
key and value of each layer. This one computes the same output as SDPA and, from the kernel's
log-sum-exp, the attention probability on key 0 without ever forming the T x T matrix:

    P[t, 0] = exp(scale * q_t . k_0 + mask[t, 0] - lse_t)

What it returns is the pre-gate attention output: gated models multiply by the gate after it.

Sliding-window layers (Mistral, Qwen2/3 with use_sliding_window, Gemma local layers, ...):
transformers hands them a full (B, 1, T, S) boolean mask, which would cost a T x S float copy
per layer. Without padding, `masks.probe_mask` returns None for such a mask instead, and the layer's
`sliding_window` (the attention kwarg, as transformers' flash-attention path reads it) turns
into a `SlidingWindow`: banded attention over blocks of queries, O(T (W + block)) memory.
"""
from __future__ import annotations

import contextvars
import numbers
import warnings
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

# The window, its band mask and the soft-cap are terms a family hands the kernel: defined with
# them (families/attention_terms.py), so that the sink-anatomy metric recomputes the same logits
# without reaching up into capture/.
from ..families.attention_terms import KeyAblation, SlidingWindow, band_mask, cap_logits, softmax_terms  # noqa: F401
from . import key_ablation
from ..metrics.anatomy import fused
from .masks import probe_mask

NAME = "probe"
# id(module) -> the observer of the model that module belongs to (a Capture, a check, ...):
# per model, so that two captures on two models never see each other's layers; a context
# variable, so that nothing outside an `observing` block is touched.
_OBSERVERS: contextvars.ContextVar[dict] = contextvars.ContextVar("probe_attention_observers", default={})


@contextmanager
def observing(model, observer=None):
    """Run `model` on this back-end, telling `observer` (if any) of each of its attention calls
    (`observer.on_attention(module, query, key, out, lse, mask, scale, softcap=..., value=...)`,
    value (B, KV, S, D) as the layer handed it over, for observers that read it); on exit
    the model's previous attention implementation and the previous observers are back.
    A model already observed is refused: its reducers would be fed twice."""
    current = _OBSERVERS.get()
    modules = {id(m) for m in model.modules()}
    if modules & current.keys():
        raise RuntimeError("another probe Capture or check is already active on this model")
    previous = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    _OBSERVERS.set({**current, **dict.fromkeys(modules, observer)})
    try:
        yield
    finally:
        # Not ContextVar.reset: captures may end in another order than they began.
        _OBSERVERS.set({k: v for k, v in _OBSERVERS.get().items() if k not in modules})
        model.set_attn_implementation(previous)


def observed(model) -> bool:
    """Whether `model` runs inside an `observing` block now."""
    return any(id(m) in _OBSERVERS.get() for m in model.modules())


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """SDPA-style boolean masks (True = attend) as additive float masks; floats pass through."""
    if mask is None or mask.dtype != torch.bool:
        return mask if mask is None else mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def expand_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, KV, S, D) -> (B, H, S, D) for grouped-query attention."""
    return x if x.shape[1] == heads else x.repeat_interleave(heads // x.shape[1], dim=1)


def attention_with_lse(query, key, value, mask, scale, softcap: float | None = None):
    """Softmax attention returning (out (B, H, T, D), lse (B, H, T) float32).

    query (B, H, T, D); key, value (B, KV, S, D); mask None (causal), a SlidingWindow (causal
    and banded) or (B|1, 1, T, S). softcap: Gemma 2's logit soft-capping, softcap * tanh(s /
    softcap) of the scaled scores before the mask; no fused kernel does it, so the exact
    blockwise path runs.
    """
    T, S = query.shape[2], key.shape[2]
    causal = mask is None or isinstance(mask, SlidingWindow)
    if causal and T != S:
        raise ValueError("probe attention expects a full causal prefill (no KV cache)")
    if isinstance(mask, SlidingWindow):
        if T <= mask.size:          # the window reaches key 0 from every query: plain causal
            return attention_with_lse(query, key, value, None, scale, softcap)
        return banded_attention_with_lse(query, key, value, mask.size, scale, softcap=softcap)
    kernel = fused_kernel(query) if softcap is None else None
    if kernel == "cpu-flash":
        # The CPU flash kernel takes grouped K/V as they are: no (B, H, S, D) copy under GQA.
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, causal, attn_mask=additive_mask(mask, query.dtype), scale=scale)
        return out, lse.float()
    if kernel == "cuda-efficient":
        try:
            return efficient_attention_with_lse(query, key, value, mask, scale)
        except torch.OutOfMemoryError:
            raise
        except RuntimeError as error:  # a shape or GPU the kernel does not support: same numbers, slower
            _warn_fallback(error)
    return chunked_attention_with_lse(query, key, value, additive_mask(mask, query.dtype), scale,
                                      softcap=softcap)


def add_sink(out, lse, sinks):
    """gpt-oss's per-head attention sinks: a learned logit s_h that joins every softmax
    normaliser but has no value. From the kernel's lse this is exact and cheap:
    lse' = logaddexp(lse, s_h) and out' = out * exp(lse - lse'). out (B, H, T, D), lse (B, H, T)."""
    new = torch.logaddexp(lse, sinks.float()[None, :, None].to(lse.device))
    # In place: keeps the memory order the kernel gave ((B, T, H, D) for the fused kernels, so the
    # observer's transpose stays a view; the soft-capped blockwise path gives (B, H, T, D)).
    return out.mul_(torch.exp(lse - new)[..., None].to(out.dtype)), new


def fused_kernel(query: torch.Tensor) -> str | None:
    """The fused kernel that returns lse for this device and dtype; None: exact blockwise attention."""
    if query.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return None
    return {"cpu": "cpu-flash", "cuda": "cuda-efficient"}.get(query.device.type)


def _efficient_kernel(*args, **kwargs):
    return torch.ops.aten._scaled_dot_product_efficient_attention(*args, **kwargs)


def efficient_attention_with_lse(query, key, value, mask, scale):
    """The CUDA memory-efficient kernel, which returns the log-sum-exp next to the output.

    Its contract (checked by tests/capture/test_attention.py against a stand-in on the CPU):
    - query, key and value have the same number of heads: grouped K/V are repeated here;
    - a bias is (B, H, T, S) in the query dtype, its rows 16-element aligned (the kernel
      refuses a misaligned stride; SDPA pads the same way before calling it);
    - lse comes back padded to a multiple of 32 queries, (B, H, ceil(T / 32) * 32).
    """
    B, heads, T, _ = query.shape
    S = key.shape[2]
    bias = None if mask is None else aligned_bias(mask, query.dtype).expand(B, heads, T, S)
    out, lse, *_ = _efficient_kernel(query, expand_kv(key, heads), expand_kv(value, heads), bias,
                                     True, 0.0, mask is None, scale=scale)
    return out, lse[..., :T].float()


def aligned_bias(mask: torch.Tensor, dtype: torch.dtype, alignment: int = 16) -> torch.Tensor:
    """additive_mask(mask) stored with its last dimension padded to `alignment` elements."""
    S = mask.shape[-1]
    padded = torch.empty(*mask.shape[:-1], -(-S // alignment) * alignment, dtype=dtype, device=mask.device)
    view = padded[..., :S]
    if mask.dtype == torch.bool:  # written in place: no second (T, S) float copy
        return view.zero_().masked_fill_(~mask, float("-inf"))
    return view.copy_(mask)


_fallback_warned = False


def _warn_fallback(error: Exception) -> None:
    global _fallback_warned
    if not _fallback_warned:
        _fallback_warned = True
        warnings.warn("probe: the CUDA memory-efficient attention kernel refused these inputs "
                      f"({str(error).splitlines()[0]}); using exact blockwise attention instead (slower)",
                      stacklevel=3)


def chunked_attention_with_lse(query, key, value, bias, scale, chunk: int = 256, softcap: float | None = None):
    """Exact softmax attention over query blocks, in float32 (float64 for float64 inputs):
    O(chunk x S) memory, any device. Returns out in the query dtype and lse (B, H, T) float32."""
    heads, T, S = query.shape[1], query.shape[2], key.shape[2]
    work = torch.float64 if query.dtype == torch.float64 else torch.float32
    k = expand_kv(key, heads).to(work)
    v = expand_kv(value, heads).to(work)
    outs, lses = [], []
    for start in range(0, T, chunk):
        q = query[:, :, start:start + chunk].to(work)
        scores = cap_logits(torch.einsum("bhtd,bhsd->bhts", q, k) * scale, softcap)   # (B, H, c, S)
        if bias is None:
            pos = torch.arange(start, start + q.shape[2], device=q.device)[:, None]
            scores = scores.masked_fill(torch.arange(S, device=q.device)[None, :] > pos, float("-inf"))
        else:
            scores = scores + bias[:, :, start:start + chunk].to(work)
        lse = torch.logsumexp(scores, dim=-1)                            # (B, H, c)
        outs.append(torch.einsum("bhts,bhsd->bhtd", torch.exp(scores - lse[..., None]), v))
        lses.append(lse)
    return torch.cat(outs, dim=2).to(query.dtype), torch.cat(lses, dim=2).float()


def band_block(window: int) -> int:
    """Queries per block of banded attention. Each block computes block x (block + window - 1)
    scores of which about block x window are inside the band, so the block is kept at most
    ~window (little wasted work) and at least 64 (few kernel calls for tiny windows); 512 caps
    the per-block bias (512 x 4607 floats = 9 MB at window 4096)."""
    return min(512, max(64, window))


def banded_attention_with_lse(query, key, value, window: int, scale, block: int | None = None,
                              softcap: float | None = None):
    """Causal sliding-window attention, (out (B, H, T, D), lse (B, H, T) float32), exact.

    Query block [s, e) can only see keys [max(0, s - window + 1), e), so each block is one
    call of attention_with_lse (the same fused kernel, hence the same out and lse as a full
    masked call) with a bias for that block alone: memory O(block x (block + window)), never
    T x S. query (B, H, T, D); key, value (B, KV, T, D), grouped K/V passed through as they are.
    """
    B, heads, T, _ = query.shape
    block = block or band_block(window)
    # (B, T, H, D) underneath, the kernels' own output order, so that out.transpose(1, 2) stays
    # a contiguous view for the observer and for probe_attention's return.
    out = query.new_empty(B, T, heads, value.shape[-1]).transpose(1, 2)   # (B, H, T, Dv)
    lse = torch.empty(B, heads, T, dtype=torch.float32, device=query.device)
    for start in range(0, T, block):
        end = min(start + block, T)
        k_start = max(0, start - window + 1)
        mask = band_mask(start, end, k_start, window, query.device)       # (1, 1, c, n)
        o, l = attention_with_lse(query[:, :, start:end], key[:, :, k_start:end],
                                  value[:, :, k_start:end], mask, scale, softcap)
        out[:, :, start:end] = o
        lse[:, :, start:end] = l
    return out, lse


def first_key_probability(query, key, lse, mask, scale, chunk: int = 8192,
                          softcap: float | None = None) -> torch.Tensor:
    """P[b, h, t, 0] for every query t, (B, H, T) float32, from the log-sum-exp. O(T D).

    mask: None (causal), a SlidingWindow (key 0 is outside the window of queries t >= size,
    where P is exactly 0, as in eager softmax) or the (B|1, 1, T, S) mask attention used.

    The logits q_t . k_0 are formed in float32 whatever the model dtype (a bfloat16 logit of
    size 10 would be off by 0.04), over blocks of queries so that no float32 copy of the whole
    query tensor is made.
    """
    heads, T = query.shape[1], query.shape[2]
    k0 = expand_kv(key[:, :, :1], heads).float().transpose(-1, -2)     # (B, H, D, 1)
    logit = torch.empty(lse.shape, dtype=torch.float32, device=lse.device)
    for start in range(0, T, chunk):
        q = query[:, :, start:start + chunk].float()
        logit[..., start:start + q.shape[2]] = torch.matmul(q, k0)[..., 0]
    logit = cap_logits(logit.mul_(scale), softcap)
    if isinstance(mask, SlidingWindow):
        logit[..., mask.size:] = float("-inf")                          # exp(-inf - lse) = 0
    elif isinstance(mask, KeyAblation):
        logit[..., ~mask.first_key_visible(T, logit.device)] = float("-inf")
    elif mask is not None:
        logit = logit + additive_mask(mask[..., 0], torch.float32)      # (B|1, 1, T)
    return torch.exp(logit - lse)


def uniform_first_key(mask, T: int, device) -> torch.Tensor | None:
    """What uniform attention over each query's visible keys puts on key 0, (B|1, T) float64:
    the reference F-Attn is read against. None for plain causal attention (1 / (t + 1))."""
    if mask is None:
        return None
    pos = torch.arange(T, device=device, dtype=torch.float64)
    if isinstance(mask, SlidingWindow):       # key 0 leaves the window at t = size
        return torch.where(pos < mask.size, 1.0 / (pos + 1), torch.zeros_like(pos))[None]
    if isinstance(mask, KeyAblation):
        seen = mask.first_key_visible(T, device)
        return torch.where(seen, 1.0 / mask.visible_counts(T, device).double(), torch.zeros_like(pos))[None]
    visible = mask[:, 0] if mask.dtype == torch.bool else mask[:, 0] > float("-inf")   # (B|1, T, S)
    return visible[..., 0].double() / visible.sum(-1).clamp_min(1).double()


def layer_window(module, kwargs: dict) -> int | None:
    """The layer's sliding window, as transformers' flash-attention path finds it: the
    `sliding_window` kwarg the attention module passes (None on full-attention layers); a
    module that passes none (Qwen2-MoE) keeps it as its `sliding_window` attribute."""
    window = kwargs["sliding_window"] if "sliding_window" in kwargs else getattr(module, "sliding_window", None)
    if window is None:
        return None
    if not isinstance(window, numbers.Integral) or isinstance(window, bool) or window < 1:
        raise ValueError(f"probe attention: unsupported sliding_window {window!r} (expected a positive int)")
    return int(window)


def probe_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention interface: returns ((B, T, H, D), None)."""
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    mask = attention_mask[:, :, :, : key.shape[2]] if attention_mask is not None else None
    if mask is None:
        # No mask on a sliding-window layer: probe_mask left out a mask that only causality and
        # the window shaped (a materialised one, with padding, already holds the window).
        window = layer_window(module, kwargs)
        if window is not None and query.shape[2] > window:
            mask = SlidingWindow(window)
    if mask is None and kwargs.get("is_causal") is False:
        raise ValueError("probe attention computes causal attention; this layer asked for "
                         "bidirectional attention without a mask")
    softcap, sinks = softmax_terms(kwargs)              # Gemma 2's cap, gpt-oss's sinks
    ablation = key_ablation.ablation_of(module)
    observer = _OBSERVERS.get().get(id(module))
    received = None             # the keys' column sums, when sink anatomy has them made with the output
    if ablation is not None:            # a sink ablation (key_ablation.py): the observer sees it as the mask
        key_ablation.check_layer(ablation, mask, layer_window(module, kwargs), query.shape[2],
                                 getattr(module, "layer_idx", "?"))
        out, lse = key_ablation.ablated_attention_with_lse(query, key, value, ablation, scale, softcap,
                                                           attention_with_lse)
        if not ablation.masks_nothing(query.shape[2]):
            mask = ablation             # else every query sees its causal keys: the plain mask
    elif (sinks is None and fused.fusable(query, key, mask, softcap)
          and (wanted := _received_wanted(observer, module)) is not None):
        out, lse, received = fused.attention_with_received(query, key, value, scale, **wanted)
    else:
        out, lse = attention_with_lse(query, key, value, mask, scale, softcap)
    if sinks is not None:
        out, lse = add_sink(out, lse, sinks)
    if observer is not None:
        extra = {} if received is None else {"received": received}
        observer.on_attention(module, query, key, out, lse, mask, scale, softcap=softcap, value=value, **extra)
    return out.transpose(1, 2).contiguous(), None


def _received_wanted(observer, module) -> dict | None:
    """observer.received_wanted(module) where the observer has it (a Capture with sink anatomy):
    the keyword arguments of fused.attention_with_received ({"valid": ...}) when it will read
    the attention each key of this call receives; None otherwise."""
    ask = getattr(observer, "received_wanted", None)
    return None if ask is None else ask(module)


AttentionInterface.register(NAME, probe_attention)
# The masks transformers builds for this back-end: masks.py (None where a formula serves).
AttentionMaskInterface.register(NAME, probe_mask)
