"""Property-based tests of the streaming reducers (hypothesis).

For random batches, including empty batches, all-masked rows, single-token sequences, extreme
values (float32 limits, subnormals, exact ties) and NaN/inf:
- feeding the batches one by one, or merging per-batch reducers in any grouping and order,
  gives the same state (exactly for counts and extremes, to float64 rounding for sums);
- the results agree with a direct computation over all the data at once, finite values only.
"""
from __future__ import annotations

import math
from functools import reduce

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from probe.metrics.first_token.reduce import FirstTokenStats
from probe.metrics.gates.reduce import GateStats
from probe.metrics.loss.reduce import LossStats
from probe.metrics.massive.reduce import MaxAbsStats
from probe.metrics.sparsity.reduce import SparsityStats
from probe.metrics.reducers import LogHistogram
from probe.metrics.token_types.reduce import TokenGroupGateStats

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# float32 values: mostly ordinary ones, plus the extremes hypothesis likes (0, subnormals, 3.4e38,
# inf, NaN) and a small pool of repeated values so that ties happen.
ANY32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
VALUES = st.one_of(st.floats(-10, 10, width=32), ANY32, st.sampled_from([0.0, 1.0, 2.5, -2.5]))
SCORES = st.one_of(st.floats(0, 1, width=32), ANY32, st.sampled_from([0.0, 0.5, 1.0]))


def batches_of(shape_tail, elements, max_batches=4, max_rows=5):
    """A list of float32 arrays (n_i, *shape_tail), n_i may be 0."""
    return st.lists(st.integers(0, max_rows).flatmap(
        lambda n: arrays(np.float32, (n, *shape_tail), elements=elements)), min_size=0, max_size=max_batches)


def groupings(n):
    """Orders and groupings to merge n reducers: left fold, right fold, reversed, interleaved."""
    idx = list(range(n))
    return [("left", idx), ("reversed", idx[::-1]), ("odd-even", idx[1::2] + idx[::2])]


def merged(make, feed, batches, order, right=False):
    parts = []
    for i in order:
        r = make()
        feed(r, batches[i])
        parts.append(r)
    if not parts:
        return make()
    if right:
        return reduce(lambda acc, r: r.merge(acc), parts[::-1])
    return reduce(lambda acc, r: acc.merge(r), parts)


def sequential(make, feed, batches):
    r = make()
    for b in batches:
        feed(r, b)
    return r


def assert_same_state(a, b, scale: float):
    """Counts and extremes exactly; float64 sums to rounding relative to the data's magnitude."""
    for name, x in a.state_tensors().items():
        y = b.state_tensors()[name]
        if x.dtype.is_floating_point and name in getattr(a, "summed", ()):
            tol = 1e-9 * scale
            assert torch.allclose(x, y, rtol=1e-9, atol=tol, equal_nan=True), (name, x, y)
        else:
            assert torch.equal(x, y) or torch.allclose(x, y, equal_nan=True, rtol=0, atol=0), (name, x, y)


def all_merges_agree(make, feed, batches, scale):
    reference = sequential(make, feed, batches)
    for label, order in groupings(len(batches)):
        for right in (False, True):
            assert_same_state(reference, merged(make, feed, batches, order, right), scale)
    return reference


def magnitude(batches, power=1) -> float:
    """Sum of |finite value|^power over all batches: the scale of float64 rounding in sums."""
    total = 0.0
    for b in batches:
        x = np.abs(b[np.isfinite(b)].astype(np.float64))
        total += float((x ** power).sum())
    return max(total, 1.0)


# -- GateStats -------------------------------------------------------------------------------
H = 2


