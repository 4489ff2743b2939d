"""Streaming statistics of sink anatomy for one attention layer: who receives attention, whether
sinks carry value, and whether gates close where attention goes to a sink.

Fed per batch with what probe.metrics.anatomy.received computes. Each (sequence, head, key) is a cell whose
score is Gu et al.'s importance score (the mean of P[t, k] over the queries that see k; ICLR
2025, "When Attention Sink Emerges in Language Models"). From the cells:

- by key position: exact for positions 0-15, then power-of-two buckets [16, 32), [32, 64), ...
  as FirstTokenStats buckets query positions: the mean score over cells, the pooled mean
  (sum of P over sum of queries), and the sink rate, the share of cells (per head, or over
  heads: Gu et al.'s share of heads) whose score exceeds epsilon (0.3 as Gu et al.);
- by token id: sum of scores, cells and cells above epsilon, over heads;
- secondary sinks: the N highest-scoring cells above epsilon at positions >= 1, with where
  they sit (layer, head, sequence, position, token), ties broken by where they sit so that
  merge order never changes the list;
- gate-sink coupling: the mean gate score of queries binned by the attention they put on the
  sink key(s);
- value drains: per head, the sink value's norm against the median value norm, and the sinks'
  share of the attention output (probe.metrics.anatomy.received.ValueDrains).

The last keys of a causal sequence are seen by a handful of queries (the last one by itself
only), their nearest neighbours, which attend to recent keys: their scores read high (recency,
not a sink). The token table takes only cells seen by at least `min_queries` queries, the
secondary sinks only cells seen by at least `sink_min_queries` (benchmarks/anatomy_min_queries.py
measures how many a key needs on the real models). The position table keeps every cell, as Gu
et al. define it.
Sums are float64 and counts int64; merge is exact (up to float64 summation order).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch

from .received import ReceivedAttention, ValueDrains
from ..reducers import F64, I64, Reducer
from ..token_index import TokenIndex

EXACT_POSITIONS = 16
# Bucket b holds key positions [EDGES[b], EDGES[b + 1]), the last one [2^20, inf).
EDGES = (*range(EXACT_POSITIONS), *(2 ** k for k in range(4, 21)))
# A head is a sink above the one sink threshold (Gu et al.'s 0.3), named once, in the
# first-token metric's declaration.
from ..first_token import SINK_EPSILON as EPSILON  # noqa: E402
GATE_BINS = 10          # sink attention in [0, 0.1), [0.1, 0.2), ..., [0.9, 1]


def position_bucket(pos: torch.Tensor) -> torch.Tensor:
    """Bucket index of key positions (any shape, int64)."""
    return torch.bucketize(pos, torch.tensor(EDGES, device=pos.device), right=True) - 1


@functools.lru_cache(maxsize=16)
def key_buckets(S: int, device: str) -> torch.Tensor:
    """(S,) the bucket of each key position 0 .. S - 1: the same for every layer and batch of a
    pass, made once (read only)."""
    return position_bucket(torch.arange(S, device=device))


class AnatomyStats(Reducer):
    """Sink anatomy of one attention layer with `heads` query heads (see the module docstring)."""

    summed = ("pos_score", "pos_cells", "pos_sinks", "pos_prob", "pos_queries",
              "token_score", "token_cells", "token_sinks", "secondary_cells", "excluded",
              "gate_sum", "gate_sq", "gate_n", "gate_attention",
              "drain_ratio", "drain_keys", "norm_share", "projection_share", "share_n")
    gathered = ("top",)

    def __init__(self, layer: int, heads: int, vocab_size: int, *, epsilon: float = EPSILON,
                 top: int = 100, min_queries: int = 16, sink_min_queries: int | None = None,
                 index: TokenIndex | None = None, device="cpu"):
        """index: the rows of the by-token tables (token_index.py; shared by every layer), default
        one per id of the vocabulary."""
        nb = len(EDGES)
        self.layer, self.heads, self.vocab_size = layer, heads, vocab_size
        self.index = TokenIndex.of(None, vocab_size) if index is None else index
        rows = len(self.index)
        self.epsilon, self.top_n, self.min_queries = float(epsilon), top, min_queries
        # Secondary sinks: cells seen by this many queries at least (None: min_queries).
        self.sink_min_queries = min_queries if sink_min_queries is None else sink_min_queries
        z = lambda *shape, dtype=F64: torch.zeros(*shape, dtype=dtype, device=device)  # noqa: E731
        self.pos_score = z(nb, heads)               # sum of cell scores
        self.pos_cells = z(nb, dtype=I64)           # cells per head (the same in every head)
        self.pos_sinks = z(nb, heads, dtype=I64)    # cells with score > epsilon
        self.pos_prob = z(nb, heads)                # sum of P[t, k] over the queries that see k
        self.pos_queries = z(nb, dtype=I64)         # those queries
        self.token_score = z(rows)                  # (U,) over heads, a row per token id (index)
        self.token_cells = z(rows, dtype=I64)       # (sequence, key) cells, each for every head
        self.token_sinks = z(rows, dtype=I64)       # (sequence, key, head) cells > epsilon
        self.secondary_cells = z(heads, dtype=I64)  # every cell of the secondary-sink list's kind
        self.excluded = z((), dtype=I64)            # queries left out: non-finite lse
        self.gate_sum = z(GATE_BINS, heads)
        self.gate_sq = z(GATE_BINS, heads)
        self.gate_n = z(GATE_BINS, heads, dtype=I64)
        self.gate_attention = z(GATE_BINS, heads)   # sum of the sink attention itself, per bin
        self.drain_ratio = z(heads)                 # sum of ||v_sink|| / median ||v||
        self.drain_keys = z(heads, dtype=I64)
        self.norm_share = z(heads)
        self.projection_share = z(heads)
        self.share_n = z(heads, dtype=I64)
        self.top: list[tuple] = []   # (score, layer, head, sequence, position, token)

    # -- updates --------------------------------------------------------------------------------

    def update(self, received: ReceivedAttention, input_ids: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
        """received: one batch of this layer (invalid keys have count 0 there and are skipped);
        input_ids (B, S) the token at each key; seq_index (B,) the sequences' numbers. Returns
        each row's count of secondary-sink cells (B,), which per_sequence.csv keeps."""
        device = self.pos_score.device
        total, count = received.total.to(device), received.count.to(device)     # (B, H, S), (B, S)
        B, H, S = total.shape
        self.excluded += received.excluded.sum().to(device)
        cell = count > 0                                                          # (B, S)
        score = total / count.clamp_min(1)[:, None, :]                            # (B, H, S)
        sink = (score > self.epsilon) & cell[:, None, :]                          # (B, H, S)
        bucket = key_buckets(S, str(device))                                      # (S,)
        # By position: sums over sequences, then per bucket (index_add over the S keys).
        self.pos_score.index_add_(0, bucket, (score * cell[:, None]).sum(0).T)
        self.pos_cells.index_add_(0, bucket, cell.sum(0))
        self.pos_sinks.index_add_(0, bucket, sink.sum(0).T)
        self.pos_prob.index_add_(0, bucket, total.sum(0).T)
        self.pos_queries.index_add_(0, bucket, count.sum(0))
        # By token and the secondary sinks: cells seen by enough queries.
        firm = count >= max(1, self.min_queries)                                  # (B, S)
        tok = self.index.slots(input_ids.to(device).long()[firm])                 # (N,) rows
        self.token_score.index_add_(0, tok, (score * firm[:, None]).sum(1)[firm])
        self.token_cells.index_add_(0, tok, torch.ones_like(tok))
        self.token_sinks.index_add_(0, tok, (sink & firm[:, None]).sum(1)[firm])
        seen = (count >= max(1, self.sink_min_queries))[:, None, :]              # (B, 1, S)
        secondary = sink & seen & (torch.arange(S, device=device) >= 1)           # (B, H, S)
        self.secondary_cells += secondary.sum((0, 2))
        self._keep_top(score, secondary, input_ids.to(device), seq_index.to(device))
        return secondary.sum((1, 2))

    def _keep_top(self, score, secondary, input_ids, seq_index) -> None:
        """Add this batch's best secondary-sink cells to `top`. Only cells at least as high as
        the N-th highest can enter the list; ties at that score are all taken, so the sort in
        `_best` decides them by where they sit, whatever the batching."""
        values = score[secondary]                                                 # (M,)
        if values.numel() == 0:
            return
        if values.numel() > self.top_n:
            cut = values.topk(self.top_n).values[-1]
            secondary = secondary & (score >= cut)
        b, h, s = secondary.nonzero(as_tuple=True)
        seq = seq_index[b].tolist()
        tok = input_ids[b, s].tolist()
        new = [(v, self.layer, hh, q, p, t) for v, hh, q, p, t in
               zip(score[b, h, s].tolist(), h.tolist(), seq, s.tolist(), tok)]
        self.top = self._best(self.top + new)

    def _best(self, candidates: list[tuple]) -> list[tuple]:
        # Highest first; ties by (sequence, position, head): a total order, so merging is exact.
        return sorted(candidates, key=lambda c: (-c[0], c[3], c[4], c[2]))[: self.top_n]

    def update_gate(self, sink_attention: torch.Tensor, gate: torch.Tensor,
                    valid: torch.Tensor | None = None) -> None:
        """sink_attention (B, H, T): what each query puts on the sink key(s) (the sum of
        received.key_probability over them); gate (B, H, T): the query's gate score in that
        head (the mean over the head's gate dimensions for an elementwise gate); valid (B, T)
        or None. Queries with a non-finite value in either are left out."""
        device = self.gate_sum.device
        a, g = sink_attention.to(device).double(), gate.to(device).double()
        keep = torch.isfinite(a) & torch.isfinite(g)                               # (B, H, T)
        if valid is not None:
            keep = keep & valid.to(device).bool()[:, None, :]
        a, g = a.masked_fill(~keep, 0.0), g.masked_fill(~keep, 0.0)
        # bin = floor(a * GATE_BINS), 1.0 in the last bin; offset by head for one index_add.
        bins = (a * GATE_BINS).long().clamp_(0, GATE_BINS - 1)                   # (B, H, T)
        heads = torch.arange(self.heads, device=device)[None, :, None]
        flat = (bins * self.heads + heads).reshape(-1)
        w = keep.reshape(-1)
        for state, x in ((self.gate_sum, g), (self.gate_sq, g * g), (self.gate_attention, a)):
            state.view(-1).index_add_(0, flat, x.reshape(-1))
        self.gate_n.view(-1).index_add_(0, flat, w.long())

    def update_drains(self, drains: ValueDrains, valid: torch.Tensor | None = None) -> None:
        """drains: probe.metrics.anatomy.received.value_drains of this batch; valid (B, T) or None (the shares
        of queries that do not count are NaN there already). Non-finite values are left out."""
        device = self.drain_ratio.device
        ratio = drains.value_norm_ratio.to(device).double()                               # (B, H, K)
        finite = torch.isfinite(ratio)
        self.drain_ratio += ratio.masked_fill(~finite, 0.0).sum((0, 2))
        self.drain_keys += finite.sum((0, 2))
        norm, proj = drains.norm_share.to(device).double(), drains.projection_share.to(device).double()  # (B, H, T)
        keep = torch.isfinite(norm) & torch.isfinite(proj)
        if valid is not None:
            keep = keep & valid.to(device).bool()[:, None, :]
        self.norm_share += norm.masked_fill(~keep, 0.0).sum((0, 2))
        self.projection_share += proj.masked_fill(~keep, 0.0).sum((0, 2))
        self.share_n += keep.sum((0, 2))

    # -- merge ----------------------------------------------------------------------------------

    def merge(self, other: "AnatomyStats") -> "AnatomyStats":
        super().merge(other)
        self.top = self._best(self.top + other.top)
        return self

    def merge_gathered(self, name: str, values: list) -> None:
        self.top = self._best([c for top in values for c in top])

    # -- results --------------------------------------------------------------------------------

    POSITION_COLUMNS = ("head", "key_lo", "key_hi", "cells", "queries", "score", "pooled", "sink_rate")

    def position_rows(self) -> list[dict]:
        """One row per non-empty position bucket [key_lo, key_hi) and head: mean score over
        cells, pooled mean (sum of P / queries), sink rate; head -1 pools the heads (the sink
        rate there is Gu et al.'s share of heads above epsilon)."""
        columns = self.position_columns()
        return [dict(zip(columns, row)) for row in zip(*columns.values())]

    def position_columns(self) -> dict[str, list]:
        """position_rows as columns (POSITION_COLUMNS, equal-length lists): how the table is built.
        Per bucket holding cells, a row per head and one over heads (head -1, the heads' mean)."""
        cells = self.pos_cells.cpu().numpy()
        kept = np.flatnonzero(cells)                                  # (K,) buckets holding cells
        heads, per = self.heads, self.heads + 1

        def with_mean(x: np.ndarray) -> np.ndarray:                   # (K, H) -> (K, H + 1)
            # cumsum adds the heads in order, as Python's sum: the same float64 mean, bit for bit
            return np.concatenate([x, np.cumsum(x, axis=1)[:, -1:] / heads], axis=1)
        edges = (*EDGES, math.inf)
        n, queries = cells[kept][:, None], self.pos_queries.cpu().numpy()[kept][:, None]
        return {"head": [*range(heads), -1] * len(kept),
                "key_lo": [edges[b] for b in kept.tolist() for _ in range(per)],
                "key_hi": [edges[b + 1] for b in kept.tolist() for _ in range(per)],
                "cells": np.repeat(n[:, 0], per).tolist(),
                "queries": np.repeat(queries[:, 0], per).tolist(),
                "score": (with_mean(self.pos_score.cpu().numpy()[kept]) / n).reshape(-1).tolist(),
                "pooled": (with_mean(self.pos_prob.cpu().numpy()[kept]) / queries).reshape(-1).tolist(),
                "sink_rate": (with_mean(self.pos_sinks.cpu().numpy()[kept]) / n).reshape(-1).tolist()}

    def token_rows(self, k: int | None = 20) -> list[dict]:
        """The k tokens with the highest mean score (over cells and heads), ties by token id:
        token, cells, mean score, share of (cell, head) pairs above epsilon."""
        cells = self.token_cells
        seen = (cells > 0).nonzero()[:, 0]
        mean = (self.token_score[seen] / (cells[seen].double() * self.heads)).cpu().numpy()
        rows = seen.cpu().numpy()
        order = np.lexsort((rows, -mean))[:k].tolist()               # by -mean, then by row
        mean, rows = mean.tolist(), rows.tolist()
        n, sinks = cells[seen].tolist(), self.token_sinks[seen].tolist()
        return [{"token": self.index.id(rows[i]), "cells": n[i], "score": mean[i],
                 "sink_share": sinks[i] / (n[i] * self.heads)} for i in order]

    def secondary_sinks(self) -> list[dict]:
        return [dict(zip(("score", "layer", "head", "sequence", "position", "token"), c)) for c in self.top]

    def gate_rows(self) -> list[dict]:
        """Per head and non-empty bin of sink attention [lo, hi): queries, mean sink attention,
        mean gate and its standard deviation."""
        out = []
        for b in range(GATE_BINS):
            for h in range(self.heads):
                n = int(self.gate_n[b, h])
                if n == 0:
                    continue
                mean = float(self.gate_sum[b, h]) / n
                var = max(float(self.gate_sq[b, h]) / n - mean ** 2, 0.0)
                out.append({"head": h, "attention_lo": b / GATE_BINS, "attention_hi": (b + 1) / GATE_BINS,
                            "queries": n, "attention": float(self.gate_attention[b, h]) / n,
                            "gate": mean, "gate_std": math.sqrt(var)})
        return out

    def drain_rows(self) -> list[dict]:
        """Per head: mean value-norm ratio of the sink keys, mean norm and projection shares."""
        out = []
        # Each (H,) tensor read once, as a list, not one element at a time.
        drain_keys, share_n, drain_ratio = self.drain_keys.tolist(), self.share_n.tolist(), self.drain_ratio.tolist()
        norm_share, projection_share = self.norm_share.tolist(), self.projection_share.tolist()
        for h in range(self.heads):
            keys, n = int(drain_keys[h]), int(share_n[h])
            out.append({"head": h, "sink_keys": keys, "queries": n,
                        "value_norm_ratio": float(drain_ratio[h]) / keys if keys else math.nan,
                        "norm_share": float(norm_share[h]) / n if n else math.nan,
                        "projection_share": float(projection_share[h]) / n if n else math.nan})
        return out
