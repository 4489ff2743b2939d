"""Per-head attention-output norms before and after the gate (head_norms.csv; summary.json
head_norm_ratio), streamed: per (layer, token type, head) the sums of pre = ||O[t, h]|| and
post = ||(g * O)[t, h]|| and of post / pre, in float64, and the token counts; nothing per token
is kept beyond one layer's (N, H) pre norms between its two events.

    pre        mean of ||O[t, h]|| over the tokens           (attn.hook_sdpa, (B, T, H, D))
    post       mean of ||(g * O)[t, h]||                     (attn.hook_z, (B, T, H * D))
    ratio_of_means  post / pre of those means: the size of the head's contribution, shrunk
    mean_ratio      mean over tokens of post / pre (tokens with pre = 0 left out: nothing to scale)

A token whose pre or post norm is not finite (a NaN in the model) is left out and counted.
"""
from __future__ import annotations

import math

import pandas as pd
import torch

from . import ALL, DECLARATION
from ..base import Metric
from .. import kernels
from ..reducers import F64, I64, Reducer


NORMS = "head_norms"     # the bus's name for an event's (N, H) per-head norms (Batch.derived)


class HeadNormStats(Reducer):
    """The sums of one attention layer, per (group, head); group 0 is every token, then the
    token types (probe.data.token_types.TokenGroups) when the pass has them."""

    summed = ("tokens", "pre", "post", "ratio", "ratio_n", "nonfinite")

    def __init__(self, groups: int, heads: int, device="cpu"):
        z = dict(device=device)
        self.tokens = torch.zeros(groups, heads, dtype=I64, **z)
        self.pre = torch.zeros(groups, heads, dtype=F64, **z)
        self.post = torch.zeros(groups, heads, dtype=F64, **z)
        self.ratio = torch.zeros(groups, heads, dtype=F64, **z)
        self.ratio_n = torch.zeros(groups, heads, dtype=I64, **z)
        self.nonfinite = torch.zeros((), dtype=I64, **z)

    def update(self, pre: torch.Tensor, post: torch.Tensor, groups: torch.Tensor | None) -> None:
        """pre, post: (N, H) float64 norms of the same tokens; groups: (N, G) bool membership of
        each token in the token types, or None (every token only)."""
        finite = torch.isfinite(pre) & torch.isfinite(post)                       # (N, H)
        if not bool(finite.all()):
            self.nonfinite += (~finite).sum()
            pre, post = pre.masked_fill(~finite, 0.0), post.masked_fill(~finite, 0.0)
        scaled = pre > 0                                                          # (N, H)
        ratio = torch.where(scaled, post / torch.where(scaled, pre, 1.0), 0.0)
        # (G + 1, N) weights: every token, then its groups; one product per sum, (G + 1, H).
        w = torch.ones(1, pre.shape[0], dtype=F64, device=pre.device)
        if groups is not None:
            w = torch.cat([w, groups.T.to(F64)])
        self.tokens += (w @ finite.to(F64)).round().to(I64)
        self.pre += w @ pre
        self.post += w @ post
        self.ratio += w @ ratio
        self.ratio_n += (w @ (scaled & finite).to(F64)).round().to(I64)


class HeadNorms(Metric):
    declaration = DECLARATION

    def setup(self) -> None:
        layout = self.layout
        token_groups = self.context.token_groups
        self.groups = token_groups
        self.names = [ALL, *(token_groups.names if token_groups is not None else ())]
        self.stats = {i: HeadNormStats(len(self.names), layout.num_heads) for i in layout.attention_layers}
        self._pre: dict[int, torch.Tensor] = {}        # layer -> (N, H) pre norms, until its o_proj input

    def keep_pre(self, layer, out, b) -> None:                                  # (B, T, H, D)
        if layer in self.stats:
            self._pre[layer] = b.derived(NORMS, out, lambda: _norms(b.rows(out)))

    def update(self, layer, z, b) -> None:                                     # (B, T, H * D)
        pre = self._pre.pop(layer, None)
        if pre is None:
            return
        H = self.layout.num_heads
        # An ungated layer's z is O itself: the bus hands back O's norms (Pass.emit same_as).
        post = b.derived(NORMS, z, lambda: _norms(b.rows(z.view(*z.shape[:2], H, -1))))   # (N, H)
        groups = None
        if self.groups is not None:
            _, pos, tok = b.where(z.device)
            groups = self.groups.membership(tok, pos)                           # (N, G)
        self.stats[layer].follow(z.device).update(pre.to(z.device), post, groups)

    def frames(self, done) -> dict:
        rows = []
        for layer, s in self.stats.items():
            # Each (groups, heads) tensor read once, as lists, not one element at a time.
            tokens, pre_sum, post_sum = s.tokens.tolist(), s.pre.tolist(), s.post.tolist()
            ratio, ratio_n = s.ratio.tolist(), s.ratio_n.tolist()
            for g, token_type in enumerate(self.names):
                for head in range(s.tokens.shape[1]):
                    n = tokens[g][head]
                    if n == 0 and token_type != ALL:
                        continue                       # a token type the data does not hold
                    pre, post = _div(pre_sum[g][head], n), _div(post_sum[g][head], n)
                    rows.append({"model": done.name, "layer": layer, "head": head, "token_type": token_type,
                                 "tokens": n, "pre": pre, "post": post, "ratio_of_means": _div(post, pre),
                                 "mean_ratio": _div(ratio[g][head], ratio_n[g][head])})
        return {"head_norms": pd.DataFrame(rows, columns=list(self.TABLES["head_norms"]))}

    def summarise(self, a, layers, done) -> dict:
        """head_norm_ratio: the mean of post / pre over every (token, head) of the attention
        layers (token-weighted), overall and per layer."""
        total, count = 0.0, 0
        for entry in layers:
            s = self.stats.get(entry["layer"])
            if s is None:
                continue
            ratio, n = float(s.ratio[0].sum()), int(s.ratio_n[0].sum())
            entry["head_norm_ratio"] = _div(ratio, n) if n else None
            total, count = total + ratio, count + n
        return {"head_norm_ratio": total / count if count else None}

    def nonfinite(self) -> dict[str, int]:
        return {f"{l}:head_norm": int(s.nonfinite) for l, s in self.stats.items() if int(s.nonfinite)}


BLOCK = 1 << 22          # elements per step: bounds the float64 copies (32 MB) at long T


def _norms(x: torch.Tensor) -> torch.Tensor:
    """(N, H, D) -> (N, H) float64 Euclidean norms: float32 on the CPU in one compiled pass
    (probe/metrics/kernels.py), otherwise a block of rows at a time on float64 copies. Both
    events go through this one function, so that equal vectors (no gate) give equal norms, bit
    for bit."""
    N, H, D = x.shape
    if kernels.usable(x):
        return kernels.vector_norms(x)
    rows = max(1, BLOCK // max(1, H * D))
    if N <= rows:
        return torch.linalg.vector_norm(x.to(F64).contiguous(), dim=-1)
    return torch.cat([torch.linalg.vector_norm(x[i:i + rows].to(F64).contiguous(), dim=-1)
                      for i in range(0, N, rows)])


def _div(total, n) -> float:
    total = float(total)
    return total / n if n else math.nan
