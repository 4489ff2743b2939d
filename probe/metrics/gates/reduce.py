"""Gate scores: per layer and head, first token vs the rest (gates.csv), their histogram
(gate_hist.csv) and the count-weighted mean gate of summary.json.

Reads attn.hook_gate: the scores after the gate's activation, (B, T, H, Dg) with Dg = 1
(headwise) or head_dim (elementwise).
"""
from __future__ import annotations

import math

import pandas as pd
import torch

from ...families.gates import SCORE_TOP
from ..reducers import F64, I64, Reducer
from . import DECLARATION, GATE_GROUPS
from ..base import Metric, mean

class GroupedGateStats(Reducer):
    """Gate-score state kept per (group, head), and the metrics read from it.

    Shared by GateStats (groups: first token / rest) and token_types.TokenGroupGateStats
    (groups: token types), so both report the same metrics computed the same way.
    """

    LOW = (0.01, 0.1, 0.5)
    HIGH = (0.9, 0.99)
    summed = ("count", "nonfinite", "total", "total_sq", "below", "above")
    minimum = ("low",)
    maximum = ("high",)

    def _init_state(self, groups: int, heads: int, device) -> None:
        self.heads = heads
        self.count = torch.zeros(groups, heads, dtype=I64, device=device)
        self.nonfinite = torch.zeros(groups, heads, dtype=I64, device=device)
        self.total = torch.zeros(groups, heads, dtype=F64, device=device)
        self.total_sq = torch.zeros(groups, heads, dtype=F64, device=device)
        self.low = torch.full((groups, heads), math.inf, dtype=F64, device=device)
        self.high = torch.full((groups, heads), -math.inf, dtype=F64, device=device)
        self.below = torch.zeros(groups, heads, len(self.LOW), dtype=I64, device=device)
        self.above = torch.zeros(groups, heads, len(self.HIGH), dtype=I64, device=device)

    def _metrics(self, pool: slice | None = None) -> dict[str, torch.Tensor]:
        """count, mean, std, min, max and the threshold fractions, in float64.

        Per (group, head) when `pool` is None; per head over the groups `pool` selects otherwise.
        Where the count is 0 the values are NaN or meaningless: callers blank them.
        """
        count, total, total_sq = self.count, self.total, self.total_sq
        low, high, below, above = self.low, self.high, self.below, self.above
        if pool is not None:
            count, total, total_sq = count[pool].sum(0), total[pool].sum(0), total_sq[pool].sum(0)
            low, high = low[pool].amin(0), high[pool].amax(0)
            below, above = below[pool].sum(0), above[pool].sum(0)
        n = count.double()
        mean = total / n
        var = (total_sq / n - mean ** 2).clamp_min(0)
        metrics = {"count": n, "mean": mean, "std": var.sqrt(), "min": low, "max": high}
        for i, t in enumerate(self.LOW):
            metrics[f"frac_lt_{t}"] = below[..., i] / n
        for i, t in enumerate(self.HIGH):
            metrics[f"frac_gt_{t}"] = above[..., i] / n
        return metrics


