"""probe/metrics/kernels.py: the compiled CPU binning gives the torch path's counts, bit for bit
(per group, the non-finite apart, below cuts inside a bin, two cuts in one bin), on any layout of
the values, and `occupied` finds the bins that torch's nonzero finds."""
from __future__ import annotations

import math
import sys

import pytest
import torch

from probe.metrics import bins as binning
from probe.metrics import kernels
from probe.metrics.bins import Bins
from probe.metrics.reducers import cut_bits, float32_value

# Cuts strictly inside bins, one on a bin edge, and two pairs that share a bin.
THRESHOLDS = (1e-3, 1e-2, 0.1, 0.5, 2.0 ** -7, 0.3, 0.3001, 7.0, 7.001)


def values(seed: int, shape=(6, 50, 4, 16)) -> torch.Tensor:
    """Log-spread magnitudes of both signs, the cuts and their neighbours, zeros, subnormals,
    NaN and inf."""
    g = torch.Generator().manual_seed(seed)
    x = torch.exp(torch.empty(shape).uniform_(-14, 3, generator=g))
    x *= torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    flat = x.view(-1)
    cuts = torch.tensor([float32_value(cut_bits(t)) for t in THRESHOLDS])
    n = len(cuts)
    flat[:n] = cuts
    flat[n:2 * n] = torch.nextafter(cuts, torch.zeros(()))
    flat[2 * n:3 * n] = -cuts
    flat[100:107] = torch.tensor([0.0, -0.0, 1e-42, -1e-44, float("nan"), float("-inf"), float("inf")])
    return x


def torch_path(monkeypatch, x, sizes):
    with monkeypatch.context() as m:
        m.setattr(kernels, "usable", lambda values: False)
        return Bins(x, sizes)


@pytest.mark.parametrize("sizes", [None, [6], [1, 2, 0, 3], [1] * 6])
@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_bins_are_the_torch_bins(monkeypatch, sizes, seed):
    x = values(seed)
    compiled, reference = Bins(x, sizes), torch_path(monkeypatch, x, sizes)
    assert compiled.compiled and not reference.compiled
    assert torch.equal(compiled.counts, reference.counts)
    assert torch.equal(compiled.nonfinite, reference.nonfinite)
    cuts = [cut_bits(t) for t in THRESHOLDS]
    assert torch.equal(compiled.below(cuts), reference.below(cuts))
    # A later reader with other cuts: the ones already counted are read back, the others counted.
    more = [cut_bits(t) for t in (1e-2, 3e-5, 7.001)]
    assert torch.equal(compiled.below(more), reference.below(more))


@pytest.mark.parametrize("sizes", [None, [1, 2, 0, 3]])
def test_cuts_known_at_binning_are_counted_in_the_same_pass(monkeypatch, sizes):
    """Bins(values, sizes, cuts): the counts and the values below each cut those of the torch
    path, without the second pass for those cuts; a cut it was not told of still gets one."""
    x = values(5)
    cuts = tuple(cut_bits(t) for t in THRESHOLDS)
    reference = torch_path(monkeypatch, x, sizes)
    passes = []
    real = kernels.below_in_bins
    monkeypatch.setattr(kernels, "below_in_bins", lambda *a: passes.append(a[2]) or real(*a))
    fused = Bins(x, sizes, cuts)
    assert torch.equal(fused.counts, reference.counts) and torch.equal(fused.nonfinite, reference.nonfinite)
    assert torch.equal(fused.below(list(cuts)), reference.below(list(cuts))) and passes == []
    other = [cut_bits(3e-5)]
    assert torch.equal(fused.below(other), reference.below(other)) and len(passes) == 1


def test_below_is_the_comparison_per_group():
    """Independent of the torch path: |x| < value(cut), counted by torch comparisons per group."""
    x = values(2)
    sizes = [2, 1, 3]
    cuts = [cut_bits(t) for t in THRESHOLDS]
    below = Bins(x, sizes).below(cuts)
    a = x.abs()
    for g, rows in enumerate(a.split(sizes)):
        assert below[g].tolist() == [int((rows < float32_value(c)).sum()) for c in cuts]


def test_any_layout_is_binned_as_its_values():
    x = values(3).transpose(1, 2)                        # not contiguous: binned from a copy
    assert torch.equal(Bins(x).counts, Bins(x.contiguous()).counts)
    assert Bins(x[..., ::2]).compiled                    # a strided last dim too


def test_not_compiled_where_it_does_not_apply():
    assert not Bins(values(4).bfloat16()).compiled       # bfloat16 values are their own bins
    assert not Bins(torch.zeros(0, 3)).compiled          # nothing to bin


