"""Streaming statistics: `update` with a batch, `merge` with another reducer, `result`.

Memory never grows with the number of sequences. Sums are kept in float64 and counts in
int64 whatever the model dtype, so no statistic loses precision or overflows. Merging is
exact: a reducer over two halves of a dataset, merged, equals one pass over all of it
(up to float64 summation order).
"""
from __future__ import annotations

import math

import torch

F64, I64 = torch.float64, torch.int64


class Reducer:
    """State lives in tensors named by `summed`, `minimum`, `maximum`; merge follows them."""

    summed: tuple[str, ...] = ()
    minimum: tuple[str, ...] = ()
    maximum: tuple[str, ...] = ()
    gathered: tuple[str, ...] = ()      # python state, merged by `merge_gathered` (distributed.py)

    def merge(self, other: "Reducer") -> "Reducer":
        for name in self.summed:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in self.minimum:
            setattr(self, name, torch.minimum(getattr(self, name), getattr(other, name)))
        for name in self.maximum:
            setattr(self, name, torch.maximum(getattr(self, name), getattr(other, name)))
        return self

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {n: getattr(self, n) for n in (*self.summed, *self.minimum, *self.maximum)}

    def merge_gathered(self, name: str, values: list) -> None:
        """Combine the values of a `gathered` attribute from every process (this one included)."""
        raise NotImplementedError(f"{type(self).__name__} does not merge {name!r}")

    def children(self) -> dict[str, "Reducer"]:
        """Reducers held inside this one (their state merges and moves with it)."""
        return {n: v for n, v in vars(self).items() if isinstance(v, Reducer)}

    def to(self, device) -> "Reducer":
        for name, value in self.state_tensors().items():
            setattr(self, name, value.to(device))
        for child in self.children().values():
            child.to(device)
        return self

    @property
    def device(self) -> torch.device:
        for value in self.state_tensors().values():
            return value.device
        return next((c.device for c in self.children().values()), torch.device("cpu"))

    def follow(self, device) -> "Reducer":
        """Keep the state where the activations are (a layer's GPU under --device-map auto)."""
        if self.device != torch.device(device):
            self.to(device)
        return self


def float32_bits(value: float) -> int:
    """The bit pattern of the float32 nearest to value (a non-negative float)."""
    return int(torch.tensor(value, dtype=torch.float32).view(torch.int32))


def float32_value(bits: int) -> float:
    return torch.tensor(bits, dtype=torch.int32).view(torch.float32).item()


def cut_bits(threshold: float, scale: float = 1.0) -> int:
    """The smallest non-negative float32 bit pattern b with value(b) * scale >= threshold, in
    float64 arithmetic, so that for every finite float32 x:  |x| * scale < threshold  <=>
    bits(|x|) < cut_bits(threshold, scale). Bit patterns of non-negative floats are ordered as
    their values, and value * scale rounds monotonically, so the count below a threshold is a
    count of bit patterns below one integer: exact, whatever the data."""
    if not threshold > 0:
        return 0
    b = float32_bits(min(threshold / scale, 3.5e38))
    while b > 0 and float32_value(b - 1) * scale >= threshold:     # at most a step or two
        b -= 1
    while b < 0x7F800000 and float32_value(b) * scale < threshold:
        b += 1
    return b