@SETTINGS
@given(st.integers(1, 3).flatmap(lambda dg: st.tuples(batches_of((H, dg), SCORES), batches_of((H, dg), SCORES))))
def test_gate_stats(data):
    first, rest = data
    n = max(len(first), len(rest))
    dg = next((b.shape[2] for b in first + rest), 1)
    first = first + [np.zeros((0, H, dg), np.float32)] * (n - len(first))
    rest = rest + [np.zeros((0, H, dg), np.float32)] * (n - len(rest))
    pairs = list(zip(first, rest))
    stats = all_merges_agree(lambda: GateStats(H), lambda r, p: r.update(torch.from_numpy(p[0]), torch.from_numpy(p[1])),
                             pairs, magnitude(first + rest, 2))
    rows = {(r["group"], r["head"], r["metric"]): r["value"] for r in stats.rows()}
    for group, parts in (("first", first), ("rest", rest), ("all", first + rest)):
        x = np.concatenate([p.astype(np.float64) for p in parts], 0) if parts else np.zeros((0, H, dg))
        for h in range(H):
            v = x[:, h].reshape(-1)
            v = v[np.isfinite(v)]
            assert rows[(group, h, "count")] == len(v)
            if len(v) == 0:
                assert math.isnan(rows[(group, h, "mean")])
                continue
            big = float(np.abs(v).max())
            assert rows[(group, h, "mean")] == pytest.approx(v.mean(), rel=1e-9, abs=1e-12 * big)
            assert rows[(group, h, "std")] == pytest.approx(v.std(), rel=1e-6, abs=1e-7 * big + 1e-7)
            assert rows[(group, h, "min")] == v.min() and rows[(group, h, "max")] == v.max()
            for t in GateStats.LOW:
                assert rows[(group, h, f"frac_lt_{t}")] == pytest.approx((v < np.float32(t)).mean(), abs=1e-12)
            for t in GateStats.HIGH:
                assert rows[(group, h, f"frac_gt_{t}")] == pytest.approx((v > np.float32(t)).mean(), abs=1e-12)
    allx = [p.astype(np.float32) for p in first + rest]
    if allx:
        x = np.concatenate(allx, 0)
        for h in range(H):
            v = x[:, h].reshape(-1)
            v = v[np.isfinite(v)]
            with np.errstate(over="ignore"):                 # 3.4e38 * 50 is inf, then clipped
                bins = np.clip(v * np.float32(GateStats.BINS), 0, GateStats.BINS - 1).astype(np.int64)
            assert stats.hist[h].tolist() == np.bincount(bins, minlength=GateStats.BINS).tolist()
    bad = sum(int((~np.isfinite(p)).sum()) for p in first + rest)
    assert int(stats.nonfinite.sum()) == bad


# -- FirstTokenStats -------------------------------------------------------------------------
@st.composite
def attention_batches(draw):
    out = []
    for _ in range(draw(st.integers(0, 4))):
        B, T = draw(st.integers(0, 3)), draw(st.integers(1, 6))           # T = 1: single token
        p0 = draw(arrays(np.float32, (B, H, T), elements=st.one_of(
            st.floats(0, 1, width=32), st.sampled_from([0.0, 1.0, float("nan"), float("inf")]))))
        mode = draw(st.sampled_from(["none", "random", "all_masked"]))
        valid = None if mode == "none" else (
            np.zeros((B, T), bool) if mode == "all_masked" else draw(arrays(np.bool_, (B, T))))
        out.append((p0, valid))
    return out


