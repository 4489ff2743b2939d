"""probe/metrics/gdn/received.py: the share of each GDN query's output every key carries, pooled
by key position and token, and the secondary state sinks, against the per-key terms of a float64
step-by-step recurrence written in tests/metrics/test_gdn.py (independent of decompose.py's
chunked form), on the tiny Qwen3.5 and Qwen3-Next hybrids in float32.

Tolerance 1e-9 relative: both sides are float64 from the same float32 q, k, v, beta, g; they
differ only in the order of summation (chunked solve and blocks against step by step).
"""
from __future__ import annotations

import pytest
import torch

import probe
from probe.core.events import GDN
from probe.metrics.gdn import received as received_module
from tests.metrics.test_gdn import _terms_by_recurrence

T = 40
SEQUENCES = 2


@pytest.fixture(scope="module", params=("qwen3_5", "qwen3_next"))
def captured(request, loaded):
    """(capture, {layer: [the GDN call of each batch]}, ids (SEQUENCES, T)): two sequences, one per
    batch; secondary sinks need 8 reading queries here (SINK_MIN_QUERIES shrunk for T = 40)."""
    lm = loaded(request.param)
    ids = torch.randint(3, 60, (SEQUENCES, T), generator=torch.Generator().manual_seed(7))
    mp = pytest.MonkeyPatch()
    mp.setattr(received_module, "SINK_MIN_QUERIES", 8)
    cap = probe.Capture(lm.model, lm.layout, gdn=True, anatomy=True, vocab_size=lm.model.config.vocab_size)
    calls = {}
    cap.on(GDN, lambda layer, o, b, call: calls.setdefault(layer, []).append(call))
    with torch.no_grad(), cap:
        for s in range(SEQUENCES):
            with cap.batch(ids[s:s + 1], seq_index=torch.tensor([s])):
                lm.model(input_ids=ids[s:s + 1], use_cache=False)
    yield cap, calls, ids
    mp.undo()


def _shares(call) -> torch.Tensor:
    """r (H, T, T): |c_{t,s}| / sum_s |c_{t,s}| from the recurrence's terms."""
    H = lambda x: x[0].transpose(0, 1).double()
    c, _ = _terms_by_recurrence(*(H(x) for x in (call.q, call.k, call.v, call.beta, call.g)))
    mag = c.norm(dim=-1)                                                 # (H, T, T), 0 for s > t
    return mag / mag.sum(-1, keepdim=True)


def _expected(calls_of_layer):
    """Per head and key, received (H, T) and the queries t >= 1 that read it, over the sequences;
    and each sequence's (H, T) scores."""
    total, scores = 0, []
    reads = torch.tril(torch.ones(T, T, dtype=torch.int64))                # [t, s]: s <= t
    reads[0] = 0                                                          # query 0 is left out
    for call in calls_of_layer:
        r = _shares(call)
        r[:, 0] = 0
        got = r.sum(1)                                                    # (H, T)
        total = total + got
        scores.append(got / reads.sum(0).clamp_min(1))
    return total, reads.sum(0) * len(calls_of_layer), scores


def test_received_by_position_is_the_mean_share_over_the_queries_that_read_each_key(captured):
    cap, calls, _ = captured
    metric = cap.metrics["gdn"]
    for layer, got_calls in calls.items():
        total, seen, _ = _expected(got_calls)
        rows = metric.received[layer].by_position()
        assert rows and rows[0]["key_lo"] == 0 and rows[0]["key_hi"] == 1.0
        for row in rows:
            lo, hi = row["key_lo"], min(int(row["key_hi"]), T)
            want = total[row["head"], lo:hi].sum() / seen[lo:hi].sum()
            assert row["queries"] == int(seen[lo:hi].sum())
            assert abs(row["score"] - float(want)) <= 1e-9 * abs(float(want))
        # key 0's score is the layer's key-0 share (gdn_keys.csv), query for query
        key0 = [r["score"] for r in rows if r["key_lo"] == 0]
        assert torch.allclose(torch.tensor(key0, dtype=torch.float64),
                              metric.keys[layer].values()["key0_share"], rtol=1e-9)


def test_received_by_token_pools_heads_and_sequences(captured):
    cap, calls, ids = captured
    for layer, got_calls in calls.items():
        total, _, _ = _expected(got_calls)
        reads = torch.tril(torch.ones(T, T, dtype=torch.int64))
        reads[0] = 0
        heads = total.shape[0]
        cells, summed = {}, {}
        for s, call in enumerate(got_calls):
            r = _shares(call)
            r[:, 0] = 0
            for pos, tid in enumerate(ids[s].tolist()):
                summed[tid] = summed.get(tid, 0.0) + float(r[:, :, pos].sum())
                cells[tid] = cells.get(tid, 0) + int(reads[:, pos].sum()) * heads
        rows = cap.metrics["gdn"].received[layer].by_token(k=1000)
        assert rows
        for row in rows:
            tid = row["token_id"]
            assert row["cells"] == cells[tid] >= received_module.TOKEN_MIN_CELLS
            assert abs(row["score"] - summed[tid] / cells[tid]) <= 1e-9 * summed[tid] / cells[tid]
        assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)


def test_state_sinks_are_each_sequences_top_key_after_key_0(captured):
    cap, calls, ids = captured
    for layer, got_calls in calls.items():
        _, _, scores = _expected(got_calls)
        readers = T - torch.arange(T)                                     # queries t >= max(s, 1) reading key s
        readers[0] = T - 1
        sinks = cap.metrics["gdn"].received[layer].sinks
        for h, best in enumerate(sinks):
            want = []
            for s, sc in enumerate(scores):
                eligible = sc[h].where(readers >= 8, torch.nan)[1:]
                pos = int(torch.nan_to_num(eligible, nan=-1).argmax()) + 1
                want.append((float(sc[h, pos]), s, pos, int(ids[s, pos])))
            want.sort(key=lambda c: (-c[0], c[1]))
            assert [(seq, pos, tid) for _, seq, pos, tid in best] == [(seq, pos, tid) for _, seq, pos, tid in want]
            for (a, *_), (b, *_) in zip(best, want):
                assert abs(a - b) <= 1e-9 * b


def test_a_run_writes_the_three_tables(checkpoint):
    from tests.samples import TEXT

    a = probe.analyze(checkpoint("qwen3_5"), texts=[TEXT[:500]], seq_len=48, max_sequences=2, progress=False,
                      gdn=True, anatomy=True, resamples=0)
    got = a.tables["gdn_received"]
    assert sorted(set(got.layer)) == [0, 1, 2] and (got.score > 0).all()
    assert len(a.tables["gdn_received_by_token"])
    assert list(a.tables["gdn_state_sinks"].columns)[-1] == "score"      # 48 tokens: no key has 128 readers
    plain = probe.analyze(checkpoint("qwen3_5"), texts=[TEXT[:500]], seq_len=48, max_sequences=2, progress=False,
                          gdn=True, resamples=0)
    assert plain.tables["gdn_received"].empty                            # per-key views: --anatomy only
