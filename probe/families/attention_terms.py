"""What the families hand the attention back-end beyond query, key, value and mask.

transformers passes them as keyword arguments of its attention interface; the kernel
(probe/capture/attention.py) asks here instead of naming a family, and each family module says what
its keyword means:

    softcap   Gemma 2: the scaled scores become softcap * tanh(s / softcap)      (gemma.py)
    sinks     gpt-oss: (H,) one more value-less logit per head in every softmax  (gpt_oss.py)

and how two of them enter the softmax, for the kernel and for the sink-anatomy metric
(probe/metrics/anatomy/received.py), which recomputes the kernel's logits: `cap_logits` (the
soft-cap) and `SlidingWindow` / `band_mask` (a layer's `sliding_window`, never materialised).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import gemma, gpt_oss
# The sink ablations' index mask (not a family's term, but read by the kernel as a window is).
from .key_masks import KeyAblation  # noqa: F401


def softmax_terms(attention_kwargs: dict) -> tuple:
    """(softcap: float or None, sinks: (H,) tensor or None) of one attention call."""
    return gemma.softcap(attention_kwargs), gpt_oss.sinks(attention_kwargs)


@dataclass(frozen=True)
class SlidingWindow:
    """Stands in for a causal sliding-window mask without materialising it: key j is visible
    from query i iff 0 <= i - j < size, as transformers' `sliding_window_causal_mask_function`
    (`kv_idx > q_idx - sliding_window` and `kv_idx <= q_idx`). Only for a full prefill (T == S)."""
    size: int


def cap_logits(scores: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """Gemma 2's attention-logit soft-capping; identity without a cap."""
    return scores if softcap is None else torch.tanh(scores / softcap) * softcap


def band_mask(q_start: int, q_end: int, k_start: int, window: int, device) -> torch.Tensor:
    """(1, 1, q_end - q_start, q_end - k_start) bool, True = attend, for queries [q_start, q_end)
    and keys [k_start, q_end): key j visible from query i iff 0 <= i - j < window."""
    i = torch.arange(q_start, q_end, device=device)[:, None]              # (c, 1)
    j = torch.arange(k_start, q_end, device=device)[None, :]              # (1, n)
    return ((j <= i) & (j > i - window))[None, None]
