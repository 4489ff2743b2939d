"""Key ablations of causal attention: which keys a query may see, and key 0's value, changed.

    KeyAblation(window=1024, sinks=4)     StreamingLLM's "4 sinks + 1,024 recent" (arXiv 2309.17453)
    KeyAblation(window=1024)              a sliding window without the first tokens
    KeyAblation(hide_first=True)          key 0 masked for every query t >= 1, softmax renormalised
    KeyAblation(zero_first_value=True)    key 0's value zeroed, its attention kept

Key j is visible from query i iff j <= i and (window is None or i - j < window or j < sinks) and
not (hide_first and j == 0 < i): query 0 keeps key 0, its only key (a softmax over no key is
undefined). Like `SlidingWindow` the mask is index-based and never materialised as T x S: the
kernel (probe/capture/key_ablation.py) asks for one block of queries at a time, and F-Attn's
P[t, 0], its uniform reference and sink anatomy ask for the per-query or per-key counts.
Here rather than in capture/ so that the anatomy metric reads it without reaching up.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KeyAblation:
    window: int | None = None       # keys i - window < j <= i (None: every earlier key)
    sinks: int = 0                  # keys j < sinks stay visible whatever the window
    hide_first: bool = False        # key 0 hidden from every query t >= 1
    zero_first_value: bool = False  # key 0's value vector set to zero (its logits untouched)

    def masks_nothing(self, T: int) -> bool:
        """Whether, on a sequence of T tokens, every query sees exactly its causal keys."""
        return not self.hide_first and (self.window is None or self.window >= T)

    def key_blocks(self, start: int, end: int) -> list[tuple[int, int]]:
        """The key ranges [lo, hi) queries [start, end) can see, in order: the sinks before the
        band, then the band (every key up to end - 1 without a window)."""
        lo = 0 if self.window is None else max(0, start - self.window + 1)
        sinks = min(self.sinks, lo)
        return ([(0, sinks)] if sinks else []) + [(lo, end)]

    def visible(self, start: int, end: int, keys: torch.Tensor) -> torch.Tensor:
        """(1, 1, end - start, n) bool, True = attend, for queries [start, end) and the key
        positions `keys` (n,)."""
        i = torch.arange(start, end, device=keys.device)[:, None]          # (c, 1)
        return self.allows(i, keys[None, :])[None, None]

    def allows(self, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """Whether query i sees key j, elementwise over broadcast integer tensors."""
        ok = j <= i
        if self.window is not None:
            ok = ok & ((i - j < self.window) | (j < self.sinks))
        if self.hide_first:
            ok = ok & ~((j == 0) & (i > 0))
        return ok

    def first_key_visible(self, T: int, device) -> torch.Tensor:
        """(T,) bool: whether query t sees key 0."""
        t = torch.arange(T, device=device)
        seen = torch.ones(T, dtype=torch.bool, device=device)
        if self.window is not None and self.sinks < 1:
            seen = t < self.window
        if self.hide_first:
            seen = seen & (t == 0)
        return seen

    def visible_counts(self, T: int, device) -> torch.Tensor:
        """(T,) int64: how many keys query t sees."""
        t = torch.arange(T, device=device)
        n = t + 1
        if self.window is not None:
            # Past the window: the band's `window` keys plus the sinks before it.
            n = torch.where(t < self.window, n, self.window + (t - self.window + 1).clamp_max(self.sinks))
        if self.hide_first:
            before = KeyAblation(self.window, self.sinks).first_key_visible(T, device)   # (T,)
            n = n - (before & (t > 0)).long()
        return n

    def queries_seeing(self, T: int, device) -> torch.Tensor:
        """(T,) int64: how many queries see key j (sink anatomy's per-key uniform reference)."""
        j = torch.arange(T, device=device)
        last = torch.full_like(j, T - 1)                                   # query T - 1 sees j (causal)
        if self.window is not None:
            last = torch.where(j < self.sinks, last, (j + self.window - 1).clamp_max(T - 1))
        n = last - j + 1
        if self.hide_first:
            n[0] = 1                                                       # query 0 only
        return n

    def describe(self) -> str:
        """A short label: 'window 256 + 4 sinks', 'key 0 masked', 'key 0 value zeroed'."""
        parts = []
        if self.window is not None:
            parts.append(f"window {self.window}" + (f" + {self.sinks} sink{'s' * (self.sinks != 1)}"
                                                    if self.sinks else ""))
        if self.hide_first:
            parts.append("key 0 masked")
        if self.zero_first_value:
            parts.append("key 0 value zeroed")
        return ", ".join(parts) or "none"
