"""Massive activations (M-Act): per layer and site the largest |h|, its median and the top-3
with where they sit (massive.csv, massive_top.csv), and summary.json's m_act (the mean over
layers of the largest |layer output|).

Reads the four site events hook_attn_out, hook_resid_mid, hook_mlp_out, hook_resid_post:
(B, T, C) activations.
"""
from __future__ import annotations

import math

import torch

from ..bins import RowScan, abs_row_max, row_scan
from ...core.events import SITES
from ..reducers import I64, LogHistogram, Reducer, float32_value
from . import DECLARATION
from ..base import Metric, mean, table

SITE_ORDER = {s: i for i, s in enumerate(SITES)}


class MaxAbsStats(Reducer):
    """|h| of one site of one layer: max, top-k with where they sit, median, non-finite count."""

    summed = ("count", "nonfinite")
    gathered = ("top",)

    def __init__(self, k: int = 3, device="cpu"):
        self.k = k
        self.count = torch.zeros((), dtype=I64, device=device)
        self.nonfinite = torch.zeros((), dtype=I64, device=device)
        self.hist = LogHistogram(device)
        self.top: list[tuple] = []   # (abs_value, value, sequence, position, dim, token_id)

    def update(self, h: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor, tok: torch.Tensor,
               row_max: torch.Tensor | None = None) -> None:
        """h: (N, C) valid rows; seq, pos, tok: (N,) where each row sits; row_max: (N,) max |h|
        per row if known (bins.abs_row_max)."""
        if h.shape[0] == 0:
            return
        # Row maxima of |h| from the row max and min: no (N, C) float32 |h| copy is made unless
        # the activations hold NaN or inf (which reach these maxima, and so their sum; a finite sum
        # says every row maximum is finite).
        if row_max is None:
            row_max = torch.maximum(h.amax(1), -h.amin(1))
        row_max = row_max.float()                                    # (N,)
        if math.isfinite(float(row_max.sum())):
            a = None
            self.hist.update(h)                                       # sign bit ignored
            self.count += h.numel()
        else:
            a = h.float().abs()                                      # (N, C)
            finite = torch.isfinite(a)
            self.nonfinite += (~finite).sum()
            a = a.masked_fill(~finite, -1.0)                         # never selected, never counted
            self.hist.update(h)                      # counts the non-finite apart, as self.nonfinite
            self.count += finite.sum()
            row_max = a.amax(1)
        # The k largest elements lie in the k rows with the largest row maxima: O(N C) once,
        # then a top-k over k rows instead of over all N C elements.
        # One more than k, to see whether the k-th value is tied with the next one.
        C = h.shape[1]
        k = min(self.k + 1, h.shape[0])
        rows = row_max.topk(k).indices                               # (k,)
        picked = h[rows].float()                                     # (k, C), signed
        cand = picked.abs() if a is None else a[rows]
        vals, flat = cand.reshape(-1).topk(min(self.k + 1, k * C))
        top = vals.tolist()
        if len(top) > self.k and top[self.k] == top[self.k - 1] and top[self.k - 1] >= 0:
            a = h.float().abs() if a is None else a
            rows, dims, vals = self._ties(a, top[self.k - 1], seq, pos)
            signed, top, dims = h[rows, dims].float().tolist(), vals.tolist(), dims.tolist()
        else:
            flat = flat[: self.k]
            signed, top = picked.reshape(-1)[flat].tolist(), top[: self.k]
            at = flat.tolist()
            rows, dims = rows[[i // C for i in at]], [i % C for i in at]
        # Where each sits, gathered per column: a few tensor reads, not one per entry and column.
        at = rows.to(seq.device)
        new = [entry for entry in zip(top, signed, seq[at].tolist(), pos[at].tolist(), dims, tok[at].tolist())
               if entry[0] >= 0]
        self.top = self._best(self.top + new)

    def add_scan(self, scan: RowScan, b) -> bool:
        """update() from the event's compiled scan (bins.RowScan): its counts, its largest |h| and
        where they sit, no torch call. False, having added nothing, where only update() can say:
        a non-finite value, or a tie at the k-th largest (ordered by where the tied values sit)."""
        top = scan.top
        if scan.nonfinite or self.k >= scan.TOP or (len(top) > self.k and top[self.k][0] == top[self.k - 1][0]):
            return False
        if scan.numel == 0:
            return True
        self.hist.add_span(scan.lo, scan.span, scan.zero, scan.numel)
        self.count.numpy()[()] += scan.numel                         # numpy: a CPU scan's state
        _, T, C = scan.values.shape
        flat = scan.values.numpy().reshape(-1)
        seq_index, input_ids = b.numpy("seq_index"), b.numpy("input_ids")
        new = []
        for word, at in top[:self.k]:
            row, pos, dim = at // (T * C), at // C % T, at % C
            new.append((float32_value(word), float(flat[at]), int(seq_index[row]), pos, dim,
                        int(input_ids[row, pos])))
        self.top = self._best(self.top + new)
        return True

    def _ties(self, a, kth: float, seq, pos):
        """Top k when the k-th value is tied: the tied elements that come first by where they sit
        (sequence, position, dim), as `_best` orders them, so batching never changes the answer."""
        above = (a > kth).nonzero()                                  # fewer than k elements
        tied = (a == kth).nonzero()                                  # (R, 2) rows, dims
        order = torch.argsort(tied[:, 1], stable=True)                # lexicographic: dim, then
        for key in (pos, seq):                                        # position, then sequence
            order = order[torch.argsort(key.to(a.device)[tied[order, 0]], stable=True)]
        chosen = torch.cat([above, tied[order[: self.k - len(above)]]])
        rows, dims = chosen[:, 0], chosen[:, 1]
        return rows, dims, a[rows, dims]

    def _best(self, candidates: list[tuple]) -> list[tuple]:
        # Largest first; ties broken by where they sit so that merge order never matters.
        return sorted(candidates, key=lambda c: (-c[0], c[2], c[3], c[4]))[: self.k]

    def merge(self, other: "MaxAbsStats") -> "MaxAbsStats":
        super().merge(other)
        self.hist.merge(other.hist)
        self.top = self._best(self.top + other.top)
        return self

    def merge_gathered(self, name: str, values: list) -> None:
        self.top = self._best([c for top in values for c in top])

    def max_abs(self) -> float:
        return self.top[0][0] if self.top else math.nan

    def median_abs(self) -> float:
        return self.hist.quantile(0.5)


class Massive(Metric):
    declaration = DECLARATION
    TOP_K = 3                   # massive_top.csv rows per (layer, site)

    def setup(self) -> None:
        layout = self.layout
        self.stats = {(p.index, s): MaxAbsStats(self.TOP_K) for p in layout.layers for s in SITES}
        for site in SITES:                                          # update_attn_out, ... (declared events)
            setattr(self, f"update_{site}", self._updater(site))

    def _updater(self, site: str):
        def update(layer, h, b) -> None:                                         # (B, T, C)
            if h.dim() != 3:
                return
            stats = self.stats[(layer, site)].follow(h.device)
            scan = row_scan(h, b)                  # float32 on the CPU: one compiled pass
            if scan is None or not stats.add_scan(scan, b):
                stats.update(b.rows(h), *b.where(h.device), row_max=b.rows(abs_row_max(h, b)))
        return update

    def frames(self, done) -> dict:
        massive = {c: [] for c in ("model", "layer", "site", "metric", "value")}
        top = {c: [] for c in ("model", "layer", "site", "rank", "value", "abs_value", "sequence", "position",
                               "dim", "token_id", "token")}
        texts: dict[int, str] = {}                  # each token decoded once (a few repeat a lot)

        def text(token_id: int) -> str:
            if token_id not in texts:
                texts[token_id] = token_text(done.tokenizer, token_id)
            return texts[token_id]
        # Rows by layer, then site in paper order (the stats are keyed (layer, site)).
        for (layer, site), stats in sorted(self.stats.items(), key=lambda kv: (kv[0][0], SITE_ORDER[kv[0][1]])):
            if int(stats.count) == 0:
                continue
            massive["metric"] += ["max_abs", "median_abs", "count", "nonfinite"]
            massive["value"] += [stats.max_abs(), stats.median_abs(), int(stats.count), int(stats.nonfinite)]
            for column, value in (("model", done.name), ("layer", layer), ("site", site)):
                massive[column] += [value] * 4
                top[column] += [value] * len(stats.top)
            for rank, (absval, value, seq, pos, dim, tok) in enumerate(stats.top):
                for column, v in (("rank", rank + 1), ("value", value), ("abs_value", absval), ("sequence", seq),
                                  ("position", pos), ("dim", dim), ("token_id", tok), ("token", text(tok))):
                    top[column].append(v)
        return {"massive": table(massive), "massive_top": table(top)}

    def summarise(self, a, layers, done) -> dict:
        m = a.massive                # empty: no finite activation anywhere (NaN model)
        by_layer: dict[int, list] = {}
        if len(m):                   # one pass over the table, in row order, no filter per layer
            for layer, site, metric, value in zip(m.layer.tolist(), m.site.tolist(), m.metric.tolist(),
                                                  m.value.tolist()):
                if metric == "max_abs":
                    by_layer.setdefault(layer, []).append((site, value))
        for entry in layers:
            for site, value in by_layer.get(entry["layer"], ()):
                entry["m_act"][site] = value
        return {"m_act": mean([entry["m_act"].get("resid_post") for entry in layers])}

    def nonfinite(self) -> dict[str, int]:
        return {f"{l}:{s}": int(r.nonfinite) for (l, s), r in self.stats.items() if int(r.nonfinite)}

    def reducers(self) -> list:
        return [self.stats[key] for key in sorted(self.stats)]


def token_text(tokenizer, token_id: int) -> str:
    if tokenizer is None:
        return str(token_id)
    try:
        return tokenizer.decode([token_id])
    except Exception:
        return str(token_id)
