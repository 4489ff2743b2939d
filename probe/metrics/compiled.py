"""The numba source of the CPU kernels; metrics/kernels.py says what each computes and when
probe calls it (its Python wrappers, the only callers of `functions`).

Kept apart from those wrappers: numba's on-disk cache names each function by its line in this
file, so an edit of the wrappers no longer makes every kernel compile again.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np


@functools.lru_cache(maxsize=1)
def functions() -> SimpleNamespace:
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