@SETTINGS
@given(attention_batches())
def test_first_token_stats(batches):
    feed = lambda r, b: r.update(torch.from_numpy(b[0]), None if b[1] is None else torch.from_numpy(b[1]))
    stats = all_merges_agree(lambda: FirstTokenStats(H), feed, batches, magnitude([b[0] for b in batches]))
    # A query counts in each head where its probability is finite (issue 24: a NaN in one head
    # drops that head only), and in n_rest / n_all / the uniform reference when any head has it.
    rest, every, uniform, bad = [[] for _ in range(H)], [[] for _ in range(H)], [], 0
    counted_rest = counted_all = 0
    for p0, valid in batches:
        B, _, T = p0.shape
        w = np.ones((B, T), bool) if valid is None else valid
        bad += int((w & ~np.isfinite(p0).all(1)).sum())
        for b in range(B):
            for t in range(T):
                heads = [h for h in range(H) if w[b, t] and np.isfinite(p0[b, h, t])]
                counted_all += bool(heads)
                counted_rest += bool(heads) and t >= 1
                if heads and t >= 1:
                    uniform.append(1.0 / (t + 1))
                for h in heads:
                    every[h].append(float(p0[b, h, t]))
                    if t >= 1:
                        rest[h].append(float(p0[b, h, t]))
    assert int(stats.nonfinite) == bad
    assert int(stats.n_rest) == counted_rest and int(stats.n_all) == counted_all
    assert stats.head_queries().tolist() == [len(r) for r in rest]
    expect = lambda cells: np.array([np.mean(c) if c else np.nan for c in cells])
    np.testing.assert_allclose(stats.f_attn().numpy(), expect(rest), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(stats.f_attn_paper().numpy(), expect(every), rtol=1e-12, atol=1e-15)
    if uniform:
        assert stats.uniform_reference() == pytest.approx(np.mean(uniform), rel=1e-12)
        assert int(stats.bucket_n.sum()) == counted_rest
    else:
        assert math.isnan(stats.uniform_reference())


# -- MaxAbsStats and LogHistogram -------------------------------------------------------------
C = 3


@st.composite
def activation_batches(draw):
    out, next_seq = [], 0
    for _ in range(draw(st.integers(0, 4))):
        n = draw(st.integers(0, 5))
        h = draw(arrays(np.float32, (n, C), elements=VALUES))
        seq = np.arange(next_seq, next_seq + n)                 # rows of distinct (sequence, position)
        next_seq += n
        pos = draw(arrays(np.int64, (n,), elements=st.integers(0, 50)))
        tok = draw(arrays(np.int64, (n,), elements=st.integers(0, 9)))
        out.append((h, seq, pos, tok))
    return out


@SETTINGS
@given(activation_batches(), st.integers(1, 4))
def test_max_abs_stats(batches, k):
    feed = lambda r, b: r.update(*(torch.from_numpy(x) for x in b))
    stats = all_merges_agree(lambda: MaxAbsStats(k), feed, batches, 1.0)
    for order in ([*range(len(batches))][::-1],):
        other = merged(lambda: MaxAbsStats(k), feed, batches, order)
        assert other.top == stats.top
    cands, bad = [], 0
    for h, seq, pos, tok in batches:
        for r in range(h.shape[0]):
            for d in range(C):
                v = float(h[r, d])
                if not math.isfinite(v):
                    bad += 1
                    continue
                cands.append((abs(v), v, int(seq[r]), int(pos[r]), d, int(tok[r])))
    expect = sorted(cands, key=lambda c: (-c[0], c[2], c[3], c[4]))[:k]
    assert stats.top == expect
    assert int(stats.count) == len(cands) and int(stats.nonfinite) == bad
    assert int(stats.hist.nonfinite) == bad and stats.hist.total == len(cands)
    if cands:
        a = np.sort(np.array([c[0] for c in cands], np.float32))
        med = stats.median_abs()
        lo, hi = a[(len(a) - 1) // 2], a[len(a) // 2]
        assert lo * (1 - 2 ** -7) - 1e-38 <= med <= hi * (1 + 2 ** -7) + 1e-38, (med, lo, hi)
        assert stats.max_abs() == float(a[-1])
    else:
        assert math.isnan(stats.max_abs()) and math.isnan(stats.median_abs())


@SETTINGS
@given(batches_of((4,), st.one_of(st.floats(0, 1e6, width=32), ANY32.map(abs))),
       st.floats(1e-6, 1e6), st.booleans())
def test_log_histogram_fraction_below(batches, threshold, on_edge):
    if on_edge:                                   # thresholds on a bin edge are exact
        threshold = LogHistogram.lower_edge(LogHistogram.bin_of(threshold))
    stats = all_merges_agree(LogHistogram, lambda r, b: r.update(torch.from_numpy(b)), batches, 1.0)
    v = np.concatenate([b.reshape(-1) for b in batches]) if batches else np.zeros(0, np.float32)
    v = v[np.isfinite(v)]
    got = stats.fraction_below(threshold)
    if len(v) == 0:
        assert math.isnan(got)
        return
    direct = float((v < np.float32(threshold)).mean())
    same_bin = np.array([LogHistogram.bin_of(float(x)) for x in v]) == LogHistogram.bin_of(threshold)
    slack = 0.0 if on_edge else same_bin.mean()
    assert abs(got - direct) <= slack + 1e-12, (got, direct, slack)


@SETTINGS
@given(batches_of((4,), st.one_of(ANY32, st.just(0.0), st.floats(1e-30, 1e30).map(np.float32))))
def test_log_histogram_counts_equal_a_bincount_of_the_bits(batches):
    """The counts, kept only over the bins seen (int32 until they could overflow), equal a
    bincount of the top 16 bits of every finite |v|, merged in any grouping; the state saved for
    resume and all-reduced under torchrun is the whole (BINS,) int64 array."""
    stats = all_merges_agree(LogHistogram, lambda r, b: r.update(torch.from_numpy(b)), batches, 1.0)
    v = np.concatenate([b.reshape(-1) for b in batches]) if batches else np.zeros(0, np.float32)
    v = np.abs(v[np.isfinite(v)]).astype(np.float32)
    expect = np.bincount(v.view(np.int32) >> 16, minlength=LogHistogram.BINS)
    state = stats.state_tensors()["counts"]
    assert state.dtype == torch.int64 and state.shape == (LogHistogram.BINS,)
    assert state.tolist() == expect.tolist()
    assert stats.total == len(v)


def test_log_histogram_keeps_only_the_bins_it_saw(monkeypatch):
    """Memory: values over a few octaves (and exact zeros) store a few hundred bins, not 32768;
    once more values were counted than int32 can hold in one bin, the stored counts are int64."""
    h = LogHistogram()
    x = torch.cat([torch.zeros(100), torch.logspace(-3, 1, 1000)])          # 4 decades, 13 octaves
    h.update(x)
    assert len(h._stored) < 14 * 128 + 2 * LogHistogram._MARGIN and h._stored.dtype == torch.int32
    monkeypatch.setattr(LogHistogram, "_INT32_SAFE", 1500)
    h.update(x)                                                               # 2200 counted > 1500
    assert h._stored.dtype == torch.int64
    expect = np.bincount(np.abs(torch.cat([x, x]).numpy()).view(np.int32) >> 16, minlength=LogHistogram.BINS)
    assert h.counts.tolist() == expect.tolist()


# Values that crowd one bin and sit next to the thresholds (a sink's outputs cluster like this).
NEAR_CUTS = st.sampled_from([0.00999, 0.0099999998, 0.01, 0.0100001, 0.009975, 0.0031, 0.00316228, 0.1, 0.0])
CLUSTERED = st.one_of(st.floats(-1, 1, width=32), NEAR_CUTS, NEAR_CUTS.map(lambda x: -x), ANY32)
CUTS = st.lists(st.one_of(st.floats(1e-7, 10), st.sampled_from([0.01, 0.001, 0.00316228, 0.1, 1.0])),
                min_size=1, max_size=4, unique=True)
SCALES = st.one_of(st.just(1.0), st.floats(1e-3, 1.0), st.sampled_from([0.5, 0.37, 0.999]))


def direct_share(batches, threshold: float, scale: float = 1.0) -> float:
    """The share of finite |v| with |v| * scale < threshold, counted in float64 on all values."""
    v = np.concatenate([b.reshape(-1) for b in batches]).astype(np.float64) if batches else np.zeros(0)
    v = np.abs(v[np.isfinite(v)])
    return int((v * scale < threshold).sum()) / len(v) if len(v) else math.nan


@SETTINGS
@given(batches_of((3,), CLUSTERED), CUTS, SCALES)
def test_log_histogram_counts_at_its_cuts_exactly(batches, cuts, scale):
    """Shares at the cuts are exact counts, float32 values anywhere in a bin, at any scale m."""
    make = lambda: LogHistogram(cuts=cuts, scale=scale)
    stats = all_merges_agree(make, lambda r, b: r.update(torch.from_numpy(b)), batches, 1.0)
    for t in cuts:
        got, exact = stats.share_below(t)
        expect = direct_share(batches, t, scale)
        assert exact
        assert got == expect or (math.isnan(got) and math.isnan(expect)), (t, scale, got, expect)


@SETTINGS
@given(batches_of((3,), CLUSTERED), st.floats(1e-7, 10), SCALES)
def test_log_histogram_of_bfloat16_is_exact_at_any_threshold(batches, threshold, scale):
    """bfloat16 values are their own bins: any threshold, at any scale, is an exact count."""
    feed = lambda r, b: r.update(torch.from_numpy(b).to(torch.bfloat16))
    stats = all_merges_agree(LogHistogram, feed, batches, 1.0)
    as_bf16 = [torch.from_numpy(b).to(torch.bfloat16).float().numpy() for b in batches]
    got, exact = stats.share_below(threshold, scale)
    expect = direct_share(as_bf16, threshold, scale)
    assert exact
    assert got == expect or (math.isnan(got) and math.isnan(expect)), (threshold, scale, got, expect)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_sparsity_shares_of_clustered_outputs_are_exact(dtype):
    """Every |O| just below 0.01 (all in the bin that holds 0.01): the share below 0.01 is 1,
    not the 0.84 that interpolating inside the bin gives; the dynamic gate likewise."""
    value = 0.00999 if dtype == torch.float32 else 0.00995   # bfloat16: 0.0099487, the bin's edge
    O = torch.full((6, 4, 8), value).to(dtype) * torch.tensor([1.0, -1.0]).repeat(4).to(dtype)
    stats = SparsityStats(thresholds=(0.001, 0.01, 0.1))
    stats.ungated.update(O)
    stats.gated.update(O * 0.5)
    shares = stats.shares(mean_gate=None)
    direct = {t: float((O.double().abs() < t).double().mean()) for t in (0.001, 0.01, 0.1)}
    direct_gated = {t: float(((O * 0.5).double().abs() < t).double().mean()) for t in (0.001, 0.01, 0.1)}
    assert direct[0.01] == 1.0
    assert {t: s for t, (s, _) in shares["ungated"].items()} == direct
    assert {t: s for t, (s, _) in shares["gated"].items()} == direct_gated
    assert all(e for v in shares.values() for _, e in v.values())


def test_control_in_one_pass_is_exact_for_bfloat16_and_marked_otherwise():
    """The mean-gate control |O| * m < t: m is known only after the pass, so one pass counts it
    exactly only when the histogram holds every value (bfloat16); float32 shares say they are not."""
    g = torch.Generator().manual_seed(0)
    O = torch.randn(64, 4, 8, generator=g) * 0.02
    m = 0.4137
    for dtype, exact in ((torch.bfloat16, True), (torch.float32, False)):
        stats = SparsityStats(thresholds=THRESH)
        x = O.to(dtype)
        stats.ungated.update(x)
        shares = stats.shares(mean_gate=m)["mean_gate"]
        for t, (share, is_exact) in shares.items():
            direct = int((x.double().abs() * m < t).sum()) / x.numel()
            if exact:
                assert is_exact and share == direct, (t, share, direct)
            else:                     # within the share of the one bin it interpolates in
                assert abs(share - direct) <= stats.ungated.bin_share(t, m) + 1e-12
        assert any(not e for _, e in shares.values()) is not exact
        # The second pass's histogram, with m known, counts the control exactly (control.py).
        control = LogHistogram(cuts=THRESH, scale=m)
        control.update(x)
        for t, (share, is_exact) in stats.shares(mean_gate=m, control=control)["mean_gate"].items():
            assert is_exact and share == int((x.double().abs() * m < t).sum()) / x.numel()


THRESH = tuple(float(f"{10 ** (k / 2):.6g}") for k in range(-12, 1))


# -- LossStats -------------------------------------------------------------------------------
V = 5
LOGITS = st.one_of(st.floats(-50, 50, width=32), st.floats(float(np.float32(-1e30)), float(np.float32(1e30)), width=32),
                   st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0]))


