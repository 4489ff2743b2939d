"""CPU kernels of the per-event metrics, compiled by numba: one pass over an activation where
torch needs several, each with a temporary as large as the activation.

- the bins of probe/metrics/bins.py: one pass over a float32 activation's bits counts its bins
  and the values below each cut inside a bin (a cut named only later: a second pass) where
  torch needs a mask, a bincount (itself three passes: min, max, count), a gather, a nonzero and
  a few small gathers.
  Integer counts, so the result is the torch path's, bit for bit; `occupied` finds the bins a
  histogram must store by a scan from both ends;
- the per-head norms of probe/metrics/head_norms/: each vector's squares summed in float64 as
  they are read, without the float64 copy of the activation;
- the float64 sum of the attention output that probe/capture/hf.py reads for "every value
  finite" and "the same values as before", in one vectorised read;
- where a row's largest |h| sits (probe/metrics/token_series/): a scan that stops at the hit
  (`signed_peak`);
- the value drains of sink anatomy (probe/metrics/anatomy/received.py): ||o||^2 and the sink
  contributions' dot products in one read of the attention output, no (B, H, T, D) temporaries;
- M-Act's pass over an activation (probe/metrics/bins.py RowScan): its bins, each row's largest
  |h| and the few largest |h| with where they sit, in one read of the activation, where torch
  needs a max, a min, a top-k over the rows, a gather and a top-k over those.

tests/metrics/test_kernels.py holds each equal to its torch path, which stays for other devices
and dtypes, and for a Python numba does not support (`available`).

numba is imported on first use only: a process that never bins on the CPU never loads it.
Compiled code is cached beside this file (or in numba's user cache when the package folder is
read-only; NUMBA_CACHE_DIR elsewhere), so only the first analysis on a machine pays for the
compilation (about 0.5 s).
"""
from __future__ import annotations

import functools
import threading
from types import SimpleNamespace

import numpy as np
import torch


