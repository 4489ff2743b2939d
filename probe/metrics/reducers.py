"""Streaming statistics: `update` with a batch, `merge` with another reducer, read the result.

The base class and the generic statistic (LogHistogram); each metric's own reducers are in
its module under probe/metrics/.

Memory never grows with the number of sequences. Sums are kept in float64 and counts in
int64 whatever the model dtype, so no statistic loses precision or overflows. Merging is
exact: a reducer over two halves of a dataset, merged, equals one pass over all of it
(up to float64 summation order).
"""
from __future__ import annotations

import functools
import math
import struct

import numpy as np
import torch

from . import bins as binning
from . import kernels

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
        for name in (*self.summed, *self.minimum, *self.maximum):   # the first state tensor's
            return getattr(self, name).device
        return next((c.device for c in self.children().values()), torch.device("cpu"))

    def follow(self, device) -> "Reducer":
        """Keep the state where the activations are (a layer's GPU under --device-map auto).
        Called on every event: a torch.device is compared as it is, with no state dict made."""
        if self.device != (device if isinstance(device, torch.device) else torch.device(device)):
            self.to(device)
        return self


def grown(t: torch.Tensor, rows: int, fill) -> torch.Tensor:
    """t with at least `rows` rows along dim 0, the new ones `fill`."""
    if t.shape[0] >= rows:
        return t
    extra = torch.full((rows - t.shape[0], *t.shape[1:]), fill, dtype=t.dtype, device=t.device)
    return torch.cat([t, extra])


