"""The per-token reducers of Gated DeltaNet layers: the output gate SiLU(z), beta and the decay
exp(g) per (quantity, token group, value head), their histograms, the tokens written in hardest,
the sparsity of the output before and after the gate, and the heads' output size.

Everything is summed in float64 / counted in int64 per batch; nothing per token is kept.
"""
from __future__ import annotations

import heapq
import math

import numpy as np
import torch

from ..reducers import F64, I64, LogHistogram, Reducer
from . import QUANTITIES

LOW = (0.01, 0.1, 0.5)           # frac_lt_*: share of |value| below (as the softmax gates)
HIGH = (0.9, 0.99)               # frac_gt_*: share above
BINS = 50
RANGES = {"gate_silu": (-0.5, 4.5), "beta": (0.0, 1.0), "decay": (0.0, 1.0)}
TOP = 10                         # gdn_top_beta.csv rows per layer and head


class TokenStats(Reducer):
    """One GDN layer: per quantity (QUANTITIES), group (0 all, 1 first, 2 rest, then the token
    types) and value head: count, sums, min, max, threshold counts; per quantity and head a
    histogram; per group and head the sum of g (the half-life's mean g)."""

    summed = ("count", "total", "total_sq", "below", "above", "hist", "g_total", "nonfinite")
    minimum = ("low",)
    maximum = ("high",)
    gathered = ("top",)

    def __init__(self, groups: int, heads: int, device="cpu", beta_max: float = 1.0):
        """beta_max: beta's upper end (2 where a layer doubles it: OLMo-Hybrid), its histogram's range."""
        Q, z = len(QUANTITIES), dict(device=device)
        self.heads = heads
        self.ranges = dict(RANGES, beta=(0.0, float(beta_max)))
        self.count = torch.zeros(Q, groups, heads, dtype=I64, **z)
        self.total = torch.zeros(Q, groups, heads, dtype=F64, **z)
        self.total_sq = torch.zeros(Q, groups, heads, dtype=F64, **z)
        self.low = torch.full((Q, groups, heads), math.inf, dtype=F64, **z)
        self.high = torch.full((Q, groups, heads), -math.inf, dtype=F64, **z)
        self.below = torch.zeros(Q, groups, heads, len(LOW), dtype=I64, **z)
        self.above = torch.zeros(Q, groups, heads, len(HIGH), dtype=I64, **z)
        self.hist = torch.zeros(Q, heads, BINS, dtype=I64, **z)
        self.g_total = torch.zeros(groups, heads, dtype=F64, **z)
        self.nonfinite = torch.zeros((), dtype=I64, **z)
        self.top: list[list[tuple]] = [[] for _ in range(heads)]     # (beta, seq, pos, tok), best first

    def update(self, values: dict, g: torch.Tensor, member: torch.Tensor, where) -> None:
        """values: quantity -> (N, H, D) float32 (D = dv for the gate, 1 for beta and the decay);
        g: (N, H) the log decay; member: (G, N) bool, each token's groups (row 0 every token);
        where: (seq, pos, tok) of the N tokens."""
        w = member.to(F64)                                                  # (G, N)
        for qi, name in enumerate(QUANTITIES):
            x = values[name].float()                                        # (N, H, D)
            finite = torch.isfinite(x)
            all_finite = bool(finite.all())
            if not all_finite:
                self.nonfinite += (~finite).sum()
                x = x.masked_fill(~finite, math.nan)
            # Everything is first reduced over D to (N, H) per token and head, then summed over
            # tokens per group by one (G, N) product: the (N, H, D) gate is read a few times,
            # never copied per group.
            x0 = x if all_finite else x.nan_to_num(0.0)
            n = torch.full(x.shape[:2], x.shape[-1], dtype=F64, device=x.device) if all_finite \
                else finite.sum(-1).to(F64)                                  # (N, H)
            self.count[qi] += (w @ n).round().to(I64)
            x64 = x0.double()
            self.total[qi] += w @ x64.sum(-1)
            self.total_sq[qi] += w @ (x64 * x64).sum(-1)
            del x64
            mag = x.abs()
            for i, t in enumerate(LOW):
                self.below[qi, :, :, i] += (w @ (mag < t).sum(-1).to(F64)).round().to(I64)
            for i, t in enumerate(HIGH):
                self.above[qi, :, :, i] += (w @ (x > t).sum(-1).to(F64)).round().to(I64)
            token_low = (x if all_finite else x.nan_to_num(math.inf)).amin(-1)       # (N, H)
            token_high = (x if all_finite else x.nan_to_num(-math.inf)).amax(-1)
            for gi in range(member.shape[0]):
                rows = member[gi]
                if bool(rows.any()):
                    self.low[qi, gi] = torch.minimum(self.low[qi, gi], token_low[rows].amin(0).double())
                    self.high[qi, gi] = torch.maximum(self.high[qi, gi], token_high[rows].amax(0).double())
            lo, hi = self.ranges[name]
            bins = (((x if all_finite else x.nan_to_num(lo)) - lo) / (hi - lo) * BINS).floor_().clamp_(0, BINS - 1).long()
            flat = bins + torch.arange(self.heads, device=x.device)[None, :, None] * BINS
            flat = flat.reshape(-1) if all_finite else flat[finite]
            self.hist[qi] += torch.bincount(flat, minlength=self.heads * BINS).view(self.heads, BINS).to(
                self.hist.device)
        self.g_total += w @ g.double().nan_to_num(0.0)
        self._top(values["beta"][..., 0], where)

    def _top(self, beta: torch.Tensor, where) -> None:
        """The batch's candidates for each head's TOP largest beta: the k largest and every value
        tied with the k-th (topk alone picks among ties arbitrarily, and _best's order, the
        earlier sequence then position, must choose among them), largest first in that order."""
        seq, pos, tok = where
        k = min(TOP, beta.shape[0])
        if not k:
            return
        values = beta.float().nan_to_num(-1.0)                                # (N, H)
        kth = values.topk(k, dim=0).values[-1].tolist()                       # (H,)
        values = values.cpu().numpy()
        s, p, t = seq.cpu().numpy(), pos.cpu().numpy(), tok.cpu().numpy()
        for h in range(self.heads):
            at = np.flatnonzero(values[:, h] >= kth[h])
            at = at[np.lexsort((p[at], s[at], -values[at, h]))[:TOP]]
            cands = [(float(values[i, h]), int(s[i]), int(p[i]), int(t[i])) for i in at]
            self.top[h] = _best(self.top[h] + cands)

    def merge(self, other: "TokenStats") -> "TokenStats":
        super().merge(other)
        self.top = [_best(a + b) for a, b in zip(self.top, other.top)]
        return self

    def merge_gathered(self, name: str, values: list) -> None:
        self.top = [_best([c for top in values for c in top[h]]) for h in range(self.heads)]

    def metrics(self, qi: int) -> dict[str, torch.Tensor]:
        """(G, H) float64 per metric of quantity qi (NaN where nothing was counted)."""
        n = self.count[qi].double()
        n0 = n.where(n > 0, torch.nan)
        mean = self.total[qi] / n0
        out = {"count": n, "mean": mean, "std": (self.total_sq[qi] / n0 - mean ** 2).clamp_min(0).sqrt(),
               "min": self.low[qi].where(n > 0, torch.nan), "max": self.high[qi].where(n > 0, torch.nan)}
        for i, t in enumerate(LOW):
            out[f"frac_lt_{t}"] = self.below[qi, :, :, i] / n0
        for i, t in enumerate(HIGH):
            out[f"frac_gt_{t}"] = self.above[qi, :, :, i] / n0
        if QUANTITIES[qi] == "decay":
            mean_g = self.g_total / n0
            out["mean_g"] = mean_g
            out["half_life"] = math.log(0.5) / mean_g          # tokens until exp(sum g) halves
        return out


