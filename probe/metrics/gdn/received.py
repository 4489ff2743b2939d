"""Where a Gated DeltaNet layer's output comes from, key by key: the share of each query's output
that every key carries, pooled by key position and by token, and the keys that carry most after
key 0 (secondary "state sinks"). Fed by keys.py's walk over the per-key terms (--gdn --anatomy).

For query t the per-key terms c_{t,s} (decompose.py, write basis) give the share

    r_{t,s} = |c_{t,s}| / sum_{s'<=t} |c_{t,s'}|      (in [0, 1], sums to 1 over keys s <= t)

the GDN analogue of the attention probability P[t, s]; key 0's is the key-0 share. As for
softmax attention (Gu et al., ICLR 2025), a key's score is the mean share it carries over the
queries that can read it: score_s = (1 / n_s) sum_{t >= s, t >= 1} r_{t,s}, with n_s those
queries. Query 0 is left out everywhere (its output is key 0's term alone: a share of 1 by
construction). "Key s" is position s after the causal conv1d (docs/gdn.md).
"""
from __future__ import annotations

import heapq

import torch

from ..reducers import F64, I64, Reducer, grown
from ..token_index import TokenIndex

TOP = 10                     # secondary state sinks kept per head
# Queries a key needs before it can be named a state sink: the last keys of a sequence are read
# by few queries, all near them, and score high from recency alone (as for softmax attention,
# probe/metrics/anatomy; its 128 is used here too).
SINK_MIN_QUERIES = 128
TOKEN_MIN_CELLS = 16         # (query, head) cells a token needs for the by-token table