@functools.lru_cache(maxsize=1)
def _compiled() -> SimpleNamespace:
    """The numba functions by name, defined (and numba imported) on first use; each compiles on
    its first call, or loads from the cache."""
    from numba import njit

    @njit(cache=True, nogil=True)
    def count_bins(bits, ends, counts):
        # bits (n,) int32 float32 words, ends (G,) int64 group ends, counts (G, BINS) int64 += bins
        start = 0
        for g in range(ends.shape[0]):
            group, row = bits[start:ends[g]], counts[g]      # a slice: a third faster than offsets
            for i in range(group.shape[0]):
                row[(group[i] & 0x7FFFFFFF) >> 16] += 1
            start = ends[g]

    @njit(cache=True, nogil=True)
    def count_bins_below(bits, ends, marked, first, cut_bin, cut_bits, counts, out):
        # count_bins and count_in_bins in one pass, for cuts known before binning; marked (BINS,)
        # uint8: 1 where a cut lies inside the bin (a table small enough for the L1 cache)
        start = 0
        for g in range(ends.shape[0]):
            group, row, below = bits[start:ends[g]], counts[g], out[g]
            for i in range(group.shape[0]):
                word = group[i] & 0x7FFFFFFF
                j = word >> 16
                row[j] += 1
                if marked[j]:
                    k = first[j]
                    while k < cut_bin.shape[0] and cut_bin[k] == j:
                        if word < cut_bits[k]:
                            below[k] += 1
                        k += 1
            start = ends[g]

    @njit(cache=True, nogil=True)
    def count_in_bins(bits, ends, first, cut_bin, cut_bits, out):
        # first (BINS,) int32: index of the first cut inside each bin (cuts sorted by bin), -1 for
        # none; cut_bin, cut_bits (K,) int32; out (G, K) int64 += values of the cut's bin below it
        start = 0
        for g in range(ends.shape[0]):
            group, row = bits[start:ends[g]], out[g]
            for i in range(group.shape[0]):
                word = group[i] & 0x7FFFFFFF
                j = word >> 16
                k = first[j]
                if k >= 0:
                    while k < cut_bin.shape[0] and cut_bin[k] == j:
                        if word < cut_bits[k]:
                            row[k] += 1
                        k += 1
            start = ends[g]

    @njit(cache=True, nogil=True)
    def occupied(counts, lo, hi):
        # (first, last) index in [lo, hi) of counts (n,) int64 holding a nonzero count; (-1, -1) none
        first = lo
        while first < hi and counts[first] == 0:
            first += 1
        if first == hi:
            return -1, -1
        last = hi - 1
        while counts[last] == 0:
            last -= 1
        return first, last

    # reassoc: the sum may be vectorised (its order is this kernel's own, the same on every call)
    @njit(cache=True, nogil=True, fastmath={"reassoc"})
    def vector_norms(x, out):
        # x (N, H, D) float32, out (N, H) float64: sqrt of the float64 sum of squares
        N, H, D = x.shape
        for n in range(N):
            for h in range(H):
                total = 0.0
                for d in range(D):
                    v = np.float64(x[n, h, d])
                    total += v * v
                out[n, h] = np.sqrt(total)

    # reassoc: vectorised; the order is this kernel's own, the same on every call over n elements
    @njit(cache=True, nogil=True, fastmath={"reassoc"})
    def float64_sum(x):
        # x (n,) float32 -> the float64 sum of its elements (a NaN or inf reaches it)
        total = 0.0
        for i in range(x.shape[0]):
            total += np.float64(x[i])
        return total

    @njit(cache=True, nogil=True)
    def scan_rows(words, C, valid, counts, row_max, top_word, top_at, extent):
        # words (N * C,) int32 float32 bits, N rows of C; valid (N,) bool: the rows counted.
        # counts (BINS,) int64: a scratch, zero on entry and again on return. Returns the counts
        # of bins lo .. hi of |x| over valid rows (a copy; empty where no value lies in bins 1 to
        # the last finite one) and fills extent (3,) int64 = lo, bin 0's count (zero and
        # subnormals), the non-finite values; row_max (N,) int32 = the largest bits of |x| per
        # row (every row; NaN bits exceed inf's, so a NaN row's maximum is a NaN); top_word,
        # top_at (K,) int32 / int64, filled with -1 / 0: the K largest finite |x| bits of valid
        # rows and their flat indices, largest first, ties in index order (strict > below).
        N, K = row_max.shape[0], top_word.shape[0]
        NONFINITE = 0x7F800000
        # The least |x| bits of bin 1 or above, as an unsigned difference from bin 1's first
        # bits: bin 0's values wrap around to the top, so a plain minimum, which vectorises, skips
        # them. And the greatest |x| bits. Both over valid rows.
        low, high = np.uint32(0xFFFFFFFF), 0
        for n in range(N):
            row = words[n * C:(n + 1) * C]
            if valid[n]:
                for i in range(C):
                    counts[(row[i] & 0x7FFFFFFF) >> 16] += 1
            m, least = 0, np.uint32(0xFFFFFFFF)
            for i in range(C):               # apart from the counts: this loop vectorises
                w = row[i] & 0x7FFFFFFF
                m = max(m, w)
                least = min(least, np.uint32(w - 0x10000))
            row_max[n] = m
            if valid[n]:
                low, high = min(low, least), max(high, m)
            # A row can hold a top entry only if its maximum beats the K-th so far (or it holds a
            # NaN or inf, which hide its finite maximum): after the first rows, few rows do.
            if valid[n] and (m > top_word[K - 1] or m >= NONFINITE):
                for i in range(C):
                    w = row[i] & 0x7FFFFFFF
                    if w < NONFINITE and w > top_word[K - 1]:
                        p = K - 1
                        while p > 0 and top_word[p - 1] < w:
                            top_word[p] = top_word[p - 1]
                            top_at[p] = top_at[p - 1]
                            p -= 1
                        top_word[p] = w
                        top_at[p] = n * C + i
        last = NONFINITE >> 16
        nonfinite = 0
        for j in range(last, counts.shape[0]):
            nonfinite += counts[j]
            counts[j] = 0
        extent[1], extent[2] = counts[0], nonfinite
        counts[0] = 0
        lo = min((np.int64(low) + 0x10000) >> 16, last)  # `last`: no value in bins 1 up
        hi = min(high >> 16, last - 1)                   # inf or NaN hides the finite maximum
        while hi >= lo and counts[hi] == 0:
            hi -= 1
        extent[0] = lo
        span = counts[lo:hi + 1].copy() if hi >= lo else counts[:0].copy()
        if hi >= lo:
            counts[lo:hi + 1] = 0
        return span

    @njit(cache=True, nogil=True)
    def signed_peak(x, peak, value, at):
        # x (N, C) float32, peak (N,) float32 the row's largest |x|; value (N,) float32, at (N,)
        # int64: +peak if the row holds it, else -peak, and its first column; a NaN peak: the
        # row's first NaN. What max and min say: the larger of max and -min, max on a tie.
        N, C = x.shape
        for n in range(N):
            v = peak[n]
            j = 0
            if v != v:
                while j < C - 1 and x[n, j] == x[n, j]:
                    j += 1
            else:
                while j < C and x[n, j] != v:
                    j += 1
                if j == C:
                    v = -v
                    j = 0
                    while j < C - 1 and x[n, j] != v:
                        j += 1
            value[n] = v
            at[n] = j

    @njit(cache=True, nogil=True, fastmath={"reassoc"})
    def drain_dots(out, vk, p, gram, c_sq, c_dot_o, o_sq):
        # out (B, T, H, D) float32, the attention output in the kernels' memory order; vk (B, H,
        # K, D) the sink keys' values; p (B, H, T, K) their probabilities; gram (B, H, K, K) =
        # vk vk^T. c_sq, c_dot_o, o_sq (B, H, T) float32 = p gram p, p . (vk o), o . o: float32
        # sums as torch's (their order this kernel's own), one read of the output.
        B, T, H, D = out.shape
        K = vk.shape[2]
        for b in range(B):
            for t in range(T):
                for h in range(H):
                    row = out[b, t, h]
                    total = np.float32(0.0)
                    for d in range(D):
                        total += row[d] * row[d]
                    o_sq[b, h, t] = total
                    dot = np.float32(0.0)
                    square = np.float32(0.0)
                    for j in range(K):
                        v = vk[b, h, j]
                        along = np.float32(0.0)
                        for d in range(D):
                            along += row[d] * v[d]
                        pj = p[b, h, t, j]
                        dot += pj * along
                        weighted = np.float32(0.0)             # (p gram)_j
                        for i in range(K):
                            weighted += p[b, h, t, i] * gram[b, h, i, j]
                        square += weighted * pj
                    c_dot_o[b, h, t] = dot
                    c_sq[b, h, t] = square

    return SimpleNamespace(count_bins=count_bins, count_bins_below=count_bins_below,
                           count_in_bins=count_in_bins, occupied=occupied,
                           vector_norms=vector_norms, float64_sum=float64_sum, scan_rows=scan_rows,
                           signed_peak=signed_peak, drain_dots=drain_dots)


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether numba imports here (a dependency; without it, say on a Python it does not support
    yet, every metric takes its torch path: the same numbers, slower)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def usable(values: torch.Tensor) -> bool:
    """Whether these kernels take `values`: float32 on the CPU (made contiguous first), numba there."""
    return values.device.type == "cpu" and values.dtype == torch.float32 and available()


