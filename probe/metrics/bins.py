"""The bins of one tensor's |values| by their top 16 float32 bits (LogHistogram's bins, probe/
reducers.py), counted per group of rows: one binning of an activation that every reader of
it shares within one event (bus.Batch.derived): the sparsity histograms sum the groups, the
per-sequence counts (metrics/per_sequence.py) read each group's counts below a cut. So an
activation is binned once, not once per metric.

Bins and counts are integers: a count read from here is the count a comparison |x| < t on
the same values gives, bit for bit (cut_bits says why), whatever the grouping.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from . import kernels

I64 = torch.int64
BINS = 1 << 15
NONFINITE = 0x7F80          # bins from here on: exponent all ones, inf and NaN
BLOCK = 1 << 22             # elements per step of the in-bin search: bounds its temporaries
BINNED = "bins"             # Batch.derived's name for an event's Bins (batch_bins)


class Bins:
    """values (N, ...) in groups of consecutive rows along dim 0 (`sizes`, G ints summing to N;
    None: one group).

    counts (G, BINS) int64 per group, the non-finite bins zeroed (their values are in
    `nonfinite` (G,)); `half`: the values were bfloat16 (each its own bin's lower edge)."""

    def __init__(self, values: torch.Tensor, sizes: list[int] | None = None, cuts: tuple[int, ...] = ()):
        """cuts: cut bits (LogHistogram.cut_bits) the readers will ask for; compiled bins count the
        values below those inside a bin in the binning pass itself (any other cut: a later pass)."""
        if values.dtype not in (torch.float32, torch.bfloat16):
            values = values.float()
        if values.dim() == 0 or values.stride(-1) != 1:
            values = values.contiguous()
        # float32 on the CPU: one compiled pass (probe/metrics/kernels.py), the same counts.
        self.compiled = kernels.usable(values) and values.numel() > 0
        if self.compiled and not values.is_contiguous():
            values = values.contiguous()
        self.numel = values.numel()
        self.half = values.dtype == torch.bfloat16
        self.device = values.device
        self._values = values
        inner = self.numel // values.shape[0] if values.dim() and values.shape[0] else 0
        sizes = [values.shape[0] if values.dim() else 1] if sizes is None else list(sizes)
        self.groups = len(sizes)
        self.sizes = [s * inner for s in sizes] if values.dim() else [1]                    # elements per group
        self._hits: dict[tuple, tuple] = {}
        if self.compiled:       # numpy views of the counts: their sums cost less than torch calls
            inside = inside_bins(cuts)
            if inside:
                counts, below = kernels.bin_counts_below(values, self.sizes, inside, BINS)
            else:
                counts = kernels.bin_counts(values, self.sizes, BINS)
            self._array = counts.numpy()                                                   # (G, BINS)
            self.nonfinite_array = self._array[:, NONFINITE:].sum(1)                       # (G,)
            self._array[:, NONFINITE:] = 0
            self.nonfinite = torch.from_numpy(self.nonfinite_array)
            self._below: dict[tuple[int, int], np.ndarray] = dict(zip(inside, below.T)) if inside else {}
            # (bin, cut) -> (G,): the values of the bin below the cut
        else:
            high = self.high
            if self.groups == 1:
                counts = torch.bincount(high, minlength=BINS)[None]
            else:
                counts = torch.stack([torch.bincount(h, minlength=BINS) for h in high.split(self.sizes)])
            self.nonfinite = counts[:, NONFINITE:].sum(1)                                  # (G,)
            counts[:, NONFINITE:] = 0
        self.counts = counts                                                               # (G, BINS)

    @functools.cached_property
    def high(self) -> torch.Tensor:
        """(n,) int16: each value's bin. Little-endian: the odd int16 words of a float32 are its
        high halves (sign, exponent, 7 mantissa bits); masking the sign bit gives the bin of
        |value|, as a fresh int16 tensor."""
        words = self._values.view(torch.int16)
        return ((words if self.half else words[..., 1::2]) & 0x7FFF).reshape(-1)

    def total(self) -> torch.Tensor:
        """(BINS,) int64: every group's counts."""
        return self.counts[0] if self.groups == 1 else self.counts.sum(0)

    def in_bin(self, inside) -> torch.Tensor:
        """(G, len(inside)) int64: per cut (k, j, c) of `inside`, a cut c strictly inside bin
        j, the values of bin j whose bits (sign masked) are below c."""
        out = torch.zeros(self.groups, len(inside), dtype=I64, device=self.device)
        if not inside:
            return out
        js = [j for _, j, _ in inside]
        if self.half:       # a bfloat16 value is its bin's lower edge, below every cut inside the bin
            return out + self.counts[:, js]
        if self.compiled:
            return torch.from_numpy(self.in_bin_array(inside))
        present = self.counts[:, js].sum(0).tolist()                   # one sync, not one per cut
        todo = [(i, j, c) for i, ((_, j, c), n) in enumerate(zip(inside, present)) if n]
        if not todo:
            return out
        high, bits, group = self._values_in(tuple(sorted(set(js))))
        for i, j, c in todo:
            hit = (high == j) & (bits < c)
            out[:, i] = hit.sum() if self.groups == 1 else torch.bincount(group[hit], minlength=self.groups)
        return out

    def total_array(self) -> np.ndarray:
        """(BINS,) int64 numpy: total() of compiled bins."""
        return self._array[0] if self.groups == 1 else self._array.sum(0)

    def in_bin_array(self, inside) -> np.ndarray:
        """in_bin() of compiled bins, as a numpy (G, len(inside)) int64 array: one kernel pass for
        the cuts not yet counted, kept for later readers of the same bins."""
        out = np.zeros((self.groups, len(inside)), dtype=np.int64)
        present = self._array[:, [j for _, j, _ in inside]].sum(0)
        todo = [(i, j, c) for i, ((_, j, c), n) in enumerate(zip(inside, present)) if n]
        new = tuple(sorted({(j, c) for _, j, c in todo} - self._below.keys()))
        if new:
            found = kernels.below_in_bins(self._values, self.sizes, new, BINS)            # (G, len(new))
            self._below.update(zip(new, found.T))
        for i, j, c in todo:
            out[:, i] = self._below[(j, c)]
        return out

    def below(self, cut_bits: list[int]) -> torch.Tensor:
        """(G, len(cut_bits)) int64: per group the values whose bits (sign masked) are below
        each cut: the count of |x| < value(cut), NaN and inf never below."""
        inside = [(k, c >> 16, c) for k, c in enumerate(cut_bits) if c & 0xFFFF and c < 0x7F800000]
        if self.compiled:
            out = np.stack([self._array[:, :min(c >> 16, NONFINITE)].sum(1) for c in cut_bits], 1) \
                if cut_bits else np.zeros((self.groups, 0), dtype=np.int64)
            if inside:
                out[:, [k for k, _, _ in inside]] += self.in_bin_array(inside)
            return torch.from_numpy(out)
        out = torch.zeros(self.groups, len(cut_bits), dtype=I64, device=self.device)
        for k, c in enumerate(cut_bits):
            out[:, k] = self.counts[:, :min(c >> 16, NONFINITE)].sum(1)
        if inside:
            out[:, [k for k, _, _ in inside]] += self.in_bin(inside)
        return out

    def finite(self) -> torch.Tensor:
        """(G,) int64: the finite values of each group."""
        return torch.tensor(self.sizes, dtype=I64, device=self.device) - self.nonfinite

    def _values_in(self, bins: tuple[int, ...]):
        """(high int16, bits int32 sign masked, group int64 or None) of the values whose bin is
        one of `bins`: a few % of them, found once per set of bins and kept for later cuts."""
        for key, found in self._hits.items():
            if set(bins) <= set(key):
                return found
        marks = cut_marks(bins, self.high.device)
        bits_all = self._values.reshape(-1).view(torch.int32)
        ends = torch.tensor(self.sizes, device=self.device).cumsum(0) if self.groups > 1 else None
        parts = []
        for start in range(0, self.high.numel(), BLOCK):
            h = self.high[start:start + BLOCK]
            # Where the block's values sit in one of the bins: one nonzero, then small gathers.
            where = marks.index_select(0, h.int()).nonzero().squeeze(1)            # (m,)
            part = [h[where], bits_all[start:start + BLOCK][where] & 0x7FFFFFFF]
            if ends is not None:
                part.append(torch.searchsorted(ends, where + start, right=True))
            parts.append(part)
        found = tuple(torch.cat(p) for p in zip(*parts)) + ((None,) if ends is None else ())
        self._hits[bins] = found
        return found


@functools.lru_cache(maxsize=64)
def cut_marks(bins: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """(BINS,) bool, True at the given bins: the bins whose values the in-bin search reads.
    One per set of bins and device, shared by every histogram with those cuts."""
    marks = torch.zeros(BINS, dtype=torch.bool, device=device)
    marks[list(bins)] = True
    return marks


@functools.lru_cache(maxsize=64)
def inside_bins(cuts: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The cuts strictly inside a bin, as sorted (bin, cut bits) pairs (a cut on a bin edge, or
    at inf, needs no count inside a bin)."""
    return tuple(sorted({(c >> 16, c) for c in cuts if c & 0xFFFF and c < 0x7F800000}))


def batch_bins(x: torch.Tensor, b, cuts: tuple[int, ...] = ()) -> Bins:
    """The bins of an event's x (B, T, ...), valid positions only, one group per row of the
    batch b (bus.Batch): made once per event, whichever metric asks first. cuts: the cut bits
    every reader of these bins asks for (each metric passes the same: see Bins)."""
    def make() -> Bins:
        if b.all_valid:
            return Bins(x, [1] * x.shape[0], cuts)
        return Bins(b.rows(x), b.valid.sum(1).tolist(), cuts)
    return b.derived(BINNED, x, make)


class RowScan:
    """One compiled pass over an event's h (B, T, C), float32 on the CPU (kernels.scan_rows),
    for the M-Act metric, the per-sequence maxima and the token series:

    row_max (B, T) float32: each position's largest |h| (NaN where the row holds a NaN), what
      abs_row_max gives; the bins of |h| over valid positions: `span` (int64 numpy), the counts
      of bins lo .. lo + len(span) - 1 (the bins from 1 to the last finite one that hold values),
      `zero` the count of bin 0, `nonfinite` the NaN and inf values; numel: the valid values;
    top [(bits of |h|, flat index into h)]: the TOP largest finite |h| of valid positions, largest
      first, ties in the order of h's memory (row by row)."""

    TOP = 4                     # M-Act's top 3 and one more, to see a tie at the third

    def __init__(self, h: torch.Tensor, b):
        B, T, C = h.shape
        self.values = h if h.is_contiguous() else h.contiguous()
        valid = None if b.all_valid else b.valid.reshape(-1).cpu().numpy()
        self.span, self.lo, self.zero, self.nonfinite, row_max, words, at = kernels.scan_rows(
            self.values.view(B * T, C), valid, self.TOP, BINS)
        self.numel = C * (B * T if valid is None else int(valid.sum()))
        self.row_max = torch.from_numpy(row_max).view(B, T)
        self.top = [(w, i) for w, i in zip(words.tolist(), at.tolist()) if w >= 0]

    def counts(self) -> np.ndarray:
        """(BINS,) int64: every bin's count, the non-finite bins 0 (LogHistogram's layout)."""
        full = np.zeros(BINS, dtype=np.int64)
        full[0] = self.zero
        full[self.lo:self.lo + len(self.span)] = self.span
        return full


def row_scan(h: torch.Tensor, b) -> RowScan | None:
    """The event's RowScan when the compiled kernels take h (float32 (B, T, C) on the CPU),
    made once per event; None elsewhere (the torch path: row_extremes, a LogHistogram update)."""
    if h.dim() != 3 or not kernels.usable(h) or h.numel() == 0:
        return None
    return b.derived("row_scan", h, lambda: RowScan(h, b))


def row_extremes(h: torch.Tensor, b) -> tuple[torch.Tensor, torch.Tensor]:
    """((B, T), (B, T)) max and min over the last dim of an event's h (B, T, C), in h's dtype
    (NaN propagates): made once per event for the M-Act metric, the per-sequence maxima and the
    token series."""
    return b.derived("row_extremes", h, lambda: (h.amax(2), h.amin(2)))


def abs_row_max(h: torch.Tensor, b) -> torch.Tensor:
    """(B, T) max |h| over the last dim of an event's h (B, T, C), in h's dtype, from its max
    and min (no |h| copy; NaN propagates): made once per event for the M-Act metric and the
    per-sequence maxima."""
    def make() -> torch.Tensor:
        scan = row_scan(h, b)
        if scan is not None:
            return scan.row_max
        top, bottom = row_extremes(h, b)
        return torch.maximum(top, -bottom)
    return b.derived("row_max", h, make)
