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


def test_mean_g_and_half_life_equal_a_direct_computation():
    """The decay's mean_g and half_life per group and value head against numpy, float64, over two
    batches: mean_g the mean of the log decay g over the group's tokens (a token whose decay is
    NaN, and so its g, left out of both the sum and the count), half_life = ln 0.5 / mean_g, in
    tokens: positive, as g < 0 (exp(g) in (0, 1)). 1e-12 relative. Only the decay has them."""
    batches = [_batch(2), _batch(3)]
    values, g, _, _ = batches[1]
    values["decay"][5, 2, 0] = math.nan                                  # a NaN decay: its g is NaN
    g[5, 2] = math.nan
    stats = TokenStats(groups=4, heads=3)
    for values, g, member, where in batches:
        stats.update(values, g, member, where)
    qi = QUANTITIES.index("decay")
    got = stats.metrics(qi)
    assert all("mean_g" not in stats.metrics(i) and "half_life" not in stats.metrics(i)
               for i in range(len(QUANTITIES)) if i != qi)
    checked = 0
    for gi in range(4):
        for h in range(3):
            x = np.concatenate([g[m[gi]][:, h].numpy().astype(np.float64) for _, g, m, _ in batches])
            x = x[np.isfinite(x)]
            mean_g = x.mean()
            assert mean_g < 0
            np.testing.assert_allclose(got["mean_g"][gi, h], mean_g, rtol=1e-12, atol=0)
            np.testing.assert_allclose(got["half_life"][gi, h], math.log(0.5) / mean_g, rtol=1e-12, atol=0)
            assert got["half_life"][gi, h] > 0
            checked += 1
    assert checked == 12 and int(stats.count[qi, 0, 2]) == 2 * 37 - 1     # the NaN token left out
