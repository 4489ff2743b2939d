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
Compiled code (probe/metrics/compiled.py) is cached in this folder (or in numba's user cache
when the package folder is read-only; NUMBA_CACHE_DIR elsewhere), so only the first analysis on
a machine pays for the compilation (about 0.5 s). Loading it in a new process still costs about
0.4 s (numba's import and each kernel's first call), more than the kernels save on a small
analysis: probe.analyze takes them for an analysis of at least MIN_VALUES activation values only
(`sized_for`), the torch path below that (a tiny model on a few sequences: `probe analyze` of
the quickstart answers 0.45 s sooner).
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import threading

import numpy as np
import torch

from .compiled import functions as _compiled


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether numba imports here (a dependency; without it, say on a Python it does not support
    yet, every metric takes its torch path: the same numbers, slower)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


# The least work, in activation values (tokens x hidden size x layers), for which an analysis
# takes the kernels. On SmolLM2, in a warm process, they save 0.04 s of a 16-token analysis and
# 0.07-0.15 s at 128-512 tokens; a new process pays ~0.4 s to load numba and them
# (benchmarks/kernel_choice.py). 2**20: a tiny model on a few sequences (the quickstart: 1024
# tokens x 128 x 4 layers) keeps the torch path; SmolLM2 from 64 tokens on takes the kernels.
MIN_VALUES = 1 << 20
_WANTED = contextvars.ContextVar("probe_compiled_kernels", default=True)


@contextlib.contextmanager
def sized_for(values: int | None):
    """Within: the kernels only where the work is at least MIN_VALUES activation values (values:
    the analysis's tokens x hidden size x layers; None: unknown, the kernels). Both paths give
    the same counts; float sums (head norms, anatomy's drains) agree to their rounding."""
    token = _WANTED.set(values is None or values >= MIN_VALUES)
    try:
        yield
    finally:
        _WANTED.reset(token)


def wanted() -> bool:
    """Whether the kernels are wanted here (sized_for) and numba imports."""
    return _WANTED.get() and available()


def usable(values: torch.Tensor) -> bool:
    """Whether these kernels take `values`: float32 on the CPU (made contiguous first), numba
    there, and wanted for this work (sized_for)."""
    return values.device.type == "cpu" and values.dtype == torch.float32 and wanted()


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
    if not wanted():
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
