"""The per-key reducer of one Gated DeltaNet layer: the key-0 share of each query's output, by
query position, the state shares, and the reconstruction check (how closely the per-key terms
add up to the layer's own output), fed one sequence at a time from decompose.py's blocks."""
from __future__ import annotations

import math

import torch

from ..reducers import F64, I64, Reducer, grown
from . import CHECK_SITES
from .decompose import KeyTerms, gated, state_share, written_values

BUCKETS = 24                 # query positions [2^j, 2^(j+1)), j < BUCKETS (t >= 1)
RECENT = 64                  # phi_recent: the state share of the last RECENT keys
# Batch.derived key, per GDN event: batch row -> (H, L) float64, each query's key-0 share, NaN
# where the query does not count (a padded position, or no term at all). Left there for the
# per-token series (probe/metrics/token_series/), which read the same shares, not a second split.
KEY0_SHARES = "gdn_key0_shares"
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10, torch.bfloat16: 3e-2, torch.float16: 5e-3}


class KeyStats(Reducer):
    """Sums per value head (float64) and counts (int64); the check's maxima per site."""

    summed = ("share_rest", "share_all", "proj_rest", "n_rest", "n_all", "bucket_sum", "bucket_n",
              "phi_first", "phi_max_rest", "phi_recent", "sequences", "nonfinite", "seq_share", "seq_n")
    maximum = ("error",)

    def __init__(self, heads: int, sequences: int | None = None, device="cpu"):
        """sequences: the dataset's row count when known (a fixed shape, as torchrun and --resume
        need); otherwise the per-sequence sums grow with the largest sequence index seen."""
        z = dict(device=device)
        # Per sequence (dataset row) and value head, the key-0 shares of the queries t >= 1 and
        # their count: what the bootstrap resamples for the key-0 share's interval.
        self.seq_share = torch.zeros(sequences or 0, heads, dtype=F64, **z)     # (S, H)
        self.seq_n = torch.zeros(sequences or 0, heads, dtype=I64, **z)         # (S, H)
        self.share_rest, self.share_all, self.proj_rest = (torch.zeros(heads, dtype=F64, **z) for _ in range(3))
        self.n_rest, self.n_all = (torch.zeros(heads, dtype=I64, **z) for _ in range(2))
        self.bucket_sum = torch.zeros(heads, BUCKETS, dtype=F64, **z)
        self.bucket_n = torch.zeros(heads, BUCKETS, dtype=I64, **z)
        self.phi_first, self.phi_max_rest, self.phi_recent = (torch.zeros(heads, dtype=F64, **z) for _ in range(3))
        self.sequences = torch.zeros((), dtype=I64, **z)
        self.nonfinite = torch.zeros((), dtype=I64, **z)
        self.error = torch.zeros(len(CHECK_SITES), dtype=F64, **z)

    def update(self, call, row: int, valid: torch.Tensor, sequence: int = 0, received=None, ids=None,
               shares: dict | None = None) -> None:
        """One sequence (batch row) of a GDN layer's call (capture/gdn.py GDNCall); valid (T,)
        bool: the queries that count; sequence: the row's index in the dataset. The recurrence
        runs over positions up to the last valid one. received: a received.ReceivedStats that
        the same walk over the terms feeds, with ids (T,) the row's token ids; shares: where to
        leave the row's per-query key-0 shares (KEY0_SHARES), or None."""
        idx = valid.nonzero()
        if not len(idx):
            return
        L = int(idx[-1]) + 1
        head = lambda x: x[row, :L].transpose(0, 1).to(F64)                  # (H, L, ...)
        q, k, v, beta, g = (head(x) for x in (call.q, call.k, call.v, call.beta, call.g))
        if not all(bool(torch.isfinite(x).all()) for x in (q, k, v, beta, g, call.o[row, :L])):
            self.nonfinite += 1                          # a NaN in the model: the sequence is left out
            return
        u, S = written_values(k, v, beta, g)
        phi = state_share(k, u, g, S)                                          # (H, L)
        self.sequences += 1
        self.phi_first += phi[:, 0]
        self.phi_max_rest += phi[:, 1:].amax(1) if L > 1 else 0.0
        self.phi_recent += phi[:, -RECENT:].sum(1)
        self.error[3] = max(self.error[3], float((phi.sum(1) - 1).abs().max()))
        o = head(call.o)                                                       # (H, L, dv)
        z = call.z[row, :L].transpose(0, 1)
        terms = KeyTerms(q, k, u, g)
        # Per site the squared norms of (terms' sum - the model's own) and of the model's own:
        # the kernel output and the gate's output per value head, out_proj's over the sequence.
        diff2 = torch.zeros(3, o.shape[0], dtype=F64, device=o.device)
        ref2 = torch.zeros(3, o.shape[0], dtype=F64, device=o.device)
        W = call.out_weight.to(F64)
        bias = None if call.out_bias is None else call.out_bias.to(F64)
        local = None if received is None else received.start(o.shape[0], L, o.device)
        kept = []
        for t0, t1, P, recon in terms.blocks():
            mag = terms.magnitudes(P)                                          # (H, Bq, t1)
            total = mag.sum(-1)                                                # (H, Bq)
            share = mag[..., 0] / total.where(total > 0, 1.0)
            r2 = (recon * recon).sum(-1)
            proj = P[..., 0] * (recon @ u[:, 0, :, None])[..., 0] / r2.where(r2 > 0, 1.0)
            counted = valid[t0:t1].to(P.device)[None, :] & (total > 0)          # (H, Bq)
            self._add_queries(torch.arange(t0, t1, device=P.device), share, proj, counted, sequence)
            if local is not None:
                received.add(local, t0, mag, counted)
            if shares is not None:
                kept.append(share.masked_fill(~counted, math.nan))
            ref_o = o[:, t0:t1]
            y_rec = gated(recon, ref_o, z[:, t0:t1], call.norm_weight, call.eps)   # (H, Bq, dv)
            ref_y = call.y[row, t0:t1].transpose(0, 1).to(F64)
            out_rec = y_rec.transpose(0, 1).reshape(t1 - t0, -1) @ W.T
            out_rec = out_rec if bias is None else out_rec + bias
            ref_out = call.out[row, t0:t1].to(F64)
            for i, (a, b) in enumerate(((recon, ref_o), (y_rec, ref_y))):
                diff2[i] += (a - b).pow(2).sum((1, 2))
                ref2[i] += b.pow(2).sum((1, 2))
            diff2[2] += (out_rec - ref_out).pow(2).sum()
            ref2[2] += ref_out.pow(2).sum()
        if shares is not None:
            shares[row] = torch.cat(kept, 1)                                   # (H, L)
        rel = (diff2 / ref2.where(ref2 > 0, 1.0)).sqrt()                        # (3, H)
        rel[2, 1:] = 0.0                                                       # out_proj: one value
        self.error[:3] = torch.maximum(self.error[:3], rel.amax(1).to(self.error.device))
        if local is not None:
            received.finish(local, ids, sequence)

    def _add_queries(self, pos, share, proj, counted, sequence: int) -> None:
        w = counted.to(F64)
        rest = w * (pos[None, :] >= 1)
        self.share_all += (share * w).sum(1)
        self.n_all += counted.sum(1)
        share_rest, n_rest = (share * rest).sum(1), rest.sum(1).round().to(I64)        # (H,)
        self.share_rest += share_rest
        self.proj_rest += (proj * rest).sum(1)
        self.n_rest += n_rest
        if sequence >= self.seq_share.shape[0]:
            self.seq_share, self.seq_n = grown(self.seq_share, sequence + 1, 0), grown(self.seq_n, sequence + 1, 0)
        self.seq_share[sequence] += share_rest.to(self.seq_share.device)
        self.seq_n[sequence] += n_rest.to(self.seq_n.device)
        bucket = torch.log2(pos.clamp_min(1).double()).floor().long().clamp(max=BUCKETS - 1)   # (Bq,)
        onehot = torch.nn.functional.one_hot(bucket, BUCKETS).to(F64)                        # (Bq, NB)
        self.bucket_sum += (share * rest) @ onehot
        self.bucket_n += (rest @ onehot).round().to(I64)

    def values(self) -> dict[str, torch.Tensor]:
        """metric -> (H,) float64 (gdn_keys.csv)."""
        nr, na, ns = self.n_rest.double(), self.n_all.double(), float(self.sequences)
        div = lambda a, n: a / n.where(n > 0, torch.nan) if torch.is_tensor(n) else (a / n if n else a * math.nan)
        return {"key0_share": div(self.share_rest, nr), "key0_share_all": div(self.share_all, na),
                "key0_projection": div(self.proj_rest, nr), "n_queries": nr,
                "phi_first": div(self.phi_first, ns), "phi_max_rest": div(self.phi_max_rest, ns),
                "phi_recent": div(self.phi_recent, ns), "sequences": torch.full_like(nr, ns)}


def tolerance(dtype) -> float:
    return TOLERANCE.get(dtype, 1e-5)
