"""The bootstrap over sequences: resampling weights, percentile intervals, and the Student t
quantile of intervals over seeds. numpy only (reports/ uses it without torch).

A resample draws S sequences with replacement out of S; it is held as the count of each
sequence, a row of W (R, S), so that any statistic that is a ratio of per-sequence sums is
(W @ sums) / (W @ counts): one matrix product for every resample at once. Two models measured on
the same token ids take the same W (a paired bootstrap: their difference keeps the sequences'
shared difficulty out of its interval).
"""
from __future__ import annotations

import math
import warnings

import numpy as np

SEED = 0                # the fixed seed of every resampling: the same runs give the same intervals
LEVEL = 0.95
MIN_SEQUENCES = 2       # fewer: no interval (one sequence resampled is always itself)
# The --resamples bounds (why: probe/core/options.py, where the option checks them).
from ..core.options import MAX_RESAMPLES, MIN_RESAMPLES  # noqa: E402,F401
# The resampling weights W are (resamples, sequences) float64: at most this many bytes.
MAX_WEIGHT_BYTES = 2 << 30


def check_size(sequences: int, resamples: int) -> None:
    """Refuse, in one line, resampling weights that would not fit in MAX_WEIGHT_BYTES (before
    any are drawn; probe.analyze asks before its pass)."""
    from ..core.errors import ProbeError, flag

    need = 8 * int(sequences) * int(resamples)
    if resamples > MAX_RESAMPLES or need > MAX_WEIGHT_BYTES:
        fits = max(0, min(MAX_RESAMPLES, MAX_WEIGHT_BYTES // (8 * max(1, int(sequences)))))
        raise ProbeError(f"{resamples:,} bootstrap resamples of {sequences:,} sequences would need "
                         f"{need / 2 ** 30:,.1f} GiB for the resampling weights; lower {flag('resamples')} to "
                         f"{fits} or fewer (0: no intervals)")


def resample_weights(sequences: int, resamples: int, seed: int = SEED, clusters=None) -> np.ndarray:
    """(resamples, sequences) float64: how often each sequence is drawn in each resample.

    clusters: (sequences,) labels (the document of each sequence) or None. With labels, a
    resample draws as many clusters as there are, with replacement, and each sequence counts as
    often as its cluster is drawn (a cluster bootstrap: windows of one document are not
    independent draws, and resampling them apart makes intervals too narrow)."""
    check_size(sequences, resamples)
    rng = np.random.default_rng(seed)
    if clusters is None:
        return rng.multinomial(sequences, np.full(sequences, 1.0 / sequences), size=resamples).astype(np.float64)
    _, cluster = np.unique(np.asarray(clusters), return_inverse=True)                 # (S,) 0 .. D-1
    D = int(cluster.max()) + 1
    drawn = rng.multinomial(D, np.full(D, 1.0 / D), size=resamples).astype(np.float64)  # (R, D)
    return drawn[:, cluster.reshape(-1)]


def percentile_interval(samples: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) over axis 0 of `samples` (resamples, ...): the percentile interval. Resamples
    where the statistic is undefined (NaN: e.g. no query of a layer drawn) are left out; where
    more than half of them are, the interval is NaN."""
    samples = np.asarray(samples, dtype=np.float64)
    alpha = (1.0 - level) / 2.0
    finite = np.isfinite(samples)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)        # all-NaN slices: NaN, as wanted
        lo = np.nanquantile(samples, alpha, axis=0)
        hi = np.nanquantile(samples, 1.0 - alpha, axis=0)
    enough = finite.mean(axis=0) >= 0.5
    return np.where(enough, lo, np.nan), np.where(enough, hi, np.nan)


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p > 0.5) of Student's t with df degrees of freedom: the t CDF integrated
    with Simpson's rule and inverted by bisection (1e-9 accurate; numpy has no t distribution)."""
    if df < 1:
        return math.nan
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        t = np.linspace(0.0, x, 4001)
        f = np.exp(log_c - (df + 1) / 2 * np.log1p(t * t / df))
        h = x / 4000
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def seed_interval(values, level: float = LEVEL) -> tuple[float, float, float, float]:
    """(mean, lo, hi, sd) over seeds: the Student t interval of the mean of per-seed values
    (each seed's point estimate). NaN interval with fewer than two finite seeds."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    if len(v) == 0:
        return math.nan, math.nan, math.nan, math.nan
    mean = float(v.mean())
    if len(v) < 2:
        return mean, math.nan, math.nan, math.nan
    sd = float(v.std(ddof=1))
    half = t_quantile(1 - (1 - level) / 2, len(v) - 1) * sd / math.sqrt(len(v))
    return mean, mean - half, mean + half, sd
