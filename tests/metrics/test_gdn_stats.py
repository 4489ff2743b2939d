"""probe/metrics/gdn/stats.py TokenStats against a direct per-group computation (numpy, float64)
on random values with NaNs, over two batches: counts, means, std, min, max, the shares below and
above the thresholds, the histograms, and the tokens written in hardest."""
from __future__ import annotations

import math

import numpy as np
import torch

from probe.metrics.gdn import QUANTITIES
from probe.metrics.gdn.stats import BINS, HIGH, LOW, RANGES, TOP, TokenStats


def _batch(seed: int, N: int = 37, H: int = 3, D: int = 5):
    gen = torch.Generator().manual_seed(seed)
    gate = torch.randn(N, H, D, generator=gen) * 2
    gate[3, 1, 2] = math.nan                                            # a NaN in the model
    beta = torch.rand(N, H, 1, generator=gen)
    decay = torch.rand(N, H, 1, generator=gen)
    g = decay[..., 0].log()
    member = torch.stack([torch.ones(N, dtype=torch.bool), torch.arange(N) == 0, torch.arange(N) >= 1,
                          torch.rand(N, generator=gen) < 0.3])
    where = (torch.full((N,), seed), torch.arange(N), torch.randint(0, 50, (N,), generator=gen))
    return {"gate_silu": gate, "beta": beta, "decay": decay}, g, member, where


def test_token_stats_equal_a_direct_computation():
    batches = [_batch(0), _batch(1)]
    stats = TokenStats(groups=4, heads=3)
    for values, g, member, where in batches:
        stats.update(values, g, member, where)
    for qi, name in enumerate(QUANTITIES):
        got = stats.metrics(qi)
        for gi in range(4):
            for h in range(3):
                x = np.concatenate([v[name][m[gi]][:, h].reshape(-1).numpy().astype(np.float64)
                                    for v, _, m, _ in batches])
                x = x[np.isfinite(x)]
                assert got["count"][gi, h] == len(x)
                np.testing.assert_allclose(got["mean"][gi, h], x.mean(), rtol=1e-12)
                np.testing.assert_allclose(got["std"][gi, h], x.std(), rtol=1e-9, atol=1e-12)
                assert got["min"][gi, h] == x.min() and got["max"][gi, h] == x.max()
                for t in LOW:
                    np.testing.assert_allclose(got[f"frac_lt_{t}"][gi, h], (np.abs(x) < t).mean(), rtol=1e-12)
                for t in HIGH:
                    np.testing.assert_allclose(got[f"frac_gt_{t}"][gi, h], (x > t).mean(), rtol=1e-12)
        lo, hi = RANGES[name]
        for h in range(3):
            x = torch.cat([v[name][:, h].reshape(-1) for v, *_ in batches])
            x = x[torch.isfinite(x)]
            want = ((x - lo) / (hi - lo) * BINS).floor().clamp(0, BINS - 1).long().bincount(minlength=BINS)
            assert torch.equal(stats.hist[qi, h], want)
    beta = torch.cat([v["beta"][..., 0] for v, *_ in batches])                # (2N, H)
    for h in range(3):
        assert [round(c[0], 7) for c in stats.top[h]] == [round(float(b), 7) for b in beta[:, h].topk(TOP).values]
    assert int(stats.nonfinite) == 2
