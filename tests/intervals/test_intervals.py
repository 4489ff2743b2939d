"""probe/intervals/: the bootstrap over sequences covers the truth as often as it says, pairs two
runs on the same resamples, and the t quantile of the intervals over seeds is Student's."""
from __future__ import annotations

import math

import numpy as np
import pytest

from probe.intervals import SequenceValues, intervals_of, paired, percentile_interval, resample_weights, seed_interval
from probe.intervals.bootstrap import t_quantile


def values(f_sum, f_n, m_max=None) -> SequenceValues:
    """A SequenceValues of one attention layer and one head from per-sequence sums and counts."""
    S = len(f_n)
    return SequenceValues(S, [0], [0], np.asarray(f_sum, float).reshape(S, 1, 1), np.asarray(f_n, float).reshape(S, 1),
                          np.zeros((S, 1)), None, None, None, {},
                          np.full((S, 1, 4), np.nan) if m_max is None else np.asarray(m_max, float).reshape(S, 1, 4),
                          np.zeros(S), np.zeros(S))


def test_the_95_percent_interval_of_a_pooled_ratio_covers_the_truth_93_to_97_percent_of_the_time():
    """1000 synthetic runs of 40 sequences: each has its own number of queries (20-60) and a
    per-query probability on key 0 drawn around a known mean, so the pooled F-Attn (a ratio of
    sums over sequences) has the population value MU. The interval is computed as for a run."""
    rng = np.random.default_rng(2026)
    MU, S, covered = 0.3, 40, 0
    for draw in range(1000):
        n = rng.integers(20, 61, S).astype(float)
        p = rng.beta(3.0, 7.0, S)                        # mean 0.3, independent of n
        v = values(n * p, n)
        _, lo, hi = intervals_of(v, v.f_attn, 1000, seed=draw)
        covered += bool(lo <= MU <= hi)
    assert 0.93 <= covered / 1000 <= 0.97, covered


def test_the_point_is_the_pooled_ratio_not_a_mean_of_per_sequence_means():
    v = values([1.0, 30.0], [10.0, 100.0])
    point, _, _ = intervals_of(v, v.f_attn, 10)
    assert point == pytest.approx(31.0 / 110.0, rel=1e-12)          # not (0.1 + 0.3) / 2


def test_resamples_draw_every_sequence_count_and_are_fixed_by_the_seed():
    W = resample_weights(7, 500)
    assert W.shape == (500, 7) and (W.sum(1) == 7).all()
    assert np.array_equal(W, resample_weights(7, 500))
    assert not np.array_equal(W, resample_weights(7, 500, seed=1))
    assert abs(W.mean() - 1.0) < 0.05


def test_too_few_sequences_or_no_resamples_give_no_interval():
    v = values([1.0], [10.0])
    point, lo, hi = intervals_of(v, v.f_attn, 1000)
    assert point == pytest.approx(0.1) and math.isnan(lo) and math.isnan(hi)
    v = values([1.0, 2.0], [10.0, 10.0])
    assert math.isnan(intervals_of(v, v.f_attn, 0)[1])


def test_the_bootstrap_of_a_maximum_never_exceeds_the_largest_value_seen():
    """The documented bias: M-Act's upper end is the observed maximum when one sequence holds it."""
    m = np.ones((30, 1, 4))
    m[:, 0, 3] = np.arange(30.0)
    v = values(np.ones(30), np.ones(30), m)
    point, lo, hi = intervals_of(v, v.m_act, 1000)
    assert point == 29.0 and hi == 29.0 and lo < 29.0


def test_paired_differences_share_the_resamples_and_keep_common_difficulty_out():
    """Two runs on the same sequences whose per-sequence F-Attn moves together: the paired
    interval of the difference is far narrower than one from independent resamples, and holds
    the true difference."""
    rng = np.random.default_rng(0)
    n = np.full(50, 40.0)
    hard = rng.uniform(0.1, 0.6, 50)                    # shared per-sequence level
    a, b = values(n * hard, n), values(n * (hard - 0.05 + rng.normal(0, 0.005, 50)), n)
    out = paired(a, b, lambda v, W: v.f_attn(W), 1000)
    point, lo, hi = out["difference"]
    assert point == pytest.approx(a.f_attn(np.ones((1, 50)))[0] - b.f_attn(np.ones((1, 50)))[0])
    assert lo < 0.05 < hi and hi - lo < 0.01
    Wa, Wb = resample_weights(50, 1000, 1), resample_weights(50, 1000, 2)
    unpaired = percentile_interval(a.f_attn(Wa) - b.f_attn(Wb))
    assert unpaired[1] - unpaired[0] > 5 * (hi - lo)
    ratio = out["ratio"]
    assert ratio[1] <= ratio[0] <= ratio[2]
    with pytest.raises(ValueError, match="same sequences"):
        paired(a, values(n[:10], n[:10]), lambda v, W: v.f_attn(W), 10)


