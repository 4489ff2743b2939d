"""Held-out loss: next-token negative log-likelihood over the analysed tokens (summary.json
loss and perplexity). Reads hook_logits, (B, T, V)."""
from __future__ import annotations

import math

import torch

from ..reducers import F64, I64, Reducer
from . import DECLARATION
from ..base import Metric


PER_TOKEN = "token_loss"     # Batch.derived: batch row -> (T - 1,) loss per target (metrics/token_series/)


def next_token_nll(logits, input_ids: torch.Tensor, block: int | None = None, batch_rows: list[int] | None = None
                   ) -> torch.Tensor:
    """(B, T - 1) float32: -log p(token t + 1 | tokens <= t) for every pair, from logits (B, T, V)
    or probe.capture.logits.LazyLogits, a block of rows at a time (float32 temporaries of about
    `block` elements, LossStats.BLOCK by default): never a (T, V) copy, nor all the logits of a
    lazy head at once. Each row's log-sum-exp is its own reduction, so the numbers are those of
    one logsumexp over the whole tensor. Lazy logits that tile their head (LazyLogits.tiled)
    compute it themselves, without a (rows, V) block. batch_rows: the batch rows to read
    (default all; the result has one row per entry)."""
    if getattr(logits, "tiled", False):        # a head applied a tile at a time (capture/logits.py)
        return logits.next_token_nll(input_ids, batch_rows)
    B, T, V = logits.shape
    target = input_ids[:, 1:].to(logits.device)
    rows = max(1, (block or LossStats.BLOCK) // max(V, 1))
    # A lazy head's logits are made `logits.rows` rows at a time (each making reads the head's
    # weights once), then read `rows` at a time like a tensor's.
    made = max(rows, getattr(logits, "rows", rows))
    batch_rows = range(B) if batch_rows is None else batch_rows
    out = torch.empty(len(batch_rows), max(T - 1, 0), dtype=torch.float32, device=logits.device)
    for i, b in enumerate(batch_rows):
        for first in range(0, T - 1, made):
            last = min(first + made, T - 1)
            part = logits[b, first:last]                                      # (made, V)
            for start in range(first, last, rows):
                end = min(start + rows, last)
                x = part[start - first:end - first].float()                   # (rows, V)
                out[i, start:end] = torch.logsumexp(x, dim=-1) - x.gather(-1, target[b, start:end, None])[:, 0]
    return out


class LossStats(Reducer):
    """Next-token negative log-likelihood over valid (input, target) pairs, in all and by the
    target's position in powers of two ([1, 2), [2, 4), ...: how the loss holds up along a long
    context, as first_token_buckets.csv does for F-Attn)."""

    # Logits per step: 1 MB of float32 temporaries, no (T, V) copy. Small enough that the
    # log-sum-exp's passes (max, subtract, exp, sum) run in the L2 cache: at T = 2048 on SmolLM2
    # 97 ms where 4 MB blocks took 123 ms (docs/benchmarks.md).
    BLOCK = 1 << 18
    BUCKETS = tuple(2 ** k for k in range(21))
    # seq_nll / seq_count: per dataset row (per_sequence.csv nll, nll_n), (S,).
    summed = ("nll", "count", "nonfinite", "seq_nll", "seq_count", "bucket_nll", "bucket_n")

    def __init__(self, device="cpu", sequences: int | None = None):
        """sequences: the dataset's row count, when known (else the per-row sums grow)."""
        self.nll = torch.zeros((), dtype=F64, device=device)
        self.count = torch.zeros((), dtype=I64, device=device)
        self.nonfinite = torch.zeros((), dtype=I64, device=device)
        self.seq_nll = torch.zeros(sequences or 0, dtype=F64, device=device)
        self.seq_count = torch.zeros(sequences or 0, dtype=I64, device=device)
        self.bucket_nll = torch.zeros(len(self.BUCKETS), dtype=F64, device=device)
        self.bucket_n = torch.zeros(len(self.BUCKETS), dtype=I64, device=device)

    def update(self, logits: torch.Tensor, input_ids: torch.Tensor, valid: torch.Tensor,
               seq_index: torch.Tensor | None = None, per_token: dict | None = None) -> None:
        """logits (B, T, V); the pair (t, t+1) counts when position t + 1 is valid; seq_index (B,)
        the dataset rows of the batch (default 0 .. B-1); per_token: a dict that receives, per
        batch row b, the (T - 1,) float32 loss of each target t + 1 (the per-token series read
        it: the logits are read once).

        A pair whose loss is not finite (NaN logits) is left out and counted in `nonfinite`.
        """
        seqs = (torch.arange(logits.shape[0]) if seq_index is None else seq_index).tolist()
        need = max(seqs, default=-1) + 1             # an empty batch (B = 0) adds no rows
        if need > len(self.seq_nll):
            self.seq_nll = torch.cat([self.seq_nll, self.seq_nll.new_zeros(need - len(self.seq_nll))])
            self.seq_count = torch.cat([self.seq_count, self.seq_count.new_zeros(need - len(self.seq_count))])
        # A target counts when it is valid: padding sits on the right, so its input is real too,
        # and a sliding window's context (valid False) still predicts the first counted token.
        pair = valid[:, 1:].to(logits.device)                                # (B, T - 1)
        nll = next_token_nll(logits, input_ids, self.BLOCK)                   # (B, T - 1) float32
        keep = pair & torch.isfinite(nll)
        # The target of row t sits at position t + 1: its position bucket, the same in every row.
        where = torch.arange(1, nll.shape[1] + 1, device=self.bucket_n.device)
        bucket = torch.bucketize(where, torch.tensor(self.BUCKETS, device=where.device), right=True) - 1
        for b in range(nll.shape[0]):
            kept_nll = nll[b][keep[b]].double()
            total, kept = kept_nll.sum().to(self.nll.device), keep[b].sum().to(self.count.device)
            self.nll += total
            self.count += kept
            self.seq_nll[seqs[b]] += total
            self.seq_count[seqs[b]] += kept
            in_bucket = bucket[keep[b].to(self.bucket_n.device)]
            self.bucket_nll.index_add_(0, in_bucket, kept_nll.to(self.bucket_nll.device))
            self.bucket_n.index_add_(0, in_bucket, torch.ones_like(in_bucket))
            self.nonfinite += (pair[b] & ~keep[b]).sum().to(self.nonfinite.device)
            if per_token is not None:
                per_token[b] = nll[b]

    def merge(self, other: "LossStats") -> "LossStats":
        """The per-row sums of two passes may cover different row counts (they grow with the
        largest row seen): pad the shorter with zeros before summing."""
        rows = max(len(self.seq_nll), len(other.seq_nll))
        for stats in (self, other):
            extra = rows - len(stats.seq_nll)
            if extra:
                stats.seq_nll = torch.cat([stats.seq_nll, stats.seq_nll.new_zeros(extra)])
                stats.seq_count = torch.cat([stats.seq_count, stats.seq_count.new_zeros(extra)])
        return super().merge(other)

    def loss(self) -> float:
        return float(self.nll / self.count) if self.count > 0 else math.nan

    def by_position(self) -> list[dict]:
        """One entry per target-position bucket that holds pairs: bucket_lo, bucket_hi, loss, pairs."""
        edges = (*self.BUCKETS, math.inf)
        return [{"bucket_lo": edges[b], "bucket_hi": edges[b + 1], "loss": float(self.bucket_nll[b]) / n, "pairs": n}
                for b in range(len(self.BUCKETS)) if (n := int(self.bucket_n[b])) > 0]


class Loss(Metric):
    declaration = DECLARATION

    def setup(self) -> None:
        options = self.options
        sequences = self.context.sequences
        self.stats = LossStats(sequences=sequences)
        # summary.json loss_by_position, only when asked
        self.by_position = options.loss_by_position

    def update(self, layer, logits, b) -> None:
        self.stats.follow(logits.device).update(logits, b.input_ids, b.valid, b.seq_index,
                                                per_token=b.derived(PER_TOKEN, logits, dict))

    def reducers(self) -> list:
        return [self.stats]

    def summarise(self, a, layers, done) -> dict:
        loss = self.stats.loss()
        return {"loss": loss,
                "perplexity": math.exp(loss) if loss is not None and math.isfinite(loss) and loss < 700 else None,
                **({"loss_by_position": self.stats.by_position()} if self.by_position else {})}

    def nonfinite(self) -> dict[str, int]:
        return {"loss_pairs": int(self.stats.nonfinite)} if int(self.stats.nonfinite) else {}
