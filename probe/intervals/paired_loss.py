"""Paired bootstrap intervals of a loss difference by position bucket (the sink ablations,
probe/run/ablations.py). numpy only.

Two passes over the same sequences give per-sequence, per-bucket nll sums A and B (S, K) over the
same tokens n (S, K). Each resample (a row of W, bootstrap.resample_weights) draws sequences
with replacement, the same draw for both passes, and the difference of the pooled losses is
(W @ A - W @ B) / (W @ n): the sequences' shared difficulty stays out of its interval.
"""
from __future__ import annotations

import math

import numpy as np

from .bootstrap import MIN_SEQUENCES, percentile_interval, resample_weights


def bucket_edges(T: int) -> np.ndarray:
    """Target-position buckets [1, 2), [2, 4), [4, 8), ... up to T (as LossStats' buckets)."""
    edges = [1]
    while edges[-1] < T:
        edges.append(edges[-1] * 2)
    return np.asarray(edges, dtype=np.int64)


def paired_deltas(a: np.ndarray, b: np.ndarray, n: np.ndarray, resamples: int, documents=None) -> list[dict]:
    """a, b (S, K) nll sums of the ablated and the reference pass on the same tokens n (S, K).
    One dict per bucket, then one for all buckets pooled: loss, base_loss, delta_loss and the
    paired 95% interval delta_lo / delta_hi (NaN without resamples or with one sequence)."""
    a, b, n = (np.concatenate([x, x.sum(1, keepdims=True)], axis=1).astype(np.float64) for x in (a, b, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        loss, base = a.sum(0) / n.sum(0), b.sum(0) / n.sum(0)
        lo = hi = np.full(a.shape[1], math.nan)
        S = a.shape[0]
        if resamples and S >= MIN_SEQUENCES:
            clusters = documents if documents is not None and len(documents) == S else None
            W = resample_weights(S, resamples, clusters=clusters)                     # (R, S)
            lo, hi = percentile_interval((W @ a - W @ b) / (W @ n))                   # (K + 1,)
    return [dict(loss=float(loss[k]), base_loss=float(base[k]), delta_loss=float(loss[k] - base[k]),
                 delta_lo=float(lo[k]), delta_hi=float(hi[k])) for k in range(a.shape[1])]


def paired_difference(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, n: np.ndarray,
                      resamples: int) -> dict:
    """Two models on the same sequences, each with an ablated (a, c) and an unablated (b, d) nll
    sum per sequence (S,), over the same tokens n (S,): the difference of their loss changes,
    (a - b) / n - (c - d) / n pooled, with a paired 95% interval: each resample draws the
    sequences once for all four sums, so what the two models share (which sequences are hard,
    which happened to be drawn) stays out of the interval of their difference.
    Keys: first, second (each model's delta_loss), difference, lo, hi (NaN without resamples or
    with fewer than MIN_SEQUENCES sequences)."""
    a, b, c, d, n = (np.asarray(x, dtype=np.float64) for x in (a, b, c, d, n))
    first, second = (a.sum() - b.sum()) / n.sum(), (c.sum() - d.sum()) / n.sum()
    lo = hi = math.nan
    if resamples and len(n) >= MIN_SEQUENCES:
        W = resample_weights(len(n), resamples)                                 # (R, S)
        lo, hi = percentile_interval((W @ (a - b) - W @ (c - d)) / (W @ n))
        lo, hi = float(lo), float(hi)
    return dict(first=float(first), second=float(second), difference=float(first - second), lo=lo, hi=hi)