@pytest.mark.parametrize("where", [[], [1], [5, 9], [1, 0x7F7F], [0x7F7F]])
def test_occupied_is_nonzero_from_both_ends(where):
    counts = torch.zeros(binning.BINS, dtype=torch.int64)
    counts[0] = 3                                        # outside [lo, hi): never reported
    counts[0x7F80] = 2
    counts[where] = 1
    found = kernels.occupied(counts.numpy(), 1, binning.NONFINITE)
    assert found == ((min(where), max(where)) if where else None)
    kernels.available.cache_clear()
    try:                                     # without numba: numpy's nonzero, the same bins
        with pytest.MonkeyPatch.context() as m:
            m.setitem(sys.modules, "numba", None)
            assert not kernels.available()
            assert kernels.occupied(counts.numpy(), 1, binning.NONFINITE) == found
            x = values(7)
            assert not Bins(x).compiled
    finally:
        kernels.available.cache_clear()


def test_vector_norms_are_the_float64_norms():
    """Against torch's float64 norm of the same vectors: equal within float64 rounding (the sum's
    order is the kernel's own), NaN and inf where they reach the norm, on any layout."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, 6, 64, generator=g) * torch.logspace(-20, 20, 40)[:, None, None]
    x[3, 2, 7], x[5, 1, 0], x[6, 0, 1] = float("nan"), float("inf"), 0.0
    x[7] = 0.0
    want = torch.linalg.vector_norm(x.double(), dim=-1)
    got = kernels.vector_norms(x)
    assert torch.isnan(got[3, 2]) and torch.isinf(got[5, 1]) and float(got[7].abs().max()) == 0.0
    for layout in (x, x.transpose(0, 1).contiguous().transpose(0, 1), x[:, :, ::2].contiguous()):
        got = kernels.vector_norms(layout)
        ref = want if layout.shape[-1] == 64 else torch.linalg.vector_norm(layout.double(), dim=-1)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, ref, rtol=1e-15, atol=0, equal_nan=True)


def test_float64_sum_is_the_float64_sum():
    """Against torch's float64 sum: equal within float64 rounding (the order is the kernel's own),
    the same bits on every call, NaN or inf where one is there, and no overflow past float32's
    largest values."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 517, 9, 7, generator=g) * torch.logspace(-20, 20, 517)[None, :, None, None]
    want = float(x.sum(dtype=torch.float64))
    got = kernels.float64_sum(x)
    assert got == pytest.approx(want, rel=1e-12, abs=0) and got != float(x.sum())
    assert kernels.float64_sum(x.clone()) == got                       # bit for bit, any memory
    big = torch.full((1000,), torch.finfo(torch.float32).max)
    assert kernels.float64_sum(big) == pytest.approx(1000 * float(big[0]), rel=1e-12)
    assert kernels.float64_sum(torch.zeros(0)) == 0.0
    for bad, check in (("nan", math.isnan), ("inf", math.isinf), ("-inf", math.isinf)):
        y = x.clone()
        y[2, 400, 3, 1] = float(bad)
        assert check(kernels.float64_sum(y)), bad


def _batch(valid):
    from probe.capture.bus import Batch
    B, T = valid.shape
    return Batch(torch.arange(B * T).reshape(B, T) % 11, valid, torch.arange(B) * 3 + 1)


@pytest.mark.parametrize("padded", [False, True])
def test_row_scan_is_max_min_bins_and_topk(padded):
    """bins.RowScan against torch on the same h: each row's largest |h| is torch.maximum(amax,
    -amin) (NaN rows too), the counts are Bins' over the valid rows, the top entries are the
    largest finite |h| of valid rows, ties in memory order (a stable sort)."""
    g = torch.Generator().manual_seed(8)
    B, T, C = 3, 7, 20
    h = torch.randint(-6, 7, (B, T, C), generator=g).float() * 0.5          # many ties
    h[0, 2, 5], h[1, 4, 0] = float("nan"), float("inf")
    h[2, 6] = 0.0
    h[2, 6, 3] = -0.0
    h[1, 1, 9] = -40.0                                                        # the largest, negative
    valid = torch.ones(B, T, dtype=torch.bool)
    if padded:
        valid[1, 5:] = False
        valid[2, 2:] = False
        h[2, 4, 0] = 99.0                                                     # padding: not in the top
    b = _batch(valid)
    scan = binning.RowScan(h, b)
    want = torch.maximum(h.amax(2), -h.amin(2))                              # (B, T)
    assert torch.equal(torch.nan_to_num(scan.row_max, nan=-1.0), torch.nan_to_num(want, nan=-1.0))
    assert torch.isnan(scan.row_max[0, 2]) and scan.row_max[1, 1] == 40.0
    ref = Bins(b.rows(h))
    assert torch.equal(torch.from_numpy(scan.counts()), ref.counts[0])
    assert scan.nonfinite == int(ref.nonfinite.sum()) and scan.numel == b.rows(h).numel()
    a = h.abs().reshape(-1)
    keep = valid[..., None].expand(B, T, C).reshape(-1) & torch.isfinite(a)
    order = torch.argsort(-a.masked_fill(~keep, -1.0), stable=True)[:binning.RowScan.TOP]
    assert [i for _, i in scan.top] == order.tolist()
    assert [float32_value(w) for w, _ in scan.top] == a[order].tolist()


