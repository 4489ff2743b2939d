"""First-token attention (F-Attn): per attention layer and head, the attention probability on
key 0, mean over query positions t >= 1 (first_token.csv, with the paper's t >= 0 variant), by
query position in powers of two (first_token_buckets.csv), and summary.json's F-Attn, its
uniform reference and the sink rate.

Reads attn.hook_first_key: P[t, 0] (B, H, T), which the Hugging Face source computes from the
attention kernel's log-sum-exp and the TransformerLens source reads from hook_pattern.
"""
from __future__ import annotations

import functools
import math
import warnings

import torch

from ..reducers import F64, I64, Reducer
from . import DECLARATION, SINK_EPSILON
from ..base import Metric, mean, table


class FirstTokenStats(Reducer):
    """Attention probability on key 0 for one attention layer, per head.

    `rest` pools queries t >= 1 (the default F-Attn), `all` includes t = 0 (paper style),
    `uniform` sums 1/(t+1) over the same queries as `rest` (what uniform attention would
    give), and buckets split `rest` by query position.
    """

    # Query positions in powers of two, [1, 2), [2, 4), ..., [2^19, 2^20), [2^20, inf): log-spaced
    # at any sequence length, so 128 tokens get 7 buckets and 1M tokens 20; only buckets that
    # hold queries are written.
    BUCKETS = tuple(2 ** k for k in range(21))
    summed = ("sum_rest", "n_rest", "sum_all", "n_all", "uniform", "bucket_sum", "bucket_n",
              "bucket_uniform", "nonfinite", "drop_rest", "drop_all", "drop_bucket")

    def __init__(self, heads: int, device="cpu"):
        nb = len(self.BUCKETS)
        self.sum_rest = torch.zeros(heads, dtype=F64, device=device)
        self.sum_all = torch.zeros(heads, dtype=F64, device=device)
        self.n_rest = torch.zeros((), dtype=I64, device=device)
        self.n_all = torch.zeros((), dtype=I64, device=device)
        self.uniform = torch.zeros((), dtype=F64, device=device)
        self.bucket_sum = torch.zeros(nb, heads, dtype=F64, device=device)
        self.bucket_n = torch.zeros(nb, dtype=I64, device=device)
        self.bucket_uniform = torch.zeros(nb, dtype=F64, device=device)
        self.nonfinite = torch.zeros((), dtype=I64, device=device)
        # Queries counted (n_rest, n_all, bucket_n) but left out of one head, per head: its
        # probability or output row there was not finite while another head's was.
        self.drop_rest = torch.zeros(heads, dtype=I64, device=device)
        self.drop_all = torch.zeros(heads, dtype=I64, device=device)
        self.drop_bucket = torch.zeros(nb, heads, dtype=I64, device=device)

    def update(self, p0: torch.Tensor, valid: torch.Tensor | None, uniform: torch.Tensor | None = None,
               finite: torch.Tensor | None = None) -> None:
        """p0: (B, H, T) probability on key 0 per query; valid: (B, T) bool or None (all);
        uniform: (B|1, T) what uniform attention over each query's visible keys puts on key 0,
        None for plain causal attention (1 / (t + 1)); a sliding window gives 0 past the window;
        finite: (B, H, T) or (B, T) bool or None (all), where the attention output row is finite.

        A query whose probability is not finite in a head (a NaN in the model), or whose output
        row there is not (`finite`: a NaN in one KV head's values, or the CPU kernel's NaN rows
        next to a finite lse once an activation is inf), is left out of that head only, and
        counted once in `nonfinite`; the heads where it is finite keep it.
        """
        B, H, T = p0.shape
        if valid is None:                  # every query: the same weights for every layer, made once
            w, plain_uniform, bucket = _every_query(B, T, p0.device)
        else:
            w, plain_uniform, bucket = valid.double(), None, _buckets(T, p0.device)
        cell = None
        if finite is not None or (p0.numel() and not bool(torch.isfinite(p0.amax()))):
            cell = torch.isfinite(p0)                                   # (B, H, T)
            if finite is not None:
                finite = finite.to(p0.device)
                cell &= finite if finite.dim() == 3 else finite[:, None, :]
            self.nonfinite += ((~cell.all(1)) & (w > 0)).sum()
            w = w * cell.any(1)                     # (B, T): a query that some head measures
            p0 = p0.masked_fill(~cell, 0.0)
        weighted = p0.double() * w[:, None, :]                          # (B, H, T)
        self.sum_all += weighted.sum((0, 2))
        self.n_all += w.sum().long()
        rest = weighted[:, :, 1:]
        self.sum_rest += rest.sum((0, 2))
        self.n_rest += w[:, 1:].sum().long()
        if uniform is None:                 # the cached sum while w is still the cached ones
            uniform = plain_uniform if plain_uniform is not None and cell is None else _plain_uniform(w)  # (T-1,)
        else:
            uniform = (w[:, 1:] * uniform[:, 1:].double()).sum(0)         # (T-1,)
        self.uniform += uniform.sum()
        self.bucket_sum.index_add_(0, bucket, rest.sum(0).transpose(0, 1))    # (T-1, H) by bucket
        self.bucket_n.index_add_(0, bucket, w[:, 1:].sum(0).long())
        self.bucket_uniform.index_add_(0, bucket, uniform)
        if cell is not None:
            missing = ((~cell) & (w[:, None, :] > 0)).long()             # (B, H, T): counted, not in this head
            self.drop_all += missing.sum((0, 2))
            self.drop_rest += missing[:, :, 1:].sum((0, 2))
            self.drop_bucket.index_add_(0, bucket, missing[:, :, 1:].sum(0).transpose(0, 1))

    def head_queries(self) -> torch.Tensor:
        """(H,) queries t >= 1 each head's F-Attn averages over."""
        return self.n_rest - self.drop_rest

    def f_attn(self) -> torch.Tensor:
        return _ratio(self.sum_rest, self.head_queries())

    def f_attn_paper(self) -> torch.Tensor:
        return _ratio(self.sum_all, self.n_all - self.drop_all)

    def uniform_reference(self) -> float:
        return float(self.uniform / self.n_rest) if self.n_rest > 0 else math.nan

    def bucket_rows(self) -> list[dict]:
        """F-Attn by query position: one row per non-empty bucket [bucket_lo, bucket_hi) and
        head, with the queries it pools and what uniform attention would give on them."""
        out = []
        edges = (*self.BUCKETS, math.inf)
        # Each tensor read once, as lists, not one element at a time.
        queries, uniforms = self.bucket_n.tolist(), self.bucket_uniform.tolist()
        sums, dropped = self.bucket_sum.tolist(), self.drop_bucket.tolist()
        for b in range(len(self.BUCKETS)):
            n = int(queries[b])
            if n == 0:
                continue
            uniform = float(uniforms[b]) / n
            for head, s in enumerate(sums[b]):
                counted = n - int(dropped[b][head])
                out.append({"head": head, "bucket_lo": edges[b], "bucket_hi": edges[b + 1],
                            "value": s / counted if counted else math.nan, "n_queries": counted,
                            "uniform": uniform})
        return out


