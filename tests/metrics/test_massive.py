"""probe/metrics/massive/reduce.py: M-Act from the compiled scan of an event (MaxAbsStats.add_scan)
holds what the torch path (MaxAbsStats.update) holds on the same events: the top entries with
where they sit, the counts, the histogram; ties at the k-th value and non-finite values take the
torch path."""
from __future__ import annotations

import pytest
import torch

from probe.capture.bus import Batch
from probe.metrics import bins as binning
from probe.metrics.massive.reduce import MaxAbsStats


def events(seed: int):
    """(h (B, T, C), Batch): padding, a tie at the third value, a NaN event, signed zeros."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for e in range(6):
        B, T, C = 2, 9, 12
        h = torch.randn(B, T, C, generator=g) * 3
        valid = torch.ones(B, T, dtype=torch.bool)
        if e % 2:
            valid[1, 6:] = False
            h[1, 7, 2] = 500.0                              # padding never reaches the top
        if e == 2:                                          # the 2nd, 3rd and 4th largest tie
            h[1, 3, 4], h[0, 8, 1], h[0, 2, 7] = 60.0, -60.0, 60.0
            h[1, 0, 0] = 70.0
        if e == 3:
            h[0, 4, 4] = float("nan")
        if e == 4:
            h[0] = 0.0
            h[0, 1, 1] = -0.0
        ids = torch.randint(0, 50, (B, T), generator=g)
        out.append((h, Batch(ids, valid, torch.tensor([2 * e, 2 * e + 1]))))
    return out


@pytest.mark.parametrize("k", [1, 3])
def test_the_scan_holds_what_the_torch_path_holds(k):
    scanned, reference = MaxAbsStats(k), MaxAbsStats(k)
    took = []
    for h, b in events(0):
        took.append(scanned.add_scan(binning.RowScan(h, b), b))
        if not took[-1]:
            scanned.update(b.rows(h), *b.where(h.device))
        reference.update(b.rows(h), *b.where(h.device))
    assert took[0] and not took[3]                          # a NaN: the torch path
    if k == 3:
        assert not took[2]                                  # the tie at the third value
    assert scanned.top == reference.top
    assert int(scanned.count) == int(reference.count) and int(scanned.nonfinite) == int(reference.nonfinite)
    assert torch.equal(scanned.hist.counts, reference.hist.counts)
    assert scanned.median_abs() == reference.median_abs() and scanned.max_abs() == reference.max_abs()


def test_an_analysis_takes_the_scan_and_agrees_with_the_torch_path(monkeypatch):
    """The Massive metric's event handler: the compiled scan by default, the torch path with the
    kernels switched off, the same top entries and medians."""
    from probe.metrics import kernels
    from probe.metrics.massive.reduce import Massive

    def run():
        metric = Massive.__new__(Massive)
        metric.stats = {(0, "resid_post"): MaxAbsStats(Massive.TOP_K)}
        update = metric._updater("resid_post")
        for h, b in events(1):
            update(0, h, b)
        return metric.stats[(0, "resid_post")]

    calls = []
    real = MaxAbsStats.add_scan
    monkeypatch.setattr(MaxAbsStats, "add_scan", lambda self, s, b: calls.append(1) or real(self, s, b))
    fast = run()
    assert len(calls) == 6
    monkeypatch.setattr(kernels, "usable", lambda values: False)
    slow = run()
    assert len(calls) == 6                                  # no scan without the kernels
    assert fast.top == slow.top and torch.equal(fast.hist.counts, slow.hist.counts)