class LogHistogram(Reducer):
    """Counts of non-negative float32 values by their top 16 bits: a log-scale histogram, plus
    exact counts below the thresholds named when it is built (`cuts`).

    The top 16 bits of a positive float32 are its exponent and 7 mantissa bits, so bin j holds
    [lo_j, lo_(j+1)) with lo_j the float whose bits are j << 16: 128 bins per octave (0.54%
    wide), from 1e-38 to inf, exact edges. Filling it is one bincount over a free view of the
    data, the cheapest exact-binning pass torch offers on CPU. A median read from it is within
    0.54%.

    Shares below a threshold t are exact counts: with c = cut_bits(t, scale), a value is below
    t iff its bit pattern is below c, so the share is the bins below c's bin (exact: bins are
    whole bit ranges) plus the values inside c's bin whose low 16 bits are below c's. Those
    last are counted during `update` (`in_bin`, one number per cut), touching only the few
    values that fall into a cut's bin. bfloat16 values are their own top 16 bits, so a
    histogram fed only bfloat16 (`inexact == 0`) holds every value exactly and answers any
    threshold exactly. Otherwise a threshold that is not a cut is interpolated in log space
    inside its bin; `share_below` says which.
    """

    BINS = 1 << 15
    NONFINITE = 0x7F80          # bins from here on: exponent all ones, inf and NaN
    BLOCK = 1 << 22             # elements per step of the in-bin search: bounds its temporaries
    summed = ("counts", "nonfinite", "in_bin", "inexact")

    def __init__(self, device="cpu", cuts=(), scale: float = 1.0):
        """cuts: thresholds counted exactly; scale: count values v with v * scale < t (the
        mean-gate control's m), 1 for plain |v| < t."""
        self.counts = torch.zeros(self.BINS, dtype=I64, device=device)
        self.nonfinite = torch.zeros((), dtype=I64, device=device)
        self.cuts = tuple(float(t) for t in cuts)
        self.scale = float(scale)
        self.cut_bits = [cut_bits(t, self.scale) for t in self.cuts]
        self.in_bin = torch.zeros(len(self.cuts), dtype=I64, device=device)  # below the cut, in its bin
        self.inexact = torch.zeros((), dtype=I64, device=device)   # values kept with more than 16 bits
        # The cuts that fall strictly inside a bin (a cut on a bin edge needs no search).
        self._inside = [(k, c >> 16, c) for k, c in enumerate(self.cut_bits) if c & 0xFFFF and c < 0x7F800000]
        self._marks = None                                         # (BINS,) bool: bins to search

    def update(self, values: torch.Tensor) -> None:
        """Counts |values| (any shape; the sign bit is ignored, so no abs copy is made).

        NaN and inf are left out, counted in `nonfinite`. bfloat16 values are their own top 16
        bits; float32 ones are read through an int16 view; other dtypes are converted first.
        """
        if values.numel() == 0:
            return
        if values.dtype not in (torch.float32, torch.bfloat16):
            values = values.float()
        if values.dim() == 0 or values.stride(-1) != 1:
            values = values.contiguous()
        words = values.view(torch.int16)
        # Little-endian: the odd int16 words of a float32 are its high halves (sign, exponent,
        # 7 mantissa bits). Masking the sign bit gives the bin of |value|, as a fresh int16 tensor.
        half = values.dtype == torch.bfloat16
        high = (words if half else words[..., 1::2]) & 0x7FFF
        counts = torch.bincount(high.reshape(-1), minlength=self.BINS)
        self.nonfinite += counts[self.NONFINITE:].sum().to(self.nonfinite.device)
        counts[self.NONFINITE:] = 0
        self.counts += counts.to(self.counts.device)
        if half:    # a bfloat16 value is its bin's lower edge, below every cut inside the bin
            for k, j, _ in self._inside:
                self.in_bin[k] += counts[j].to(self.in_bin.device)
            return
        self.inexact += values.numel()
        if self._inside:
            self._count_in_bins(values.reshape(-1).view(torch.int32), high.reshape(-1), counts)

    def _count_in_bins(self, bits: torch.Tensor, high: torch.Tensor, counts: torch.Tensor) -> None:
        """bits, high: (N,) int32 float bits and int16 bins. Adds, per cut inside a bin, the
        values of that bin whose bits (sign masked) are below the cut."""
        present = counts[[j for _, j, _ in self._inside]].tolist()           # one sync, not one per cut
        todo = [cut for cut, n in zip(self._inside, present) if n]
        if not todo:
            return
        if self._marks is None or self._marks.device != high.device:
            self._marks = torch.zeros(self.BINS, dtype=torch.bool, device=high.device)
            self._marks[[j for _, j, _ in self._inside]] = True
        for start in range(0, high.numel(), self.BLOCK):
            h = high[start:start + self.BLOCK]
            hit = self._marks.index_select(0, h.int())                  # (n,) in some cut's bin
            sub_high = h[hit]                                           # a few % of the values
            sub_bits = bits[start:start + self.BLOCK][hit] & 0x7FFFFFFF
            for k, j, c in todo:
                self.in_bin[k] += ((sub_high == j) & (sub_bits < c)).sum().to(self.in_bin.device)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    @staticmethod
    def lower_edge(j: int) -> float:
        return float32_value(j << 16)

    @staticmethod
    def bin_of(value: float) -> int:
        return float32_bits(value) >> 16

    def _within_bin(self, j: int, value: float) -> float:
        """Share of bin j that lies below value, assuming values spread evenly in log space."""
        lo, hi = self.lower_edge(j), self.lower_edge(j + 1)
        if lo <= 0:
            return 1.0 if value > lo else 0.0
        return min(max(math.log(value / lo) / math.log(hi / lo), 0.0), 1.0)

    def share_below(self, threshold: float, scale: float | None = None) -> tuple[float, bool]:
        """(share of values v with v * scale < threshold, whether that share is an exact count).

        scale defaults to the histogram's own; exact when threshold is one of its cuts at that
        scale, or when every value was bfloat16, or when the threshold sits on a bin edge."""
        total = self.total
        if total == 0:
            return math.nan, True
        scale = self.scale if scale is None else float(scale)
        c = cut_bits(threshold, scale)
        j = c >> 16
        below = int(self.counts[:j].sum())
        if not c & 0xFFFF or j >= self.NONFINITE:                 # on a bin edge
            return below / total, True
        if scale == self.scale and threshold in self.cuts:
            return (below + int(self.in_bin[self.cuts.index(threshold)])) / total, True
        if int(self.inexact) == 0:                                 # bfloat16: bin j is one value
            return (below + int(self.counts[j])) / total, True
        return (below + self._within_bin(j, threshold / scale) * float(self.counts[j])) / total, False

    def bin_share(self, threshold: float, scale: float | None = None) -> float:
        """Share of the values inside the bin that holds the cut of threshold at scale (0 on a
        bin edge): how far an interpolated `share_below` can be from the exact count."""
        c = cut_bits(threshold, self.scale if scale is None else float(scale))
        total = self.total
        return float(self.counts[c >> 16]) / total if total and c & 0xFFFF and (c >> 16) < self.NONFINITE else 0.0

    def fraction_below(self, threshold: float) -> float:
        """Share of values < threshold (exact where `share_below` says so)."""
        return self.share_below(threshold, 1.0)[0]

    def quantile(self, q: float) -> float:
        total = self.total
        if total == 0:
            return math.nan
        cum = torch.cumsum(self.counts, 0)
        target = q * total
        j = int(torch.searchsorted(cum.double(), torch.tensor(target, dtype=F64)))
        j = min(j, self.BINS - 1)
        before = float(cum[j - 1]) if j > 0 else 0.0
        share = (target - before) / max(float(self.counts[j]), 1.0)
        lo, hi = self.lower_edge(j), self.lower_edge(j + 1)
        if lo <= 0:
            return hi * share
        return lo * (hi / lo) ** share


