"""probe/metrics/bins.py: per-group counts below each cut equal direct comparisons |x| < value(cut) on
each group's values (NaN and inf never below), the groups sum to one histogram of all values,
and a LogHistogram fed the shared bins holds what one fed the tensor holds."""
from __future__ import annotations

import pytest
import torch

from probe.metrics.bins import Bins, batch_bins
from probe.capture.bus import Batch
from probe.metrics.reducers import LogHistogram, cut_bits, float32_value
from probe.metrics.sparsity import HEADLINE_THRESHOLDS

THRESHOLDS = (*HEADLINE_THRESHOLDS, 2.0 ** -7, 0.5, 3.0)      # 2^-7: a cut on a bin edge


def values(dtype, seed=0) -> torch.Tensor:
    """(5, 7, 3, 8): log-spread magnitudes around the cuts, values exactly at the cuts, zeros,
    -0.0, NaN and inf."""
    g = torch.Generator().manual_seed(seed)
    x = torch.exp(torch.empty(5, 7, 3, 8).uniform_(-12, 2, generator=g))
    x *= torch.where(torch.rand(x.shape, generator=g) < 0.5, -1.0, 1.0)
    flat = x.view(-1)
    cuts = torch.tensor([float32_value(cut_bits(t)) for t in THRESHOLDS])
    flat[:len(cuts)] = cuts
    flat[len(cuts):2 * len(cuts)] = torch.nextafter(cuts, torch.zeros(()))
    flat[40:44] = torch.tensor([0.0, -0.0, float("nan"), float("-inf")])
    flat[300] = float("inf")
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_group_counts_are_comparisons(dtype):
    x = values(dtype)
    valid = torch.ones(5, 7, dtype=torch.bool)
    valid[1, 4:] = False
    valid[3, :] = False                                    # a row with no valid position
    b = Batch(torch.zeros(5, 7, dtype=torch.long), valid, torch.arange(5))
    bins = batch_bins(x, b)
    assert batch_bins(x, b) is bins                        # once per tensor
    cuts = [cut_bits(t) for t in THRESHOLDS]
    below, finite = bins.below(cuts), bins.finite()
    a = x.float().abs()
    for row in range(5):
        r = a[row][valid[row]]
        expected = [int((r < float32_value(c)).sum()) for c in cuts]
        assert below[row].tolist() == expected, (row, dtype)
        assert int(finite[row]) == int(torch.isfinite(r).sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_histogram_from_shared_bins(dtype):
    x = values(dtype, seed=1)
    one, grouped = LogHistogram(cuts=THRESHOLDS), LogHistogram(cuts=THRESHOLDS)
    one.update(x)
    grouped.add(Bins(x, [1, 3, 1]))
    for name, value in one.state_tensors().items():
        assert torch.equal(value, grouped.state_tensors()[name]), name
    assert one.share_below(1e-2) == grouped.share_below(1e-2)