def _words(values: torch.Tensor) -> np.ndarray:
    # numpy's reshape and view cost a fraction of torch's (this runs on every event)
    return values.detach().numpy().reshape(-1).view(np.int32)                  # (n,) int32, no copy


def _ends(sizes: list[int]) -> np.ndarray:
    return np.cumsum(np.asarray(sizes, dtype=np.int64))


def bin_counts(values: torch.Tensor, sizes: list[int], bins: int) -> torch.Tensor:
    """(G, bins) int64: per group of `sizes` consecutive elements of values (float32, CPU,
    contiguous) the count of each top-16-bit bin of |value| (the sign bit masked)."""
    counts = torch.zeros(len(sizes), bins, dtype=torch.int64)
    _compiled().count_bins(_words(values), _ends(sizes), counts.numpy())
    return counts


def bin_counts_below(values: torch.Tensor, sizes: list[int], inside: tuple[tuple[int, int], ...], bins: int
                     ) -> tuple[torch.Tensor, np.ndarray]:
    """bin_counts and below_in_bins in one pass over values: ((G, bins) int64 counts, (G,
    len(inside)) int64 values below each cut inside its bin). About half the cost of the two
    passes (the second reads every value again to find the few in a cut's bin)."""
    first, cut_bin, cut_bits = _cut_table(inside, bins)
    counts = torch.zeros(len(sizes), bins, dtype=torch.int64)
    below = np.zeros((len(sizes), len(inside)), dtype=np.int64)
    _compiled().count_bins_below(_words(values), _ends(sizes), _marked(inside, bins), first, cut_bin, cut_bits,
                                 counts.numpy(), below)
    return counts, below


