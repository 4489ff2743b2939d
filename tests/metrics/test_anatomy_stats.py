"""probe.metrics.anatomy.stats against direct loops over the cells it reduces, and merge exactness."""
from __future__ import annotations

import math

import pytest
import torch

from probe.metrics.anatomy.stats import EDGES, GATE_BINS, AnatomyStats, position_bucket
from probe.metrics.anatomy.received import ReceivedAttention, ValueDrains, received_attention

from tests.metrics.planted_sinks import (SCALE, SINK, padding_mask, planted,  # noqa: F401 (planted: a fixture)
                                         run_kernel)

B, H, HKV, T, D, V = 4, 4, 2, 70, 16, 50     # T = 70 reaches the buckets [16, 32), [32, 64), [64, 128)


def batch(seed=0):
    """Four sequences (two padded) with a planted sink at SINK, their tokens and received attention."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g)
    k = torch.randn(B, HKV, T, D, generator=g)
    v = torch.randn(B, HKV, T, D, generator=g)
    u = torch.randn(D, generator=g)
    u = u / u.norm()
    q = q + 4.0 * u
    k[:, :, SINK] = 6.0 * u
    k[:, :, 0] = 6.0 * u                                        # position 0 is a sink as well
    mask, valid = padding_mask([T, 50, T, 21], T)
    _, lse = run_kernel(q, k, v, mask)
    ids = torch.randint(0, V, (B, T), generator=g)
    ids[:, SINK] = 3
    return received_attention(q, k, lse, mask, SCALE, valid=valid), ids, torch.arange(10, 10 + B), valid


def python_bucket(k: int) -> int:
    return k if k < 16 else min(16 + k.bit_length() - 5, len(EDGES) - 1)


def cells(r: ReceivedAttention):
    """Every (sequence row, head, key) with a count, and its score: the direct enumeration."""
    out = []
    for b in range(r.total.shape[0]):
        for s in range(r.total.shape[2]):
            n = int(r.count[b, s])
            if n:
                for h in range(r.total.shape[1]):
                    out.append((b, h, s, n, float(r.total[b, h, s]) / n, float(r.total[b, h, s])))
    return out


def test_bucket_edges():
    pos = torch.tensor([0, 1, 15, 16, 31, 32, 63, 64, 2 ** 19, 2 ** 20 - 1, 2 ** 20, 2 ** 24])
    assert position_bucket(pos).tolist() == [python_bucket(int(p)) for p in pos]
    assert position_bucket(pos).tolist() == [0, 1, 15, 16, 16, 17, 17, 18, 31, 31, 32, 32]
    assert EDGES[:17] == (*range(16), 16) and EDGES[-1] == 2 ** 20


def test_positions_tokens_and_sink_rates_equal_direct_counts():
    r, ids, seq, _ = batch()
    stats = AnatomyStats(layer=3, heads=H, vocab_size=V, min_queries=8)
    stats.update(r, ids, seq)
    nb = len(EDGES)
    score, cell_n, sinks, prob, queries = (torch.zeros(nb, H, dtype=torch.float64), torch.zeros(nb),
                                           torch.zeros(nb, H), torch.zeros(nb, H, dtype=torch.float64), torch.zeros(nb))
    tok_score, tok_cells, tok_sinks = torch.zeros(V, dtype=torch.float64), torch.zeros(V), torch.zeros(V)
    for b, h, s, n, sc, tot in cells(r):
        j = python_bucket(s)
        score[j, h] += sc
        sinks[j, h] += sc > 0.3
        prob[j, h] += tot
        if h == 0:
            cell_n[j] += 1
            queries[j] += n
        if n >= 8:
            t = int(ids[b, s])
            tok_score[t] += sc
            tok_sinks[t] += sc > 0.3
            tok_cells[t] += h == 0
    rows = {(row["head"], row["key_lo"]): row for row in stats.position_rows()}
    assert {lo for _, lo in rows} == {EDGES[j] for j in range(nb) if cell_n[j]} == {*range(16), 16, 32, 64}
    for j in range(nb):
        if not cell_n[j]:
            continue
        for h in range(H):
            row = rows[(h, EDGES[j])]
            assert row["cells"] == cell_n[j] and row["queries"] == queries[j]
            assert row["score"] == pytest.approx(float(score[j, h]) / float(cell_n[j]), abs=1e-12)
            assert row["pooled"] == pytest.approx(float(prob[j, h]) / float(queries[j]), abs=1e-12)
            assert row["sink_rate"] == pytest.approx(float(sinks[j, h]) / float(cell_n[j]), abs=1e-12)
        pooled = rows[(-1, EDGES[j])]
        assert pooled["sink_rate"] == pytest.approx(float(sinks[j].sum()) / (H * float(cell_n[j])), abs=1e-12)
    # The planted sinks: every head of every sequence above epsilon at positions 0 and SINK.
    assert rows[(-1, 0)]["sink_rate"] == 1.0 and rows[(-1, SINK)]["sink_rate"] == 1.0
    assert rows[(-1, 1)]["sink_rate"] < 1.0
    got = {row["token"]: row for row in stats.token_rows(k=None)}
    assert set(got) == {t for t in range(V) if tok_cells[t]}
    for t, row in got.items():
        assert row["cells"] == tok_cells[t]
        assert row["score"] == pytest.approx(float(tok_score[t]) / (H * float(tok_cells[t])), abs=1e-12)
        assert row["sink_share"] == pytest.approx(float(tok_sinks[t]) / (H * float(tok_cells[t])), abs=1e-12)
    # The top token is the direct loop's best: position 0 is a sink too, and token 3 also sits
    # at random positions, so which token wins depends on the draw (the planted position's
    # sink rate is asserted above).
    direct = max((t for t in range(V) if tok_cells[t]), key=lambda t: float(tok_score[t]) / float(tok_cells[t]))
    assert stats.token_rows(k=1)[0]["token"] == direct


@pytest.mark.parametrize("top", [5, 1000])
def test_secondary_sinks_are_the_best_cells_away_from_position_0(top):
    r, ids, seq, _ = batch()
    stats = AnatomyStats(layer=3, heads=H, vocab_size=V, top=top, min_queries=8)
    stats.update(r, ids, seq)
    want = sorted(((sc, 3, h, int(seq[b]), s, int(ids[b, s])) for b, h, s, n, sc, _ in cells(r)
                   if s >= 1 and n >= 8 and sc > 0.3), key=lambda c: (-c[0], c[3], c[4], c[2]))
    assert len(want) > 5
    assert stats.top == want[:top]
    assert int(stats.secondary_cells.sum()) == len(want)
    assert {c["position"] for c in stats.secondary_sinks()} >= ({SINK} if top > 5 else set())
    assert all(c["position"] != 0 for c in stats.secondary_sinks())


def test_secondary_sinks_need_sink_min_queries_the_token_table_min_queries():
    """Two bars: a cell counts for its token with min_queries queries, as a secondary sink only
    with sink_min_queries (recency lifts the scores of keys with few queries)."""
    r, ids, seq, _ = batch()
    bar = 20
    stats = AnatomyStats(layer=3, heads=H, vocab_size=V, min_queries=8, sink_min_queries=bar)
    stats.update(r, ids, seq)
    want = [c for c in cells(r) if c[2] >= 1 and c[3] >= bar and c[4] > 0.3]
    assert int(stats.secondary_cells.sum()) == len(want)
    assert all(r.count[c["sequence"] == seq][0, c["position"]] >= bar for c in stats.secondary_sinks())
    assert int(stats.token_cells.sum()) == int((r.count >= 8).sum())       # the token table's bar


def split(r: ReceivedAttention, rows):
    return ReceivedAttention(r.total[rows], r.count[rows], r.excluded[rows])


def test_merge_of_two_halves_equals_one_pass():
    r, ids, seq, valid = batch()
    g = torch.Generator().manual_seed(9)
    sink_att = torch.rand(B, H, T, generator=g)
    sink_att[0, 0, :3] = torch.tensor([0.0, 0.1, 1.0])                # bin edges
    gate = torch.rand(B, H, T, generator=g)
    drains = ValueDrains(torch.rand(B, H, 2, generator=g), torch.rand(B, H, T, generator=g),
                         torch.rand(B, H, T, generator=g) - 0.5)

    def fill(stats, rows):
        stats.update(split(r, rows), ids[rows], seq[rows])
        stats.update_gate(sink_att[rows], gate[rows], valid[rows])
        stats.update_drains(ValueDrains(drains.value_norm_ratio[rows], drains.norm_share[rows],
                                        drains.projection_share[rows]), valid[rows])
        return stats

    make = lambda: AnatomyStats(layer=1, heads=H, vocab_size=V, top=7, min_queries=8)  # noqa: E731
    one = fill(make(), slice(0, B))
    two = fill(make(), slice(0, 1)).merge(fill(make(), slice(1, B)))
    rev = fill(make(), slice(1, B)).merge(fill(make(), slice(0, 1)))
    for name, value in one.state_tensors().items():
        torch.testing.assert_close(getattr(two, name), value, atol=1e-12, rtol=0, msg=name)
        torch.testing.assert_close(getattr(rev, name), value, atol=1e-12, rtol=0, msg=name)
    assert two.top == one.top == rev.top and len(one.top) == 7
    gathered = make()
    gathered.merge_gathered("top", [fill(make(), slice(0, 1)).top, fill(make(), slice(1, B)).top])
    assert gathered.top == one.top


def test_ties_in_the_secondary_sink_list_do_not_depend_on_the_batching():
    """Eight cells with the same score at once: the list keeps the first by (sequence, position,
    head) whether they come in one batch or two."""
    total = torch.full((2, 2, 20), 0.01, dtype=torch.float64)
    total[:, :, 3] = total[:, :, 7] = 0.5 * 16                      # score 0.5 everywhere there
    count = torch.full((2, 20), 16)
    r = ReceivedAttention(total, count, torch.zeros(2, 20, dtype=torch.bool))
    ids = torch.arange(20).repeat(2, 1)
    seq = torch.tensor([5, 2])
    one = AnatomyStats(0, 2, 20, top=3, min_queries=1)
    one.update(r, ids, seq)
    assert [(c[3], c[4], c[2]) for c in one.top] == [(2, 3, 0), (2, 3, 1), (2, 7, 0)]
    a, b = AnatomyStats(0, 2, 20, top=3, min_queries=1), AnatomyStats(0, 2, 20, top=3, min_queries=1)
    a.update(split(r, slice(0, 1)), ids[:1], seq[:1])
    b.update(split(r, slice(1, 2)), ids[1:], seq[1:])
    assert a.merge(b).top == one.top


def test_gate_means_by_sink_attention_bin_equal_direct_means():
    g = torch.Generator().manual_seed(2)
    a = torch.rand(2, 3, 40, generator=g)
    a[0, 0, :4] = torch.tensor([0.0, 0.1, 0.95, 1.0])                 # edges: 0.1 opens bin 1, 1.0 the last
    a[1, 2, 5] = math.nan                                             # left out
    gate = torch.rand(2, 3, 40, generator=g)
    valid = torch.ones(2, 40, dtype=torch.bool)
    valid[1, 30:] = False
    stats = AnatomyStats(0, 3, 10)
    stats.update_gate(a, gate, valid)
    sums, sq, n, att = {}, {}, {}, {}
    for b in range(2):
        for h in range(3):
            for t in range(40):
                x = float(a[b, h, t])
                if not valid[b, t] or math.isnan(x):
                    continue
                j = min(int(x * GATE_BINS), GATE_BINS - 1)
                key = (h, j)
                sums[key] = sums.get(key, 0.0) + float(gate[b, h, t])
                sq[key] = sq.get(key, 0.0) + float(gate[b, h, t]) ** 2
                att[key] = att.get(key, 0.0) + x
                n[key] = n.get(key, 0) + 1
    rows = {(row["head"], round(row["attention_lo"] * GATE_BINS)): row for row in stats.gate_rows()}
    assert set(rows) == set(n)
    assert rows[(0, 1)]["queries"] >= 1 and int(stats.gate_n[9, 0]) >= 2    # 0.95 and 1.0
    for key, row in rows.items():
        mean = sums[key] / n[key]
        assert row["queries"] == n[key]
        assert row["gate"] == pytest.approx(mean, abs=1e-12)
        assert row["attention"] == pytest.approx(att[key] / n[key], abs=1e-12)
        assert row["gate_std"] == pytest.approx(math.sqrt(max(sq[key] / n[key] - mean ** 2, 0)), abs=1e-6)


def test_drain_rows_are_means_over_finite_values():
    g = torch.Generator().manual_seed(3)
    ratio = torch.rand(2, 3, 2, generator=g, dtype=torch.float64)
    ratio[0, 1, 0] = math.nan                        # a sequence with no valid keys
    norm = torch.rand(2, 3, 10, generator=g, dtype=torch.float64)
    proj = torch.rand(2, 3, 10, generator=g, dtype=torch.float64) - 0.3
    norm[1, :, 7:] = math.nan                        # queries that do not count
    valid = torch.ones(2, 10, dtype=torch.bool)
    valid[0, 0] = False
    stats = AnatomyStats(0, 3, 10)
    stats.update_drains(ValueDrains(ratio, norm, proj), valid)
    for row in stats.drain_rows():
        h = row["head"]
        r = ratio[:, h].reshape(-1)
        assert row["value_norm_ratio"] == pytest.approx(float(r[~r.isnan()].mean()), abs=1e-12)
        keep = valid.clone()
        keep[1, 7:] = False
        assert row["queries"] == int(keep.sum())
        assert row["norm_share"] == pytest.approx(float(norm[:, h][keep].mean()), abs=1e-12)
        assert row["projection_share"] == pytest.approx(float(proj[:, h][keep].mean()), abs=1e-12)


def test_planted_model_end_to_end(planted):
    """The tiny Qwen2 with a planted sink (test_received): fed through the back-end, the reducer
    lists position 9 as a secondary sink of every head of layer 0 and its token on top."""
    from probe.capture import attention
    from probe.metrics.anatomy.received import key_probability, top_keys, value_drains

    from tests.metrics.planted_sinks import PLANT_TOKEN

    stats = {}

    class Observer:
        def on_attention(self, module, query, key, out, lse, mask, scale, softcap=None, value=None):
            layer = module.layer_idx
            r = received_attention(query, key, lse, mask, scale, softcap=softcap)
            st = stats.setdefault(layer, AnatomyStats(layer, query.shape[1], 64, min_queries=8))
            st.update(r, ids, torch.tensor([0, 1]))
            keys = top_keys(r, 1, min_queries=8)
            p = key_probability(query, key, lse, keys, mask, scale, softcap=softcap)     # (B, H, T, 1)
            st.update_gate(p.sum(-1), torch.full_like(p.sum(-1), 0.5))
            # No value reaches the observer: a value of ones gives every key the median norm.
            st.update_drains(value_drains(torch.ones_like(key), out, p, keys))

    ids = torch.randint(8, 64, (2, 40), generator=torch.Generator().manual_seed(1))
    ids[:, 9] = PLANT_TOKEN
    with attention.observing(planted, Observer()), torch.no_grad():
        planted(input_ids=ids, use_cache=False)
    st = stats[0]
    found = {(c["head"], c["sequence"]) for c in st.secondary_sinks() if c["position"] == 9}
    assert found == {(h, s) for h in range(4) for s in range(2)}
    assert all(c["token"] == PLANT_TOKEN for c in st.secondary_sinks() if c["position"] == 9)
    assert st.token_rows(k=1)[0]["token"] == PLANT_TOKEN
    rows = {(r["head"], r["key_lo"]): r for r in st.position_rows()}
    assert rows[(-1, 9)]["sink_rate"] == 1.0
    assert all(r["value_norm_ratio"] == pytest.approx(1.0) for r in st.drain_rows())
    assert sum(r["queries"] for r in st.gate_rows()) == 2 * 4 * 40