def _best(cands: list) -> list:
    return heapq.nlargest(TOP, cands, key=lambda c: (c[0], -c[1], -c[2]))


class OutputStats(Reducer):
    """One GDN layer's output before and after the gate: |x| log histograms (sparsity, exact
    counts at the thresholds) of o, w * rmsnorm(o) and y; per (group, head) the summed norms."""

    summed = ("tokens", "pre", "normed", "post")

    def __init__(self, groups: int, heads: int, thresholds, device="cpu"):
        self.thresholds = tuple(float(t) for t in thresholds)
        self.pre_gate = LogHistogram(device, cuts=self.thresholds)
        self.normed_hist = LogHistogram(device, cuts=self.thresholds)
        self.gated = LogHistogram(device, cuts=self.thresholds)
        z = dict(device=device, dtype=F64)
        self.tokens = torch.zeros(groups, heads, dtype=I64, device=device)
        self.pre, self.normed, self.post = (torch.zeros(groups, heads, **z) for _ in range(3))

    def merge(self, other: "OutputStats") -> "OutputStats":
        super().merge(other)
        for name in ("pre_gate", "normed_hist", "gated"):
            getattr(self, name).merge(getattr(other, name))
        return self

    def update(self, bins: dict, norms: dict, member: torch.Tensor) -> None:
        """bins: variant -> Bins of |x| (metrics/bins.py); norms: pre / normed / post -> (N, H)
        float64 Euclidean norms per head; member: (G, N) bool."""
        self.pre_gate.add(bins["pre_gate"])
        self.normed_hist.add(bins["normed"])
        self.gated.add(bins["gated"])
        w = member.to(F64)
        finite = torch.isfinite(norms["pre"]) & torch.isfinite(norms["post"])
        self.tokens += (w @ finite.to(F64)).round().to(I64)
        for name in ("pre", "normed", "post"):
            getattr(self, name).add_(w @ norms[name].masked_fill(~finite, 0.0))

    def shares(self, mean_gate: float | None) -> dict[str, dict[float, float]]:
        """variant -> threshold -> share of |x| below it; mean_gate: read from the normed
        histogram at t / |mean SiLU(z)| (interpolated inside one bin unless t / m is a cut)."""
        out = {"pre_gate": {t: self.pre_gate.share_below(t)[0] for t in self.thresholds},
               "normed": {t: self.normed_hist.share_below(t)[0] for t in self.thresholds}}
        if mean_gate is not None and mean_gate != 0 and math.isfinite(mean_gate):
            out["mean_gate"] = {t: self.normed_hist.share_below(t, abs(mean_gate))[0] for t in self.thresholds}
        out["gated"] = {t: self.gated.share_below(t)[0] for t in self.thresholds}
        return out