def _zeros(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """torch.zeros(n), on the CPU through numpy: a fraction of torch's cost (histograms grow often)."""
    if device.type == "cpu":
        return torch.from_numpy(np.zeros(n, dtype=np.int32 if dtype == torch.int32 else np.int64))
    return torch.zeros(n, dtype=dtype, device=device)


def flatten(reducers) -> list[Reducer]:
    """Every reducer of `reducers` and, after each, the reducers it holds (depth first): the
    fixed order in which torchrun merges them and --resume saves them."""
    out = []
    for r in reducers:
        out.append(r)
        out += flatten(r.children().values())
    return out


def float32_bits(value: float) -> int:
    """The bit pattern of the float32 nearest to value (a non-negative float; inf beyond the
    largest float32, as torch rounds). struct, not a torch tensor: these run thousands of times
    as the tables are built."""
    try:
        return _U32.unpack(_F32.pack(value))[0]
    except OverflowError:                      # rounds to inf
        return 0x7F800000


def float32_value(bits: int) -> float:
    return _F32.unpack(_U32.pack(bits))[0]


_F32, _U32 = struct.Struct("<f"), struct.Struct("<I")


@functools.lru_cache(maxsize=4096)     # a few hundred calls per analysis, a few dozen distinct
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
    [lo_j, lo_(j+1)) with lo_j the float whose bits are j << 16: 128 bins per octave, linear
    inside it (2**-7 of the octave's lower edge: 0.78% wide at its bottom, 0.39% at its top),
    from 1e-38 to inf, exact edges. Filling it is one pass over the data's bits: a compiled
    kernel on the CPU (probe/metrics/kernels.py), a bincount over a free view of the data
    elsewhere. A median read from it is within 0.78%.

    Shares below a threshold t are exact counts: with c = cut_bits(t, scale), a value is below
    t iff its bit pattern is below c, so the share is the bins below c's bin (exact: bins are
    whole bit ranges) plus the values inside c's bin whose low 16 bits are below c's. Those
    last are counted during `update` (`in_bin`, one number per cut), touching only the few
    values that fall into a cut's bin. bfloat16 values are their own top 16 bits, so a
    histogram fed only bfloat16 (`inexact == 0`) holds every value exactly and answers any
    threshold exactly. Otherwise a threshold that is not a cut is interpolated in log space
    inside its bin; `share_below` says which.
    """

    BINS = binning.BINS
    NONFINITE = binning.NONFINITE   # bins from here on: exponent all ones, inf and NaN
    summed = ("counts", "nonfinite", "in_bin", "inexact")

    def __init__(self, device="cpu", cuts=(), scale: float = 1.0):
        """cuts: thresholds counted exactly; scale: count values v with v * scale < t (the
        mean-gate control's m), 1 for plain |v| < t."""
        self.nonfinite = torch.zeros((), dtype=I64, device=device)
        self._clear_counts(device)
        self.cuts = tuple(float(t) for t in cuts)
        self.scale = float(scale)
        self.cut_bits = [cut_bits(t, self.scale) for t in self.cuts]
        self.in_bin = torch.zeros(len(self.cuts), dtype=I64, device=device)  # below the cut, in its bin
        self.inexact = torch.zeros((), dtype=I64, device=device)   # values kept with more than 16 bits
        # The cuts that fall strictly inside a bin (a cut on a bin edge needs no search).
        self._inside = [(k, c >> 16, c) for k, c in enumerate(self.cut_bits) if c & 0xFFFF and c < 0x7F800000]

    # -- storage ---------------------------------------------------------------------------------
    # The 32768 counts are stored only over the bins seen so far: a layer's activations span a
    # few dozen octaves (about 5,000 bins of 128 per octave), so a probe pass that keeps 180 of
    # these (M-Act at four sites and sparsity, per layer) holds about 4 MB instead of 46 MB.
    # `counts` reads and writes the whole (BINS,) int64 array, for merging, saving and moving.
    # Bin 0 (zero and subnormals below 9.2e-41) is kept apart, so that exact zeros do not
    # stretch the stored range down to it. Stored counts are int32 while no bin can reach 2**31
    # (fewer values than that were counted in all) and int64 from then on.
    _MARGIN = 128               # bins added on each side when the stored range grows (an octave)
    _INT32_SAFE = 2 ** 31 - 1

    def _clear_counts(self, device) -> None:
        self._zero = torch.zeros((), dtype=I64, device=device)       # bin 0
        self._lo = 1                                                  # bins [_lo, _lo + len(_stored))
        self._stored = torch.zeros(0, dtype=torch.int32, device=device)
        self._counted = 0                                             # values added: bounds any bin
        self._running = None                                          # _cumulative(), while counts stay

    @property
    def device(self) -> torch.device:
        return self.nonfinite.device

    @property
    def counts(self) -> torch.Tensor:
        """(BINS,) int64: values per bin (the non-finite bins are always 0; see `nonfinite`)."""
        full = torch.zeros(self.BINS, dtype=I64, device=self._stored.device)
        full[0] = self._zero
        full[self._lo:self._lo + len(self._stored)] = self._stored
        return full

    @counts.setter
    def counts(self, full: torch.Tensor) -> None:
        self._clear_counts(full.device)
        if full.device.type != "meta":                                # meta: shapes only, no data
            self._add(full, int(full.sum()))

    def _add(self, counts: torch.Tensor, n: int) -> None:
        """Adds counts (BINS,) int64, non-finite bins already 0; n: the values they hold."""
        if counts.device.type == "cpu" and self._stored.device.type == "cpu":
            self._add_array(counts.to(I64).contiguous().numpy(), n)
            return
        self._running = None
        self._zero += counts[0].to(self._zero.device)
        seen = counts[1:self.NONFINITE].nonzero()                     # (K, 1) bins holding values
        if len(seen) == 0:
            return
        lo, hi = (seen[[0, -1], 0] + 1).tolist()                      # one sync: bins lo .. hi
        self._reserve(lo, hi, n)
        self._stored[lo - self._lo:hi + 1 - self._lo] += counts[lo:hi + 1].to(self._stored)

    def _add_array(self, counts: np.ndarray, n: int) -> None:
        """_add on the CPU, through numpy views of the same memory: a few numpy calls per event
        instead of a dozen torch ones (counts (BINS,) int64)."""
        span = kernels.occupied(counts, 1, self.NONFINITE)           # a scan from both ends
        lo, hi = span if span is not None else (1, 0)
        self._add_bins(lo, counts[lo:hi + 1], int(counts[0]), n)

    def _add_bins(self, lo: int, span: np.ndarray, zero: int, n: int) -> None:
        """Adds, on the CPU, the counts span (m,) int64 of bins lo .. lo + m - 1 (none
        non-finite) and bin 0's count `zero`; n: the values counted."""
        self._running = None
        if zero:
            self._zero += zero
        if len(span):
            self._reserve(lo, lo + len(span) - 1, n)
            self._stored.numpy()[lo - self._lo:lo + len(span) - self._lo] += span

    def _reserve(self, lo: int, hi: int, n: int) -> None:
        """Makes the stored range hold bins lo .. hi (an octave more on the side it grows) and the
        stored type hold n more values."""
        self._counted += n
        if self._stored.dtype == torch.int32 and self._counted > self._INT32_SAFE:
            self._stored = self._stored.to(I64)
        end = self._lo + len(self._stored)
        if len(self._stored) == 0 or lo < self._lo or hi >= end:
            new_lo = max(1, min(lo, self._lo if len(self._stored) else lo) - self._MARGIN)
            new_end = min(self.NONFINITE, max(hi + 1, end if len(self._stored) else 0) + self._MARGIN)
            grown = _zeros(new_end - new_lo, self._stored.dtype, self._stored.device)
            if len(self._stored):
                grown[self._lo - new_lo:self._lo - new_lo + len(self._stored)] = self._stored
            self._lo, self._stored = new_lo, grown

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {"counts": self.counts, **{n: getattr(self, n) for n in self.summed if n != "counts"}}

    def to(self, device) -> "LogHistogram":
        # Already there: no (BINS,) round trip through `counts` (cap.to("cpu") after a CPU pass).
        return self if self.device == torch.device(device) else super().to(device)

    def update(self, values: torch.Tensor) -> None:
        """Counts |values| (any shape; the sign bit is ignored, so no abs copy is made).

        NaN and inf are left out, counted in `nonfinite`. bfloat16 values are their own top 16
        bits; float32 ones are read through an int16 view; other dtypes are converted first.
        """
        if values.numel():
            self.add(binning.Bins(values))

    def add(self, bins: "binning.Bins") -> None:
        """Counts values already binned (probe/metrics/bins.py: one binning that several readers share)."""
        if bins.numel == 0:
            return
        if bins.compiled and self.device.type == "cpu":
            self._add_compiled(bins)
            return
        self.nonfinite += bins.nonfinite.sum().to(self.nonfinite.device)
        self._add(bins.total().to(self._stored.device), bins.numel)
        if not bins.half:
            self.inexact += bins.numel
        if self._inside:
            found = bins.in_bin(self._inside).sum(0)                   # (len(_inside),)
            self.in_bin[[k for k, _, _ in self._inside]] += found.to(self.in_bin.device)

    def add_span(self, lo: int, span: np.ndarray, zero: int, n: int) -> None:
        """Counts float32 values binned elsewhere (bins.RowScan): span (m,) int64 the counts of
        bins lo .. lo + m - 1 (none non-finite), zero bin 0's count; n: the values they hold.
        Only for a histogram without cuts (the values below a cut inside a bin need the values
        themselves)."""
        if self._inside:
            raise ValueError("a histogram with cuts inside a bin needs the values, not their counts")
        self._add_bins(lo, span, zero, n)
        self.inexact.numpy()[()] += n                                # float32: not bfloat16

    def _add_compiled(self, bins: "binning.Bins") -> None:
        """add() of CPU bins made by the compiled kernels: the same sums, in numpy, on views of
        this histogram's tensors (each torch call costs more than these small sums)."""
        nonfinite = int(bins.nonfinite_array.sum())
        if nonfinite:
            self.nonfinite += nonfinite
        self._add_array(bins.total_array(), bins.numel)
        self.inexact += bins.numel                                    # float32: not bfloat16
        if self._inside:
            found = bins.in_bin_array(self._inside).sum(0)            # (len(_inside),)
            self.in_bin.numpy()[[k for k, _, _ in self._inside]] += found

    def _cumulative(self) -> tuple[np.ndarray, int, int]:
        """((len(_stored),) int64 running counts of the stored bins, bin 0's count, the total), in
        numpy and Python ints, made once while the counts stay as they are: the tables and the meta
        read a dozen shares and a median of each histogram, a few integers each."""
        if self._running is None:
            running = np.cumsum(self._stored.cpu().numpy(), dtype=np.int64)
            zero = int(self._zero)
            self._running = running, zero, zero + (int(running[-1]) if len(running) else 0)
        return self._running

    @property
    def total(self) -> int:
        return self._cumulative()[2]

    def _below(self, j: int) -> int:
        """The values in bins < j (counts[:j].sum(), from the stored range: no (BINS,) copy)."""
        running, zero, _ = self._cumulative()
        k = min(max(j - self._lo, 0), len(running))                       # stored bins below j
        return (zero if j > 0 else 0) + (int(running[k - 1]) if k else 0)

    def _in(self, j: int) -> int:
        """The values in bin j (counts[j])."""
        if j == 0:
            return int(self._zero)
        i = j - self._lo
        return int(self._stored[i]) if 0 <= i < len(self._stored) else 0

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
        below = self._below(j)
        if not c & 0xFFFF or j >= self.NONFINITE:                 # on a bin edge
            return below / total, True
        if scale == self.scale and threshold in self.cuts:
            return (below + int(self.in_bin[self.cuts.index(threshold)])) / total, True
        if int(self.inexact) == 0:                                 # bfloat16: bin j is one value
            return (below + self._in(j)) / total, True
        return (below + self._within_bin(j, threshold / scale) * float(self._in(j))) / total, False

    def bin_share(self, threshold: float, scale: float | None = None) -> float:
        """Share of the values inside the bin that holds the cut of threshold at scale (0 on a
        bin edge): how far an interpolated `share_below` can be from the exact count."""
        c = cut_bits(threshold, self.scale if scale is None else float(scale))
        total = self.total
        return float(self._in(c >> 16)) / total if total and c & 0xFFFF and (c >> 16) < self.NONFINITE else 0.0

    def fraction_below(self, threshold: float) -> float:
        """Share of values < threshold (exact where `share_below` says so)."""
        return self.share_below(threshold, 1.0)[0]

    def quantile(self, q: float) -> float:
        total = self.total
        if total == 0:
            return math.nan
        # Over bin 0 and the stored range only: the bins between and beyond hold nothing, so the
        # first bin whose running count reaches the target is the one the full (BINS,) array gives.
        running, zero, _ = self._cumulative()
        cum = np.concatenate([[zero], zero + running])                     # bins 0, _lo, _lo + 1, ...
        target = q * total
        i = int(np.searchsorted(cum.astype(np.float64), target))
        if i >= len(cum):                                      # beyond every value: the last bin, empty
            j, before, inside = self.BINS - 1, float(cum[-1]), 0.0
        else:
            j = 0 if i == 0 else self._lo + i - 1
            before = float(cum[i - 1]) if i > 0 else 0.0
            inside = float(cum[i] - (cum[i - 1] if i > 0 else 0))
        share = (target - before) / max(inside, 1.0)
        lo, hi = self.lower_edge(j), self.lower_edge(j + 1)
        if lo <= 0:
            return hi * share
        return lo * (hi / lo) ** share