def _plain_uniform(w: torch.Tensor) -> torch.Tensor:
    """(T-1,) float64: what uniform causal attention puts on key 0, 1 / (t + 1), summed over the
    batch's weights w (B, T) at each query t >= 1."""
    pos = torch.arange(1, w.shape[1], device=w.device)
    return w[:, 1:].sum(0) / (pos + 1).double()


@functools.lru_cache(maxsize=8)
def _buckets(T: int, device) -> torch.Tensor:
    """(T-1,) int64: the BUCKETS bucket of each query position t >= 1, made once per length."""
    with torch.inference_mode(False):          # a cached tensor any later pass may read
        pos = torch.arange(1, T, device=device)
        return torch.bucketize(pos, torch.tensor(FirstTokenStats.BUCKETS, device=device), right=True) - 1


@functools.lru_cache(maxsize=8)
def _every_query(B: int, T: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of B rows of T valid queries: (w (B, T) float64 ones, _plain_uniform(w), the
    buckets), made once per shape and read by every layer (none of them is written to)."""
    with torch.inference_mode(False):
        w = torch.ones(B, T, dtype=F64, device=device)
        return w, _plain_uniform(w), _buckets(T, device)


def _ratio(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """total / count per head, NaN where a head counted nothing."""
    return torch.where(count > 0, total / count.clamp_min(1), torch.full_like(total, math.nan))


def first_key_weights(p0: torch.Tensor, valid: torch.Tensor | None, finite: torch.Tensor | None):
    """(p0 with left-out queries zeroed, w (B, T) float64: 1 where a query counts, the number of
    valid queries left out), for the per-sequence sums (metrics/per_sequence/). A query counts
    when it is valid and finite in every head (and its output row is finite, `finite`): stricter
    than FirstTokenStats.update, which leaves a non-finite cell out of its head only, so on a
    model with NaNs the per-sequence F-Attn can pool fewer queries than first_token.csv."""
    B, H, T = p0.shape
    w = torch.ones(B, T, dtype=F64, device=p0.device) if valid is None else valid.double()
    dropped = torch.zeros((), dtype=I64, device=p0.device)
    if finite is not None or (p0.numel() and not bool(torch.isfinite(p0.amax()))):
        finite = torch.isfinite(p0).all(1) & (True if finite is None else _rows(finite.to(p0.device)))  # (B, T)
        dropped = ((~finite) & (w > 0)).sum()
        w = w * finite
        p0 = p0.masked_fill(~finite[:, None, :], 0.0)
    return p0, w, dropped


def _rows(finite: torch.Tensor) -> torch.Tensor:
    """(B, T): finite in every head, from a (B, H, T) or (B, T) mask."""
    return finite.all(1) if finite.dim() == 3 else finite


class FirstToken(Metric):
    declaration = DECLARATION

    def setup(self) -> None:
        layout = self.layout
        self.stats = {i: FirstTokenStats(layout.num_heads) for i in layout.attention_layers}

    def update(self, layer, p0, b, uniform=None, finite=None) -> None:              # (B, H, T)
        if layer in self.stats:
            self.stats[layer].follow(p0.device).update(p0, None if b.all_valid else b.valid.to(p0.device),
                                                       uniform, finite=finite)

    def frames(self, done) -> dict:
        first = {c: [] for c in ("model", "layer", "head", "layer_type", "metric", "value")}
        buckets = {c: [] for c in ("model", "layer", "head", "bucket_lo", "bucket_hi", "value", "n_queries",
                                   "uniform")}
        heads = self.layout.num_heads
        for p in self.layout.layers:
            stats = self.stats.get(p.index)
            # Each (H,) vector once per layer, not once per head.
            by_metric = ({m: [math.nan] * heads for m in ("f_attn", "f_attn_paper", "n_queries")} if stats is None else
                         {"f_attn": [float(v) for v in stats.f_attn().tolist()],
                          "f_attn_paper": [float(v) for v in stats.f_attn_paper().tolist()],
                          "n_queries": [int(v) for v in stats.head_queries().tolist()]})
            # Rows head by head, each head's metrics in turn.
            first["head"] += [h for h in range(heads) for _ in by_metric]
            first["metric"] += list(by_metric) * heads
            first["value"] += [values[h] for h in range(heads) for values in by_metric.values()]
            n = heads * len(by_metric)
            first["model"] += [done.name] * n
            first["layer"] += [p.index] * n
            first["layer_type"] += [p.layer_type] * n
            if stats is not None:
                rows = stats.bucket_rows()
                buckets["model"] += [done.name] * len(rows)
                buckets["layer"] += [p.index] * len(rows)
                for column in ("head", "bucket_lo", "bucket_hi", "value", "n_queries", "uniform"):
                    buckets[column] += [row[column] for row in rows]
        return {"first_token": table(first), "first_token_buckets": table(buckets)}

    def summarise(self, a, layers, done) -> dict:
        # The table's attention rows read once, by (metric, layer) in row order: one pass, no
        # pandas filter per layer.
        by: dict[tuple, dict] = {}
        ft = a.first_token
        if len(ft):
            for layer, kind, metric, head, value in zip(ft.layer.tolist(), ft.layer_type.tolist(), ft.metric.tolist(),
                                                        ft["head"].tolist(), ft.value.tolist()):
                if kind == "attention" and metric in ("f_attn", "f_attn_paper"):
                    by.setdefault((metric, layer), {}).setdefault(head, value)
        attention_layers = [e["layer"] for e in layers if e["layer_type"] == "attention"]
        for entry in layers:
            if entry["layer_type"] != "attention":
                continue
            hf = by.get(("f_attn", entry["layer"]), {})
            entry["f_attn"] = mean(list(hf.values()))
            entry["heads"] = [{"head": int(h), "f_attn": hf.get(h), "mean_gate": None}
                              for h in range(self.layout.num_heads)]
        # The mean over attention layers, as the summary's F-Attn: windowed layers have their own.
        references = [s.uniform_reference() for s in self.stats.values()]
        # A head none of whose queries was finite has no F-Attn (NaN): no sink, and no cell of
        # the rate's denominator either; none left (a NaN model) leaves the rate undefined.
        cells = [v for (metric, _), hf in by.items() if metric == "f_attn" for v in hf.values()
                 if math.isfinite(v)]
        return {
            "f_attn": mean([layers[i]["f_attn"] for i in attention_layers]),
            "f_attn_paper": mean([mean(list(by.get(("f_attn_paper", i), {}).values())) for i in attention_layers]),
            "f_attn_uniform": sum(references) / len(references) if references else None,
            "sink_rate": (sum(v > SINK_EPSILON for v in cells) / len(cells)) if cells else None,
            "sink_epsilon": SINK_EPSILON,
        }

    def meta(self, done) -> dict:
        # Queries left out of F-Attn because their attention output row (or P[t, 0]) was not finite.
        dropped = {str(l): int(r.nonfinite) for l, r in self.stats.items() if int(r.nonfinite)}
        if dropped:
            warnings.warn(f"F-Attn left out {sum(dropped.values())} queries whose attention output was not "
                          f"finite (by layer: {', '.join(f'{l}: {n}' for l, n in dropped.items())}); "
                          "meta.json f_attn_dropped_queries")
        return {"f_attn_dropped_queries": dropped, "sink_epsilon": SINK_EPSILON}
