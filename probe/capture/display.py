"""The display patterns (attention_patterns.csv: head-averaged attention of the first prompt's
first n tokens) read off the analysis pass itself, instead of a second, eager forward.

Under causal attention query t < n sees keys < n only, so the first n rows of sequence 0's
pattern in the pass are the whole pattern of its first n tokens:

    P[h, t, k] = exp(cap(scale * q_t . k_k) + mask[t, k] - lse_t)          t, k < n

with lse_t the kernel's log-sum-exp (gpt-oss's sinks included), as attention.first_key_probability
forms column 0. It is rounded to the model dtype as eager attention rounds its softmax, then
averaged over heads in float32. An (H, n, n) block per layer, n = --display-len (24).
"""
from __future__ import annotations

import functools
import weakref

import torch

from ..families.attention_terms import SlidingWindow, cap_logits
from .attention import additive_mask, expand_kv


class DisplayPatterns:
    """Collects the head-averaged (n, n) pattern of dataset row 0 per attention layer, from the
    attention calls of the batch that holds that row (Capture.on_attention)."""

    def __init__(self, n: int):
        self.n = n
        self.maps: dict[int, torch.Tensor] = {}          # layer -> (n', n') float32 on the CPU
        self._seen = None                                # (weakref to a batch, its row 0 or None)

    def _row(self, batch) -> int | None:
        """The row of the batch that holds dataset row 0 (None: not this batch), found once per
        batch: every layer asks."""
        if self._seen is None or self._seen[0]() is not batch:
            rows = (batch.seq_index == 0).nonzero()
            self._seen = (weakref.ref(batch), int(rows[0, 0]) if len(rows) else None)
        return self._seen[1]

    def complete(self, layers) -> bool:
        """Whether every attention layer was seen (a resumed pass may have skipped row 0)."""
        return bool(self.maps) and all(layer in self.maps for layer in layers)

    @torch.no_grad()
    def observe(self, layer: int, batch, query, key, lse, mask, scale, softcap=None) -> None:
        """query (B, H, T, D), key (B, KV, S, D), lse (B, H, T), mask as the kernel had it."""
        r = self._row(batch)
        if r is None or self.n <= 0:
            return
        n = min(self.n, query.shape[2], int(batch.valid[r].sum()) if not batch.all_valid else self.n)
        q = query[r:r + 1, :, :n].float()                                      # (1, H, n, D)
        k = expand_kv(key[r:r + 1, :, :n], query.shape[1]).float()            # (1, H, n, D)
        logits = cap_logits(torch.matmul(q, k.transpose(-1, -2)) * scale, softcap)   # (1, H, n, n)
        hidden = _future(n, q.device)                                          # (n, n)
        if isinstance(mask, SlidingWindow):
            t = torch.arange(n, device=q.device)
            hidden = hidden | (t[None, :] <= t[:, None] - mask.size)
        logits = logits.masked_fill(hidden, float("-inf"))
        if mask is not None and not isinstance(mask, SlidingWindow):
            logits = logits + additive_mask(mask[min(r, mask.shape[0] - 1):][:1, :, :n, :n], torch.float32)
        p = torch.exp(logits - lse[r:r + 1, :, :n, None].float()).to(query.dtype)     # eager's rounding
        self.maps[layer] = p[0].float().mean(0).cpu()                          # (n, n)


@functools.lru_cache(maxsize=8)
def _future(n: int, device) -> torch.Tensor:
    """(n, n) bool: key k hidden from query t under causal attention (k > t); made once per n."""
    t = torch.arange(n, device=device)
    return t[None, :] > t[:, None]