def vector_norms(x: torch.Tensor) -> torch.Tensor:
    """(N, H, D) float32 on the CPU -> (N, H) float64 Euclidean norms over D."""
    out = torch.empty(x.shape[:2], dtype=torch.float64)
    _compiled().vector_norms(x.detach().contiguous().numpy(), out.numpy())
    return out


def float64_sum(values: torch.Tensor) -> float:
    """The sum of values (float32 on the CPU, contiguous) in float64, in one read with no float64
    copy (torch's sum(dtype=float64) converts first: ten times slower). Summed in this kernel's
    order, the same on every call over the same elements, so two sums of unchanged values are
    equal bit for bit."""
    return float(_compiled().float64_sum(_words(values).view(np.float32)))


_scratch = threading.local()       # scan_rows' (bins,) counts, zero between calls, one per thread


def scan_rows(values: torch.Tensor, valid: np.ndarray | None, top: int, bins: int):
    """One pass over values (N, C) float32 on the CPU, contiguous: (span, lo, zero, nonfinite,
    row_max, top_word, top_at). span (hi - lo + 1,) int64: the counts of the valid rows' |value|
    bins lo .. hi, the bins from 1 to the last finite one that hold values (empty for none);
    zero: bin 0's count (zero and subnormals); nonfinite: the NaN and inf values; row_max (N,)
    float32: each row's largest |value| (NaN for a row holding one); top_word (top,) int32 and
    top_at (top,) int64: the `top` largest finite |value| bits of valid rows with their flat
    indices, largest first, ties in index order, -1 where fewer. valid: (N,) bool, None for
    every row. The counts go through a per-thread scratch that the kernel leaves zero: no
    (bins,) array is made and zeroed per call, and no scan looks for the bins holding counts."""
    N, C = values.shape
    counts = getattr(_scratch, "counts", None)
    if counts is None or len(counts) != bins:
        counts = _scratch.counts = np.zeros(bins, dtype=np.int64)
    row_max = np.empty(N, dtype=np.int32)
    top_word, top_at = np.full(top, -1, dtype=np.int32), np.zeros(top, dtype=np.int64)
    extent = np.empty(3, dtype=np.int64)
    valid = np.ones(N, dtype=np.bool_) if valid is None else valid
    span = _compiled().scan_rows(_words(values), C, valid, counts, row_max, top_word, top_at, extent)
    lo, zero, nonfinite = extent.tolist()
    return span, lo, zero, nonfinite, row_max.view(np.float32), top_word, top_at