@pytest.mark.parametrize("df, textbook", [(1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042),
                                          (1000, 1.962)])
def test_the_t_quantile_is_students(df, textbook):
    assert t_quantile(0.975, df) == pytest.approx(textbook, abs=1e-3)


def test_intervals_over_seeds_are_t_intervals_of_the_per_seed_values():
    mean, lo, hi, sd = seed_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and sd == pytest.approx(1.0)
    assert hi - mean == pytest.approx(4.303 / math.sqrt(3), abs=1e-3)
    assert math.isnan(seed_interval([1.0])[1]) and seed_interval([1.0])[0] == 1.0


def test_windows_of_one_document_are_drawn_together():
    """1000 synthetic runs of 80 documents cut into 2 windows each: the windows of a document
    share its probability on key 0 (drawn around MU), so they are one draw, not two. The
    bootstrap over documents covers MU 93-97% of the time; over windows as if independent (the
    first 300 runs) it covers far less: its interval is too narrow by about sqrt(2)."""
    rng = np.random.default_rng(21)
    MU, D, K = 0.3, 80, 2
    documents = np.repeat(np.arange(D), K)
    covered = {"documents": 0, "sequences": 0}
    for draw in range(1000):
        n = rng.integers(20, 61, D * K).astype(float)
        p = np.repeat(rng.beta(3.0, 7.0, D), K)
        for how, labels in (("documents", documents), ("sequences", None))[:1 if draw >= 300 else 2]:
            v = values(n * p, n)
            v.documents = labels
            _, lo, hi = intervals_of(v, v.f_attn, 500, seed=draw)
            covered[how] += bool(lo <= MU <= hi)
    assert 0.93 <= covered["documents"] / 1000 <= 0.97, covered
    assert covered["sequences"] / 300 < 0.88, covered


def test_document_weights_repeat_each_drawn_document_over_its_sequences():
    labels = np.array([5, 5, 2, 9, 9, 9])
    W = resample_weights(6, 300, clusters=labels)
    assert W.shape == (300, 6)
    assert (W[:, 0] == W[:, 1]).all() and (W[:, 3] == W[:, 4]).all() and (W[:, 4] == W[:, 5]).all()
    assert (W[:, [0, 2, 3]].sum(1) == 3).all()                 # 3 documents drawn per resample
    one = values([1.0, 2.0], [10.0, 10.0])
    one.documents = np.array([0, 0])                            # one document: nothing to resample
    assert math.isnan(intervals_of(one, one.f_attn, 100)[1])


def test_fewer_resamples_than_the_interval_needs_give_no_interval():
    """Issue 37 #5: --resamples 1 gave a "95% interval" of width 0 that excluded the estimate;
    below MIN_RESAMPLES there is no interval, and summary.json says why."""
    from probe.intervals import describe
    from probe.intervals.bootstrap import MIN_RESAMPLES

    v = values([1.0, 5.0, 2.0, 8.0], [10.0, 10.0, 10.0, 10.0])
    for resamples in (1, 2, MIN_RESAMPLES - 1):
        point, lo, hi = intervals_of(v, v.f_attn, resamples)
        assert point == pytest.approx(0.4) and math.isnan(lo) and math.isnan(hi), resamples
        assert "resamples" in describe(v, resamples)["why_none"]
    point, lo, hi = intervals_of(v, v.f_attn, MIN_RESAMPLES)
    assert lo <= point <= hi and lo < hi


def test_resamples_that_would_not_fit_in_memory_are_refused_before_drawing():
    """Issue 37 #11: the resampling weights are (resamples, sequences) float64; a size beyond the
    bound is refused in one line instead of asking for tens of GiB."""
    from probe import ProbeError

    with pytest.raises(ProbeError, match="resamples"):
        resample_weights(4, 1_000_000_000)
    with pytest.raises(ProbeError, match="resamples"):
        resample_weights(10_000_000, 1000)