@st.composite
def loss_batches(draw):
    out = []
    for _ in range(draw(st.integers(0, 3))):
        B, T = draw(st.integers(0, 3)), draw(st.integers(1, 5))
        logits = draw(arrays(np.float32, (B, T, V), elements=LOGITS))
        ids = draw(arrays(np.int64, (B, T), elements=st.integers(0, V - 1)))
        valid = draw(st.one_of(arrays(np.bool_, (B, T)), st.just(np.ones((B, T), bool)),
                               st.just(np.zeros((B, T), bool))))
        out.append((logits, ids, valid))
    return out


def _nll64(row: np.ndarray, target: int) -> float:
    x = row.astype(np.float64)
    m = x.max()
    if not np.isfinite(m):
        return math.nan
    return float(m + np.log(np.exp(x - m).sum()) - x[target])


@SETTINGS
@given(loss_batches())
def test_loss_stats(batches):
    feed = lambda r, b: r.update(*(torch.from_numpy(x) for x in b))
    scale = max((float(np.abs(b[0][np.isfinite(b[0])]).max(initial=0)) for b in batches), default=1.0)
    stats = all_merges_agree(LossStats, feed, batches, max(scale, 1.0) * 100)
    nll, bad = [], 0
    for logits, ids, valid in batches:
        for b in range(logits.shape[0]):
            for t in range(logits.shape[1] - 1):
                if not valid[b, t + 1]:                 # a pair counts when its target is valid
                    continue
                value = _nll64(logits[b, t], int(ids[b, t + 1]))
                if math.isfinite(value) and value < 1e30:     # float32 log_softmax overflows beyond
                    nll.append(value)
                else:
                    bad += 1
    # A pair is non-finite in float32 exactly when it is here (no logit beyond 1e30 in magnitude
    # difference can overflow float32), so the counts agree exactly.
    assert int(stats.count) == len(nll) and int(stats.nonfinite) == bad
    if nll:
        assert stats.loss() == pytest.approx(np.mean(nll), rel=1e-5, abs=1e-6 * max(scale, 1.0))
    else:
        assert math.isnan(stats.loss())


