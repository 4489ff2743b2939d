"""The `probe` attention back-end: softmax attention that also returns its log-sum-exp.

transformers calls a registered attention function with the post-RoPE, post-QK-norm query,
key and value of each layer. This one computes the same output as SDPA and, from the kernel's
log-sum-exp, the attention probability on key 0 without ever forming the T x T matrix:

    P[t, 0] = exp(scale * q_t . k_0 + mask[t, 0] - lse_t)

What it returns is the pre-gate attention output: gated models multiply by the gate after it.
"""
from __future__ import annotations

import warnings

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "probe"
_observer = None  # the active Capture, if any (see capture.py)


def set_observer(observer) -> None:
    global _observer
    _observer = observer


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """SDPA-style boolean masks (True = attend) as additive float masks; floats pass through."""
    if mask is None or mask.dtype != torch.bool:
        return mask if mask is None else mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def expand_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, KV, S, D) -> (B, H, S, D) for grouped-query attention."""
    return x if x.shape[1] == heads else x.repeat_interleave(heads // x.shape[1], dim=1)


def attention_with_lse(query, key, value, mask, scale):
    """Softmax attention returning (out (B, H, T, D), lse (B, H, T) float32).

    query (B, H, T, D); key, value (B, KV, S, D); mask None (causal) or (B|1, 1, T, S).
    """
    T, S = query.shape[2], key.shape[2]
    causal = mask is None
    if causal and T != S:
        raise ValueError("probe attention expects a full causal prefill (no KV cache)")
    kernel = fused_kernel(query)
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
    return chunked_attention_with_lse(query, key, value, additive_mask(mask, query.dtype), scale)


def fused_kernel(query: torch.Tensor) -> str | None:
    """The fused kernel that returns lse for this device and dtype; None: exact blockwise attention."""
    if query.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return None
    return {"cpu": "cpu-flash", "cuda": "cuda-efficient"}.get(query.device.type)


def _efficient_kernel(*args, **kwargs):
    return torch.ops.aten._scaled_dot_product_efficient_attention(*args, **kwargs)


def efficient_attention_with_lse(query, key, value, mask, scale):
    """The CUDA memory-efficient kernel, which returns the log-sum-exp next to the output.

    Its contract (checked by tests/test_attention.py against a stand-in on the CPU):
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


def chunked_attention_with_lse(query, key, value, bias, scale, chunk: int = 256):
    """Exact softmax attention over query blocks in float32: O(chunk x S) memory, any device."""
    heads, T, S = query.shape[1], query.shape[2], key.shape[2]
    k = expand_kv(key, heads).float()
    v = expand_kv(value, heads).float()
    outs, lses = [], []
    for start in range(0, T, chunk):
        q = query[:, :, start:start + chunk].float()
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) * scale          # (B, H, c, S)
        if bias is None:
            pos = torch.arange(start, start + q.shape[2], device=q.device)[:, None]
            scores = scores.masked_fill(torch.arange(S, device=q.device)[None, :] > pos, float("-inf"))
        else:
            scores = scores + bias[:, :, start:start + chunk].float()
        lse = torch.logsumexp(scores, dim=-1)                            # (B, H, c)
        outs.append(torch.einsum("bhts,bhsd->bhtd", torch.exp(scores - lse[..., None]), v))
        lses.append(lse)
    return torch.cat(outs, dim=2).to(query.dtype), torch.cat(lses, dim=2)


def first_key_probability(query, key, lse, mask, scale, chunk: int = 8192) -> torch.Tensor:
    """P[b, h, t, 0] for every query t, (B, H, T) float32, from the log-sum-exp. O(T D).

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
    logit.mul_(scale)
    if mask is not None:
        logit = logit + additive_mask(mask[..., 0], torch.float32)      # (B|1, 1, T)
    return torch.exp(logit - lse)


def probe_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention interface: returns ((B, T, H, D), None)."""
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    mask = attention_mask[:, :, :, : key.shape[2]] if attention_mask is not None else None
    out, lse = attention_with_lse(query, key, value, mask, scale)
    if _observer is not None:
        _observer.on_attention(module, query, key, out, lse, mask, scale)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, probe_attention)
# Build SDPA-style masks for this back-end: None (pure causal) whenever that is exact.
AttentionMaskInterface.register(NAME, sdpa_mask)