class GroupedGateStats(Reducer):
    """Gate-score state kept per (group, head), and the metrics read from it.

    Shared by GateStats (groups: first token / rest) and token_types.TokenGroupGateStats
    (groups: token types), so both report the same metrics computed the same way.
    """

    LOW = (0.01, 0.1, 0.5)
    HIGH = (0.9, 0.99)
    summed = ("count", "nonfinite", "total", "total_sq", "below", "above")
    minimum = ("low",)
    maximum = ("high",)

    def _init_state(self, groups: int, heads: int, device) -> None:
        self.heads = heads
        self.count = torch.zeros(groups, heads, dtype=I64, device=device)
        self.nonfinite = torch.zeros(groups, heads, dtype=I64, device=device)
        self.total = torch.zeros(groups, heads, dtype=F64, device=device)
        self.total_sq = torch.zeros(groups, heads, dtype=F64, device=device)
        self.low = torch.full((groups, heads), math.inf, dtype=F64, device=device)
        self.high = torch.full((groups, heads), -math.inf, dtype=F64, device=device)
        self.below = torch.zeros(groups, heads, len(self.LOW), dtype=I64, device=device)
        self.above = torch.zeros(groups, heads, len(self.HIGH), dtype=I64, device=device)

    def _metrics(self, pool: slice | None = None) -> dict[str, torch.Tensor]:
        """count, mean, std, min, max and the threshold fractions, in float64.

        Per (group, head) when `pool` is None; per head over the groups `pool` selects otherwise.
        Where the count is 0 the values are NaN or meaningless: callers blank them.
        """
        count, total, total_sq = self.count, self.total, self.total_sq
        low, high, below, above = self.low, self.high, self.below, self.above
        if pool is not None:
            count, total, total_sq = count[pool].sum(0), total[pool].sum(0), total_sq[pool].sum(0)
            low, high = low[pool].amin(0), high[pool].amax(0)
            below, above = below[pool].sum(0), above[pool].sum(0)
        n = count.double()
        mean = total / n
        var = (total_sq / n - mean ** 2).clamp_min(0)
        metrics = {"count": n, "mean": mean, "std": var.sqrt(), "min": low, "max": high}
        for i, t in enumerate(self.LOW):
            metrics[f"frac_lt_{t}"] = below[..., i] / n
        for i, t in enumerate(self.HIGH):
            metrics[f"frac_gt_{t}"] = above[..., i] / n
        return metrics