@pytest.mark.parametrize("case", ["subnormal", "all zero", "all nonfinite", "no valid row", "wide"])
def test_row_scan_span_is_every_bin_and_leaves_its_scratch_zero(case):
    """The bins RowScan hands over (span from lo, bin 0 apart, the non-finite counted) are Bins'
    counts, whatever the values: bin 0 only, nothing finite, no valid row, values over the whole
    float32 range (subnormal to the largest finite, beside inf); the kernel's scratch is zero
    after each scan, so the next scan counts only its own values."""
    g = torch.Generator().manual_seed(10)
    B, T, C = 2, 5, 16
    h = torch.randn(B, T, C, generator=g)
    valid = torch.ones(B, T, dtype=torch.bool)
    if case == "subnormal":
        h[0, 0, :4] = torch.tensor([1e-45, -1e-40, 0.0, -0.0])
    elif case == "all zero":
        h = torch.zeros(B, T, C)
    elif case == "all nonfinite":
        h = torch.full((B, T, C), float("inf"))
        h[1] = float("nan")
    elif case == "no valid row":
        valid[:] = False
    else:
        h[0, 0, :4] = torch.tensor([1e-45, 3.4e38, -float("inf"), 1e-38])
    b = _batch(valid)
    first = binning.RowScan(h, b)
    ref = Bins(b.rows(h)) if valid.any() else None
    want = ref.counts[0] if ref is not None else torch.zeros(binning.BINS, dtype=torch.int64)
    assert torch.equal(torch.from_numpy(first.counts()), want)
    assert first.nonfinite == (int(ref.nonfinite.sum()) if ref is not None else 0)
    assert first.span[0] > 0 and first.span[-1] > 0 if len(first.span) else int(want[1:].sum()) == 0
    assert not kernels._scratch.counts.any()
    again = binning.RowScan(torch.ones(1, 1, 3), _batch(torch.ones(1, 1, dtype=torch.bool)))
    assert again.lo == 0x3F80 and again.span.tolist() == [3] and again.zero == 0


def test_signed_peak_is_what_max_and_min_name():
    """kernels.signed_peak against token_series' torch path: the larger of max and -min (max on a
    tie), its first column; ties, signed zeros, a NaN row, rows of -inf and of +-inf."""
    from probe.metrics.token_series.reduce import first_at

    g = torch.Generator().manual_seed(9)
    x = torch.randint(-3, 4, (40, 96), generator=g).float()
    x[2, 50], x[2, 9] = float("nan"), float("nan")
    x[4] = 0.0
    x[4, 17] = -0.0
    x[5, 30:] = float("-inf")
    x[6, 10], x[6, 20] = float("-inf"), float("inf")
    x[7] = -2.0
    x[7, 60] = 2.0                                                            # +-peak: max's
    top, bottom = x.amax(1), x.amin(1)
    high = top >= -bottom
    want = torch.where(high, top, bottom)
    value, at = kernels.signed_peak(x, torch.maximum(top, -bottom))
    assert torch.equal(at, first_at(x, want))
    assert torch.equal(torch.nan_to_num(value, nan=7.0), torch.nan_to_num(want, nan=7.0))
    assert at[7] == 60 and at[2] == 9


def test_sized_for_takes_the_kernels_for_large_work_only():
    x = values(5)
    counts = torch.zeros(binning.BINS, dtype=torch.int64)
    counts[[3, 700]] = 1
    assert kernels.usable(x)                                   # outside any analysis: the kernels
    with kernels.sized_for(kernels.MIN_VALUES - 1):
        assert not kernels.usable(x) and not Bins(x).compiled
        assert kernels.occupied(counts.numpy(), 1, binning.NONFINITE) == (3, 700)   # numpy's scan
        with kernels.sized_for(kernels.MIN_VALUES):            # nested: its own, then restored
            assert kernels.usable(x) and Bins(x).compiled
        assert not kernels.usable(x)
        with kernels.sized_for(None):                          # work unknown: the kernels
            assert kernels.usable(x)
    assert kernels.usable(x)
    with kernels.sized_for(0):
        small = Bins(x)
    large = Bins(x)
    assert not small.compiled and large.compiled
    assert torch.equal(small.counts, large.counts)