class ReceivedStats(Reducer):
    """One GDN layer, per value head: received shares summed by key position (H, positions) and
    the queries that read each position; pooled over heads by token id; the top secondary sinks."""

    summed = ("by_key", "seen", "token_total", "token_cells")
    gathered = ("sinks",)

    def __init__(self, heads: int, positions: int, vocab_size: int | None = None, device="cpu",
                 index: TokenIndex | None = None):
        """index: the rows of the by-token tables (token_index.py: the data's ids), default a
        row per vocabulary id (vocab_size, or grown to the largest id read)."""
        z = dict(device=device)
        self.heads = heads
        self.index = TokenIndex.of(None, vocab_size) if index is None else index
        self.by_key = torch.zeros(heads, positions, dtype=F64, **z)          # (H, S)
        self.seen = torch.zeros(heads, positions, dtype=I64, **z)            # (H, S)
        self.token_total = torch.zeros(len(self.index), dtype=F64, **z)      # (U,) a row per token id
        self.token_cells = torch.zeros(len(self.index), dtype=I64, **z)      # (U,)
        # per head: (score, sequence, position, token id) of the sequences' top keys s >= 1
        self.sinks: list[list[tuple]] = [[] for _ in range(heads)]

    def start(self, heads: int, L: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Zeroed per-sequence sums (H, L) float64 and counts (H, L) int64 that `add` fills."""
        return (torch.zeros(heads, L, dtype=F64, device=device), torch.zeros(heads, L, dtype=I64, device=device))

    @staticmethod
    def add(local: tuple, t0: int, magnitudes: torch.Tensor, counted: torch.Tensor) -> None:
        """One block of queries [t0, t0 + Bq): magnitudes |c_{t,s}| (H, Bq, t1) (0 for s > t),
        counted (H, Bq) bool: the queries that count."""
        total, seen = local
        H, Bq, t1 = magnitudes.shape
        pos = torch.arange(t0, t0 + Bq, device=magnitudes.device)
        use = (counted & (pos >= 1)[None]).to(magnitudes.dtype)                        # (H, Bq)
        norm = magnitudes.sum(-1)                                                      # (H, Bq)
        # sum_t r_{t,s} = sum_t |c_{t,s}| * (use_t / norm_t): one (H, 1, Bq) @ (H, Bq, t1) product,
        # no block-sized temporary beside the magnitudes themselves
        weight = use / norm.where(norm > 0, 1.0)                                       # (H, Bq)
        total[:, :t1] += (weight[:, None, :] @ magnitudes)[:, 0]
        reads = (torch.arange(t1, device=magnitudes.device)[None, :] <= pos[:, None]).to(use.dtype)  # (Bq, t1)
        seen[:, :t1] += (use @ reads).round().to(seen.dtype)                           # exact: counts < 2^53

    def finish(self, local: tuple, ids: torch.Tensor, sequence: int) -> None:
        """Fold one sequence's sums in; ids (L,) the token ids of its positions."""
        total, seen = local
        L = total.shape[1]
        if L > self.by_key.shape[1]:          # a longer row than the options said: grow (rare)
            self.by_key = grown(self.by_key.T, L, 0.0).T.contiguous()
            self.seen = grown(self.seen.T, L, 0).T.contiguous()
        self.by_key[:, :L] += total.to(self.by_key.device)
        self.seen[:, :L] += seen.to(self.seen.device)
        ids = ids[:L].to(self.token_total.device).long()
        rows = self.index.slots(ids)                                                    # (L,)
        top = int(rows.max()) + 1
        if top > len(self.token_total):       # a vocabulary-wide table without its size: grow
            self.token_total, self.token_cells = grown(self.token_total, top, 0.0), grown(self.token_cells, top, 0)
        self.token_total.index_add_(0, rows, total.sum(0).to(self.token_total.device))
        self.token_cells.index_add_(0, rows, seen.sum(0).to(self.token_cells.device))
        score = total / seen.clamp_min(1)                                               # (H, L)
        score = score.where(seen >= SINK_MIN_QUERIES, torch.nan)
        for h in range(score.shape[0]):
            if L < 2 or not bool(torch.isfinite(score[h, 1:]).any()):
                continue
            s = int(torch.nan_to_num(score[h, 1:], nan=-1.0).argmax()) + 1
            self.sinks[h] = _best(self.sinks[h] + [(float(score[h, s]), sequence, s, int(ids[s]))])

    def merge_gathered(self, name: str, values: list) -> None:
        self.sinks = [_best([c for sinks in values for c in sinks[h]]) for h in range(self.heads)]

    # -- what a finished pass reads ------------------------------------------------------------
    def by_position(self) -> list[dict]:
        """Rows per head and key bucket [0, 1), [1, 2), [2, 4), ...: key_lo, key_hi, queries
        (reads summed over the bucket's keys) and score (received / queries)."""
        S = self.by_key.shape[1]
        edges = [0, 1]
        while edges[-1] < S:
            edges.append(edges[-1] * 2)
        rows = []
        for h in range(self.heads):
            for lo, hi in zip(edges, edges[1:]):
                n = int(self.seen[h, lo:hi].sum())
                if n:
                    rows.append(dict(head=h, key_lo=lo, key_hi=float(hi), queries=n,
                                     score=float(self.by_key[h, lo:hi].sum()) / n))
        return rows

    def by_token(self, k: int = 20) -> list[dict]:
        """The k tokens whose keys carry the largest mean share per (query, head) cell that reads
        them, among tokens read by at least TOKEN_MIN_CELLS cells: token_id, cells, score."""
        cells = self.token_cells
        seen = (cells >= TOKEN_MIN_CELLS).nonzero()[:, 0]
        score = self.token_total[seen] / cells[seen].double()
        order = torch.argsort(score, descending=True, stable=True)[:k]
        return [dict(token_id=self.index.id(seen[i]), cells=int(cells[seen[i]]), score=float(score[i]))
                for i in order]


def _best(cands: list) -> list:
    """The TOP largest scores; ties: the earlier sequence, then the earlier position."""
    return heapq.nlargest(TOP, cands, key=lambda c: (c[0], -c[1], -c[2]))
