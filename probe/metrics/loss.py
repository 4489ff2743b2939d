"""Held-out loss: next-token negative log-likelihood over the analysed tokens (summary.json
loss and perplexity). Reads hook_logits, (B, T, V)."""
from __future__ import annotations

import math

import torch

from ..events import LOGITS
from ..reducers import F64, I64, Reducer
from .base import Metric


class LossStats(Reducer):
    """Next-token negative log-likelihood over valid (input, target) pairs, in all and by the
    target's position in powers of two ([1, 2), [2, 4), ...: how the loss holds up along a long
    context, as first_token_buckets.csv does for F-Attn)."""

    BLOCK = 1 << 20             # logits per step (4 MB of float32 temporaries): no (T, V) copy is made
    BUCKETS = tuple(2 ** k for k in range(21))
    summed = ("nll", "count", "nonfinite", "bucket_nll", "bucket_n")

    def __init__(self, device="cpu"):
        self.nll = torch.zeros((), dtype=F64, device=device)
        self.count = torch.zeros((), dtype=I64, device=device)
        self.nonfinite = torch.zeros((), dtype=I64, device=device)
        self.bucket_nll = torch.zeros(len(self.BUCKETS), dtype=F64, device=device)
        self.bucket_n = torch.zeros(len(self.BUCKETS), dtype=I64, device=device)

    def update(self, logits: torch.Tensor, input_ids: torch.Tensor, valid: torch.Tensor) -> None:
        """logits (B, T, V); the pair (t, t+1) counts when position t + 1 is valid.

        A pair whose loss is not finite (NaN logits) is left out and counted in `nonfinite`.
        """
        # A target counts when it is valid: padding sits on the right, so its input is real too,
        # and a sliding window's context (valid False) still predicts the first counted token.
        pair = valid[:, 1:].to(logits.device)
        target = input_ids[:, 1:].to(logits.device)
        V = logits.shape[-1]
        rows = max(1, self.BLOCK // V)                 # float32 temporaries of BLOCK elements
        for b in range(logits.shape[0]):
            for start in range(0, logits.shape[1] - 1, rows):
                end = min(start + rows, logits.shape[1] - 1)
                x = logits[b, start:end].float()
                nll = torch.logsumexp(x, dim=-1) - x.gather(-1, target[b, start:end, None])[:, 0]
                keep = pair[b, start:end] & torch.isfinite(nll)
                self.nll += nll[keep].double().sum().to(self.nll.device)
                self.count += keep.sum().to(self.count.device)
                # The target of row t sits at position t + 1.
                where = torch.arange(start + 1, end + 1, device=self.bucket_n.device)
                bucket = torch.bucketize(where, torch.tensor(self.BUCKETS, device=where.device), right=True) - 1
                kept = keep.to(self.bucket_n.device)
                self.bucket_nll.index_add_(0, bucket[kept], nll[keep].double().to(self.bucket_nll.device))
                self.bucket_n.index_add_(0, bucket[kept], torch.ones_like(bucket[kept]))
                self.nonfinite += (pair[b, start:end] & ~keep).sum().to(self.nonfinite.device)

    def loss(self) -> float:
        return float(self.nll / self.count) if self.count > 0 else math.nan

    def by_position(self) -> list[dict]:
        """One entry per target-position bucket that holds pairs: bucket_lo, bucket_hi, loss, pairs."""
        edges = (*self.BUCKETS, math.inf)
        return [{"bucket_lo": edges[b], "bucket_hi": edges[b + 1], "loss": float(self.bucket_nll[b]) / n, "pairs": n}
                for b in range(len(self.BUCKETS)) if (n := int(self.bucket_n[b])) > 0]


class Loss(Metric):
    name = "loss"
    SUMMARY_KEYS = ("loss", "perplexity")

    def __init__(self, layout, *, loss_by_position: bool = False, **context):
        super().__init__(layout)
        self.stats = LossStats()
        self.by_position = loss_by_position       # summary.json loss_by_position, only when asked

    def subscribe(self, on) -> None:
        on(LOGITS, self.update)

    def update(self, layer, logits, b) -> None:
        self.stats.follow(logits.device).update(logits, b.input_ids, b.valid)

    def reducers(self) -> list:
        return [self.stats]

    def summarise(self, a, layers, done) -> dict:
        loss = self.stats.loss()
        return {"loss": loss,
                "perplexity": math.exp(loss) if loss is not None and math.isfinite(loss) and loss < 700 else None,
                **({"loss_by_position": self.stats.by_position()} if self.by_position else {})}

    def nonfinite(self) -> dict[str, int]:
        return {"loss_pairs": int(self.stats.nonfinite)} if int(self.stats.nonfinite) else {}
