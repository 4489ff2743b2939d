"""Gate scores by token type: the first token, special tokens, whitespace, digits,
punctuation, word starts and pieces, and the user's groups (gates_by_token_type.csv).

Reads attn.hook_gate (the same scores as the gates metric) and classifies each valid position
with probe.data.token_types.TokenGroups.
"""
from __future__ import annotations

import math

import pandas as pd
import torch

from ..reducers import F64, I64
from . import DECLARATION
from ...data.token_types import BUILTIN
from ..base import Metric
from ..gates.reduce import GroupedGateStats


class TokenGroupGateStats(GroupedGateStats):
    """Gate scores of one layer per (group, head); a position may count in several groups.

    Non-finite scores are left out and counted in `nonfinite`.
    """

    summed = ("tokens", *GroupedGateStats.summed)

    def __init__(self, heads: int, names, device="cpu"):
        self.names = list(names)
        self._init_state(len(self.names), heads, device)
        self.tokens = torch.zeros(len(self.names), dtype=I64, device=device)

    def update(self, scores: torch.Tensor, groups: torch.Tensor) -> None:
        """scores: (N, H, Dg) gate scores; groups: (N, G) bool membership of each position."""
        if scores.shape[0] == 0:
            return
        s = scores.float()
        finite = None
        if not bool(torch.isfinite(s.amax() + s.amin())):              # NaN and inf reach them
            finite = torch.isfinite(s)
            s = s.masked_fill(~finite, 0.0)
        # Reduce each position over its Dg gates first, (N, H); then sum positions into groups
        # with one (G, N) @ (N, H) product per statistic. Sums and squares in float64.
        n = (torch.full(s.shape[:2], s.shape[2], dtype=F64, device=s.device) if finite is None
             else finite.sum(2, dtype=F64))
        per_row = [n, s.sum(2, dtype=F64), torch.linalg.vector_norm(s, dim=2, dtype=F64) ** 2]
        valid = (lambda x: x) if finite is None else (lambda x: x & finite)
        per_row += [valid(s < t).sum(2, dtype=F64) for t in self.LOW]
        per_row += [valid(s > t).sum(2, dtype=F64) for t in self.HIGH]
        m = groups.to(s.device).to(F64).T                                    # (G, N)
        n_g, total, total_sq, *counts = [(m @ x).to(self.count.device) for x in per_row]
        self.tokens += groups.sum(0).to(self.tokens.device)
        self.count += n_g.round().long()
        self.nonfinite += (m @ (s.shape[2] - n)).round().long().to(self.count.device)
        self.total += total
        self.total_sq += total_sq
        for i in range(len(self.LOW)):
            self.below[:, :, i] += counts[i].round().long()
        for i in range(len(self.HIGH)):
            self.above[:, :, i] += counts[len(self.LOW) + i].round().long()
        lo = s.amin(2) if finite is None else s.masked_fill(~finite, math.inf).amin(2)   # (N, H)
        hi = s.amax(2) if finite is None else s.masked_fill(~finite, -math.inf).amax(2)
        member = groups.to(s.device)[:, :, None]                            # (N, G, 1)
        dev = self.low.device
        self.low = torch.minimum(self.low, torch.where(member, lo[:, None], math.inf).amin(0).double().to(dev))
        self.high = torch.maximum(self.high, torch.where(member, hi[:, None], -math.inf).amax(0).double().to(dev))

    def rows(self) -> list[dict]:
        """Tidy rows (token_type, head, metric, value)."""
        out = []
        metrics = {"tokens": self.tokens[:, None].expand(-1, self.heads).double(), **self._metrics()}
        n = metrics["count"]                                                # (G, H)
        for g, name in enumerate(self.names):
            if int(self.tokens[g]) == 0 and name in BUILTIN:
                continue                       # absent built-in types; user groups always show
            for metric, values in metrics.items():
                for head, value in enumerate(values[g].tolist()):
                    if metric not in ("tokens", "count") and n[g, head] == 0:
                        value = math.nan
                    if metric in ("tokens", "count"):
                        value = int(value)
                    out.append({"token_type": name, "head": head, "metric": metric, "value": value})
        return out


class TokenTypes(Metric):
    declaration = DECLARATION
    COLUMNS = list(DECLARATION.tables["gates_by_token_type"])

    def setup(self) -> None:
        layout = self.layout
        token_groups = self.context.token_groups
        self.groups = token_groups
        if layout.gated and token_groups is not None:
            self.stats = {i: TokenGroupGateStats(layout.num_heads, token_groups.names)
                          for i in layout.attention_layers}

    def listens(self, event: str) -> bool:
        return bool(self.stats)

    def update(self, layer, scores, b) -> None:
        # (N, H, Dg) valid rows with their (N, G) groups.
        _, pos, tok = b.where(scores.device)
        self.stats[layer].follow(scores.device).update(b.rows(scores), self.groups.membership(tok, pos))

    def frames(self, done) -> dict:
        rows = []
        for layer, stats in self.stats.items():
            rows += [{"model": done.name, "layer": layer, "head": r["head"], "token_type": r["token_type"],
                      "metric": r["metric"], "value": r["value"]} for r in stats.rows()]
        return {"gates_by_token_type": pd.DataFrame(rows, columns=self.COLUMNS) if rows else pd.DataFrame()}