class GateStats(GroupedGateStats):
    """Gate scores of one layer, per head, for the first token and for the rest."""

    BINS = 50
    GROUPS = ("first", "rest")
    BLOCK = 1 << 22             # elements per update step: bounds the temporaries at long T
    summed = (*GroupedGateStats.summed, "hist")

    def __init__(self, heads: int, device="cpu", top: float = 1.0):
        """top: where the histogram's equal bins end (SCORE_TOP of the gate's activation: 1 for
        a sigmoid); a score at or above it counts in the last bin."""
        self._init_state(len(self.GROUPS), heads, device)
        self.top = top
        self.hist = torch.zeros(heads, self.BINS, dtype=I64, device=device)

    def update(self, first: torch.Tensor, rest: torch.Tensor) -> None:
        """first: (N1, H, Dg) scores at position 0; rest: (N2, H, Dg) at positions >= 1.

        Non-finite scores (a NaN in the model) are left out and counted in `nonfinite`.
        Long inputs are taken in blocks of rows, so the float32 / int64 temporaries stay a few
        MB even for elementwise gates at 32K tokens.
        """
        rows = max(1, self.BLOCK // max(1, first.shape[1] * first.shape[2]))
        for group, g in enumerate((first, rest)):
            for start in range(0, g.shape[0], rows):
                self._update(group, g[start:start + rows])

    def _update(self, group: int, g: torch.Tensor) -> None:
        g = g.float()
        finite = None
        if g.numel() and not bool(torch.isfinite(g.amax() + g.amin())):   # NaN and inf reach them
            finite = torch.isfinite(g)
            self.nonfinite[group] += (~finite).sum((0, 2))
            self.count[group] += finite.sum((0, 2))
            g = g.masked_fill(~finite, 0.0)
        else:
            self.count[group] += g.shape[0] * g.shape[2]
        # Squares in float64: float32 ones round at 6e-8 relative, which the variance
        # E[g^2] - mean^2 turns into a std error of ~2e-4 for saturated gates (true std 0).
        g64 = g.double()
        self.total[group] += g64.sum((0, 2))
        self.total_sq[group] += (g64 * g64).sum((0, 2))
        if finite is not None:
            g = g.masked_fill(~finite, math.nan)                      # left out from here on
        lo = g.amin((0, 2)) if finite is None else g.masked_fill(~finite, math.inf).amin((0, 2))
        hi = g.amax((0, 2)) if finite is None else g.masked_fill(~finite, -math.inf).amax((0, 2))
        self.low[group] = torch.minimum(self.low[group], lo.double())
        self.high[group] = torch.maximum(self.high[group], hi.double())
        for i, t in enumerate(self.LOW):
            self.below[group, :, i] += (g < t).sum((0, 2))           # NaN compares False
        for i, t in enumerate(self.HIGH):
            self.above[group, :, i] += (g > t).sum((0, 2))
        bins = (g.nan_to_num(0.0) * (self.BINS / self.top)).clamp_(0, self.BINS - 1).long()  # (N, H, Dg)
        flat = bins + torch.arange(self.heads, device=g.device)[None, :, None] * self.BINS
        flat = flat.reshape(-1) if finite is None else flat[finite]
        self.hist += torch.bincount(flat, minlength=self.heads * self.BINS
                                    ).view(self.heads, self.BINS).to(self.hist.device)

    def mean(self) -> float:
        n = int(self.count.sum())
        return float(self.total.sum()) / n if n else math.nan

    def rows(self) -> list[dict]:
        """Tidy rows: (head, group, metric, value) for groups all / first / rest."""
        out = []
        groups = dict(zip(GATE_GROUPS, (slice(None), slice(0, 1), slice(1, 2))))
        for name, sel in groups.items():
            metrics = self._metrics(sel)                                      # (H,) each
            n = metrics["count"]
            for metric, values in metrics.items():
                for head, value in enumerate(values.tolist()):
                    if n[head] == 0 and metric != "count":
                        value = math.nan
                    out.append({"head": head, "group": name, "metric": metric, "value": value})
        return out


class Gates(Metric):
    declaration = DECLARATION

    def setup(self) -> None:
        layout = self.layout
        if layout.gated:
            top = SCORE_TOP[layout.gate.activation]
            self.stats = {i: GateStats(layout.num_heads, top=top) for i in layout.attention_layers}

    def listens(self, event: str) -> bool:
        return bool(self.stats)

    def update(self, layer, scores, b) -> None:                              # (B, T, H, Dg)
        first = scores[:, 0] if b.all_valid else scores[:, 0][b.valid[:, 0].to(scores.device)]
        self.stats[layer].follow(scores.device).update(first, b.rest_rows(scores))

    def mean_of(self, layer: int) -> float | None:
        """The layer's mean gate score (the mean-gate control's scale), None without a gate."""
        return self.stats[layer].mean() if layer in self.stats else None

    def frames(self, done) -> dict:
        gates, hist = [], []
        for layer, stats in self.stats.items():
            gates += [{"model": done.name, "layer": layer, **row} for row in stats.rows()]
            edges = torch.linspace(0, stats.top, stats.BINS + 1).tolist()
            for head, counts in enumerate(stats.hist.tolist()):
                hist += [{"model": done.name, "layer": layer, "head": head, "bin_lo": edges[b],
                          "bin_hi": edges[b + 1], "count": c} for b, c in enumerate(counts)]
        return {"gates": pd.DataFrame(gates), "gate_hist": pd.DataFrame(hist)}

    def summarise(self, a, layers, done) -> dict:
        g_all = a.gates[(a.gates.group == "all")] if len(a.gates) else a.gates
        g_mean = g_all[g_all.metric == "mean"] if len(g_all) else g_all
        g_count = g_all[g_all.metric == "count"] if len(g_all) else g_all
        gated = self.layout.gated
        mean_gate = None
        if gated and len(g_mean):
            weights = g_count.set_index(["layer", "head"]).value
            values = g_mean.set_index(["layer", "head"]).value
            total = float(weights.sum())          # 0: every gate score non-finite (a NaN model)
            mean_gate = float((values * weights).sum()) / total if total > 0 else None
        for entry in layers:
            if entry["layer_type"] != "attention" or not gated:
                continue
            hg = g_mean[g_mean.layer == entry["layer"]].set_index("head").value
            entry["mean_gate"] = mean(hg.tolist())
            for head in entry["heads"]:
                head["mean_gate"] = hg.get(head["head"])
        return {"mean_gate": mean_gate}

    def nonfinite(self) -> dict[str, int]:
        return {f"{l}:gate": int(r.nonfinite.sum()) for l, r in self.stats.items() if int(r.nonfinite.sum())}
