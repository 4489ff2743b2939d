"""The masks transformers builds for the `probe` attention back-end (attention.py).

`sdpa_mask` already returns None for a pure causal mask whenever that is exact. For a
sliding-window layer it builds a (B, 1, T, S) boolean mask, which attention would turn into a
T x S float copy; `probe_mask` returns None there too when only causality and the window shape
the mask, and attention.probe_attention rebuilds the band from the layer's `sliding_window`.
"""
from __future__ import annotations

import inspect

import torch
from transformers.masking_utils import prepare_padding_mask, sdpa_mask

_SDPA_MASK_ARGS = inspect.signature(sdpa_mask)


def probe_mask(*args, **kwargs):
    """The mask interface of this back-end: `sdpa_mask` (None for pure causal whenever that is
    exact), and also None for a sliding-window causal mask that nothing but causality and the
    window shape: a full prefill (no cache offset, T == S), no padding, no extra mask function.
    probe_attention then rebuilds the band from the layer's `sliding_window`, block by block,
    instead of reading a (B, 1, T, S) mask. Anything else gets sdpa_mask's mask, unchanged."""
    if _plain_sliding_window(_SDPA_MASK_ARGS.bind(*args, **kwargs)):
        return None
    return sdpa_mask(*args, **kwargs)


def _plain_sliding_window(bound: inspect.BoundArguments) -> bool:
    bound.apply_defaults()
    a = bound.arguments
    window, T, S = a["local_size"], a["q_length"], a["kv_length"]
    # create_sliding_window_causal_mask passes local_size and clears allow_is_causal_skip (and
    # sets use_vmap) whenever packed sequences, block overlays or or/and mask functions join in.
    if window is None or not a["allow_is_causal_skip"] or a["use_vmap"] or torch.compiler.is_compiling():
        return False
    if not (isinstance(a["q_offset"], int) and isinstance(a["kv_offset"], int)) or a["q_offset"] or a["kv_offset"]:
        return False                    # a cache offset: not a fresh prefill (tensor offsets: static caches)
    if T != S:
        return False
    padding = prepare_padding_mask(a["attention_mask"], S, 0)              # (B, S) bool or None
    if padding is not None and not bool(padding[:, :S].all()):
        return False
    # local_size is also the chunk size of chunked attention (Llama 4): check the pattern itself.
    return _is_sliding_pattern(a["mask_function"], int(window), T, a["device"])


def _is_sliding_pattern(mask_function, window: int, length: int, device) -> bool:
    """Does mask_function keep exactly 0 <= q - kv < window? Tested on pairs (q, q - d) around
    the edges where the sliding pattern differs from causal (d = window), bidirectional (d < 0)
    and chunked (q = window, d = 1) ones; a mask function that is not index-based fails and so
    keeps the materialised mask."""
    queries = {0, 1, window - 2, window - 1, window, window + 1, 2 * window - 1, 2 * window, length - 1}
    offsets = (-2, -1, 0, 1, 2, window - 2, window - 1, window, window + 1)
    pairs = sorted({(q, q - d) for q in queries for d in offsets if 0 <= q < length and 0 <= q - d < length})
    q = torch.tensor([p[0] for p in pairs], device=device)                # (n,)
    kv = torch.tensor([p[1] for p in pairs], device=device)               # (n,)
    zero = torch.zeros_like(q)
    try:
        got = torch.as_tensor(mask_function(zero, zero, q, kv), device=device).bool().expand(q.shape)
    except Exception:
        return False
    return bool(torch.equal(got, (q - kv >= 0) & (q - kv < window)))