class GateStats(GroupedGateStats):
    """Gate scores of one layer, per head, for the first token and for the rest."""

    BINS = 50
    GROUPS = ("first", "rest")
    BLOCK = 1 << 22             # elements per update step: bounds the temporaries at long T
    summed = (*GroupedGateStats.summed, "hist")

    def __init__(self, heads: int, device="cpu"):
        self._init_state(len(self.GROUPS), heads, device)
        self.hist = torch.zeros(heads, self.BINS, dtype=I64, device=device)

    def update(self, first: torch.Tensor, rest: torch.Tensor) -> None:
        """first: (N1, H, Dg) scores at position 0; rest: (N2, H, Dg) at positions >= 1.

        Non-finite scores (a NaN in the model) are left out and counted in `nonfinite`.
        Long inputs are taken in blocks of rows, so the float32 / int64 temporaries stay a few
        MB even for elementwise gates at 32K tokens.
        """
        rows = max(1, self.BLOCK // max(1, first.shape[1] * first.shape[2]))
        for group, g in enumerate((first, rest)):
            for start in range(0, g.shape[0], rows):
                self._update(group, g[start:start + rows])

    def _update(self, group: int, g: torch.Tensor) -> None:
        g = g.float()
        finite = None
        if g.numel() and not bool(torch.isfinite(g.amax() + g.amin())):   # NaN and inf reach them
            finite = torch.isfinite(g)
            self.nonfinite[group] += (~finite).sum((0, 2))
            self.count[group] += finite.sum((0, 2))
            g = g.masked_fill(~finite, 0.0)
        else:
            self.count[group] += g.shape[0] * g.shape[2]
        # Squares in float64: float32 ones round at 6e-8 relative, which the variance
        # E[g^2] - mean^2 turns into a std error of ~2e-4 for saturated gates (true std 0).
        g64 = g.double()
        self.total[group] += g64.sum((0, 2))
        self.total_sq[group] += (g64 * g64).sum((0, 2))
        if finite is not None:
            g = g.masked_fill(~finite, math.nan)                      # left out from here on
        lo = g.amin((0, 2)) if finite is None else g.masked_fill(~finite, math.inf).amin((0, 2))
        hi = g.amax((0, 2)) if finite is None else g.masked_fill(~finite, -math.inf).amax((0, 2))
        self.low[group] = torch.minimum(self.low[group], lo.double())
        self.high[group] = torch.maximum(self.high[group], hi.double())
        for i, t in enumerate(self.LOW):
            self.below[group, :, i] += (g < t).sum((0, 2))           # NaN compares False
        for i, t in enumerate(self.HIGH):
            self.above[group, :, i] += (g > t).sum((0, 2))
        bins = (g.nan_to_num(0.0) * self.BINS).clamp_(0, self.BINS - 1).long()   # (N, H, Dg)
        flat = bins + torch.arange(self.heads, device=g.device)[None, :, None] * self.BINS
        flat = flat.reshape(-1) if finite is None else flat[finite]
        self.hist += torch.bincount(flat, minlength=self.heads * self.BINS
                                    ).view(self.heads, self.BINS).to(self.hist.device)

    def mean(self) -> float:
        n = int(self.count.sum())
        return float(self.total.sum()) / n if n else math.nan

    def rows(self) -> list[dict]:
        """Tidy rows: (head, group, metric, value) for groups all / first / rest."""
        out = []
        groups = {"all": slice(None), "first": slice(0, 1), "rest": slice(1, 2)}
        for name, sel in groups.items():
            metrics = self._metrics(sel)                                      # (H,) each
            n = metrics["count"]
            for metric, values in metrics.items():
                for head, value in enumerate(values.tolist()):
                    if n[head] == 0 and metric != "count":
                        value = math.nan
                    out.append({"head": head, "group": name, "metric": metric, "value": value})
        return out


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
              "bucket_uniform", "nonfinite")

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

    def update(self, p0: torch.Tensor, valid: torch.Tensor | None, uniform: torch.Tensor | None = None,
               finite: torch.Tensor | None = None) -> None:
        """p0: (B, H, T) probability on key 0 per query; valid: (B, T) bool or None (all);
        uniform: (B|1, T) what uniform attention over each query's visible keys puts on key 0,
        None for plain causal attention (1 / (t + 1)); a sliding window gives 0 past the window;
        finite: (B, T) bool or None (all), queries whose attention output row is finite.

        A query whose probability is not finite in some head (a NaN in the model), or whose
        output row is not (`finite`: the CPU kernel can return NaN rows next to a finite lse
        once an activation is inf), is left out in every head and counted in `nonfinite`.
        """
        B, H, T = p0.shape
        pos = torch.arange(T, device=p0.device)
        w = torch.ones(B, T, dtype=F64, device=p0.device) if valid is None else valid.double()
        if finite is not None or (p0.numel() and not bool(torch.isfinite(p0.amax()))):
            finite = torch.isfinite(p0).all(1) & (True if finite is None else finite.to(p0.device))  # (B, T)
            self.nonfinite += ((~finite) & (w > 0)).sum()
            w = w * finite
            p0 = p0.masked_fill(~finite[:, None, :], 0.0)
        weighted = p0.double() * w[:, None, :]                          # (B, H, T)
        self.sum_all += weighted.sum((0, 2))
        self.n_all += w.sum().long()
        rest = weighted[:, :, 1:]
        self.sum_rest += rest.sum((0, 2))
        self.n_rest += w[:, 1:].sum().long()
        if uniform is None:
            uniform = w[:, 1:].sum(0) / (pos[1:] + 1).double()            # (T-1,)
        else:
            uniform = (w[:, 1:] * uniform[:, 1:].double()).sum(0)         # (T-1,)
        self.uniform += uniform.sum()
        bucket = torch.bucketize(pos[1:], torch.tensor(self.BUCKETS, device=p0.device), right=True) - 1
        self.bucket_sum.index_add_(0, bucket, rest.sum(0).transpose(0, 1))    # (T-1, H) by bucket
        self.bucket_n.index_add_(0, bucket, w[:, 1:].sum(0).long())
        self.bucket_uniform.index_add_(0, bucket, uniform)

    def f_attn(self) -> torch.Tensor:
        return self.sum_rest / self.n_rest.clamp_min(1) if self.n_rest > 0 else self.sum_rest * math.nan

    def f_attn_paper(self) -> torch.Tensor:
        return self.sum_all / self.n_all.clamp_min(1) if self.n_all > 0 else self.sum_all * math.nan

    def uniform_reference(self) -> float:
        return float(self.uniform / self.n_rest) if self.n_rest > 0 else math.nan

    def bucket_rows(self) -> list[dict]:
        """F-Attn by query position: one row per non-empty bucket [bucket_lo, bucket_hi) and
        head, with the queries it pools and what uniform attention would give on them."""
        out = []
        edges = (*self.BUCKETS, math.inf)
        for b in range(len(self.BUCKETS)):
            n = int(self.bucket_n[b])
            if n == 0:
                continue
            uniform = float(self.bucket_uniform[b]) / n
            for head, s in enumerate(self.bucket_sum[b].tolist()):
                out.append({"head": head, "bucket_lo": edges[b], "bucket_hi": edges[b + 1],
                            "value": s / n, "n_queries": n, "uniform": uniform})
        return out


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

    def update(self, h: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor, tok: torch.Tensor) -> None:
        """h: (N, C) valid rows; seq, pos, tok: (N,) where each row sits."""
        if h.shape[0] == 0:
            return
        # Row maxima of |h| from the row max and min: no (N, C) float32 |h| copy is made unless
        # the activations hold NaN or inf (which reach these maxima).
        row_max = torch.maximum(h.amax(1), -h.amin(1)).float()       # (N,)
        if bool(torch.isfinite(row_max).all()):
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
        k = min(self.k + 1, h.shape[0])
        rows = row_max.topk(k).indices                               # (k,)
        cand = h[rows].float().abs() if a is None else a[rows]       # (k, C)
        vals, flat = cand.reshape(-1).topk(min(self.k + 1, k * h.shape[1]))
        rows, dims = rows[flat // h.shape[1]], flat % h.shape[1]
        if len(vals) > self.k and vals[self.k] == vals[self.k - 1] and vals[self.k - 1] >= 0:
            a = h.float().abs() if a is None else a
            rows, dims, vals = self._ties(a, float(vals[self.k - 1]), seq, pos)
        else:
            rows, dims, vals = rows[: self.k], dims[: self.k], vals[: self.k]
        signed = h[rows, dims].float()
        new = [(v, s, int(seq[r]), int(pos[r]), int(d), int(tok[r]))
               for v, s, r, d in zip(vals.tolist(), signed.tolist(), rows.tolist(), dims.tolist()) if v >= 0]
        self.top = self._best(self.top + new)

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


# The sparsity sweep: 13 thresholds 10^(k/2), 1e-6 .. 1, each counted exactly (LogHistogram cuts).
from .options import THRESHOLDS  # noqa: E402  (the sweep is an analysis option)


class SparsityStats(Reducer):
    """|attention output| of one layer before and after the gate, as log histograms with
    exact counts below each threshold (`cuts`).

    The uniform-scaling control counts |O| * m < t, with m the layer's mean gate over the same
    data, known only after the whole pass. Which values sit below t / m depends on m down to the
    last bit (for any two float32 values a < b there are m and t with a < t / m <= b), so no
    bounded one-pass state answers it exactly for every m. What is exact in one pass: bfloat16
    outputs, which the ungated histogram holds value by value, and every share on a bin edge.
    Otherwise the control is read from the ungated histogram at t / m, interpolated inside the
    one 0.54% bin that holds t / m, and marked so; `control.py` (exact_control=True) counts it
    exactly in a second pass with m known, into `control`.
    """

    def __init__(self, device="cpu", thresholds=THRESHOLDS):
        self.thresholds = tuple(float(t) for t in thresholds)
        self.ungated = LogHistogram(device, cuts=self.thresholds)
        self.gated = LogHistogram(device, cuts=self.thresholds)

    def merge(self, other: "SparsityStats") -> "SparsityStats":
        self.ungated.merge(other.ungated)
        self.gated.merge(other.gated)
        return self

    def shares(self, mean_gate: float | None, control: LogHistogram | None = None
               ) -> dict[str, dict[float, tuple[float, bool]]]:
        """variant -> threshold -> (share below it, whether it is an exact count).

        control: the second pass's histogram of |O| with scale mean_gate (control.py), if any."""
        out = {"ungated": {t: self.ungated.share_below(t) for t in self.thresholds},
               "gated": {t: self.gated.share_below(t) for t in self.thresholds}}
        if control is not None:                 # counted at the cuts t / m, m its own scale
            out["mean_gate"] = {t: control.share_below(t) for t in self.thresholds}
        elif mean_gate is not None and mean_gate > 0:
            out["mean_gate"] = {t: self.ungated.share_below(t, mean_gate) for t in self.thresholds}
        return out

    def fractions(self, mean_gate: float | None, control: LogHistogram | None = None
                  ) -> dict[str, dict[float, float]]:
        """variant -> threshold -> share below it (see `shares`)."""
        return {v: {t: share for t, (share, _) in by_t.items()}
                for v, by_t in self.shares(mean_gate, control).items()}


class LossStats(Reducer):
    """Next-token negative log-likelihood over valid (input, target) pairs."""

    BLOCK = 1 << 22             # logits per step: a (T, V) float32 copy is never made
    summed = ("nll", "count", "nonfinite")

    def __init__(self, device="cpu"):
        self.nll = torch.zeros((), dtype=F64, device=device)
        self.count = torch.zeros((), dtype=I64, device=device)
        self.nonfinite = torch.zeros((), dtype=I64, device=device)

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
                self.nonfinite += (pair[b, start:end] & ~keep).sum().to(self.nonfinite.device)

    def loss(self) -> float:
        return float(self.nll / self.count) if self.count > 0 else math.nan