# -- TokenGroupGateStats ---------------------------------------------------------------------
G = 3


@st.composite
def grouped_scores(draw):
    dg = draw(st.integers(1, 2))
    out = []
    for _ in range(draw(st.integers(0, 4))):
        n = draw(st.integers(0, 5))
        out.append((draw(arrays(np.float32, (n, H, dg), elements=SCORES)), draw(arrays(np.bool_, (n, G)))))
    return out


@SETTINGS
@given(grouped_scores())
def test_token_group_gate_stats(batches):
    make = lambda: TokenGroupGateStats(H, ["a", "b", "c"])
    feed = lambda r, b: r.update(torch.from_numpy(b[0]), torch.from_numpy(b[1]))
    stats = all_merges_agree(make, feed, batches, magnitude([b[0] for b in batches], 2))
    rows = {(r["token_type"], r["head"], r["metric"]): r["value"] for r in stats.rows()}
    for g, name in enumerate("abc"):
        members = [s[m[:, g]] for s, m in batches]
        x = np.concatenate([m.astype(np.float64) for m in members]) if members else np.zeros((0, H, 1))
        assert rows[(name, 0, "tokens")] == len(x)
        for h in range(H):
            v = x[:, h].reshape(-1) if len(x) else np.zeros(0)
            v = v[np.isfinite(v)]
            assert rows[(name, h, "count")] == len(v)
            if len(v):
                big = float(np.abs(v).max())
                assert rows[(name, h, "mean")] == pytest.approx(v.mean(), rel=1e-9, abs=1e-12 * big)
                assert rows[(name, h, "min")] == v.min() and rows[(name, h, "max")] == v.max()
                assert rows[(name, h, "frac_lt_0.5")] == pytest.approx((v < 0.5).mean(), abs=1e-12)
            else:
                assert math.isnan(rows[(name, h, "mean")])