def signed_peak(x: torch.Tensor, peak: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """((N,) float32, (N,) int64): per row of x (N, C) float32 on the CPU, given its largest
    |x| `peak` (N,), the signed value max and min name (+peak if the row holds it, else -peak;
    a NaN peak: NaN) and its first column; a row is read only up to the hit."""
    value = torch.empty(x.shape[0], dtype=torch.float32)
    at = torch.empty(x.shape[0], dtype=torch.int64)
    _compiled().signed_peak(x.detach().contiguous().numpy(), peak.detach().contiguous().numpy(),
                            value.numpy(), at.numpy())
    return value, at


def drain_dots(out: torch.Tensor, vk: torch.Tensor, p: torch.Tensor, gram: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The three dot products of anatomy's value drains (metrics/anatomy/received.py
    value_drains) in one read of the output: out (B, H, T, D) float32 on the CPU (a view of
    (B, T, H, D) memory, as the attention kernels return it, is read in place), vk (B, H, K, D),
    p (B, H, T, K), gram (B, H, K, K) -> (c_sq, c_dot_o, o_sq), each (B, H, T) float32."""
    B, H, T, _ = out.shape
    rows = out.transpose(1, 2)
    rows = rows if rows.is_contiguous() else rows.contiguous()                # (B, T, H, D)
    c_sq, c_dot_o, o_sq = (torch.empty(B, H, T, dtype=torch.float32) for _ in range(3))
    _compiled().drain_dots(rows.detach().numpy(), vk.detach().contiguous().numpy(), p.detach().contiguous().numpy(),
                           gram.detach().contiguous().numpy(), c_sq.numpy(), c_dot_o.numpy(), o_sq.numpy())
    return c_sq, c_dot_o, o_sq


def occupied(counts: np.ndarray, lo: int, hi: int) -> tuple[int, int] | None:
    """(first, last) bin in [lo, hi) of counts (bins,) int64 with a nonzero count, None if every
    one is 0: a scan from both ends, where a nonzero over every bin reads them all."""
    if not available():
        seen = np.flatnonzero(counts[lo:hi])
        return (lo + int(seen[0]), lo + int(seen[-1])) if len(seen) else None
    first, last = _compiled().occupied(counts, lo, hi)
    return None if first < 0 else (int(first), int(last))


def below_in_bins(values: torch.Tensor, sizes: list[int], inside: tuple[tuple[int, int], ...], bins: int
                  ) -> np.ndarray:
    """(G, len(inside)) int64: per group and cut (j, c) of `inside` (sorted; c a cut's bits
    strictly inside bin j), the values of bin j whose bits (sign masked) are below c."""
    first, cut_bin, cut_bits = _cut_table(inside, bins)
    out = np.zeros((len(sizes), len(inside)), dtype=np.int64)
    _compiled().count_in_bins(_words(values), _ends(sizes), first, cut_bin, cut_bits, out)
    return out


@functools.lru_cache(maxsize=64)
def _cut_table(inside: tuple[tuple[int, int], ...], bins: int):
    """The kernel's view of sorted cuts (j, c): (first cut of each bin or -1 (bins,), the cuts'
    bins (K,), the cuts' bits (K,)). Made once per set of cuts."""
    cut_bin = np.array([j for j, _ in inside], dtype=np.int32)
    cut_bits = np.array([c for _, c in inside], dtype=np.int32)
    first = np.full(bins, -1, dtype=np.int32)
    for k in range(len(inside) - 1, -1, -1):
        first[cut_bin[k]] = k
    return first, cut_bin, cut_bits


@functools.lru_cache(maxsize=64)
def _marked(inside: tuple[tuple[int, int], ...], bins: int) -> np.ndarray:
    """(bins,) uint8: 1 at the bins that hold a cut of `inside`."""
    marked = np.zeros(bins, dtype=np.uint8)
    marked[[j for j, _ in inside]] = 1
    return marked
