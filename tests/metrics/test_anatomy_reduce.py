"""probe/metrics/anatomy/ through probe.analyze(..., anatomy=True): the tables against the
model's own eager attention (`output_attentions`, attn_implementation="eager", float64 column
means), one unpadded sequence at a time, and the gate against the gate module's own output."""
from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

import probe
from probe.results import schema
from probe.metrics.anatomy.stats import EDGES, EPSILON, GATE_BINS
from probe.metrics.anatomy import reduce as anatomy_metric
from probe.metrics.anatomy.reduce import Anatomy, MIN_QUERIES
from tests.run.test_resume import same_frames
from tests.metrics.planted_sinks import HF_T, HF_WINDOW, PLANT_TOKEN, planted  # noqa: F401 (planted: a fixture)

TOL = 1e-5
PLANT_AT = 9
LENGTHS = [HF_T, 31, 25]               # per_document: padded to 40, each key seen by >= 16 queries at 9


def planted_ids(lengths=LENGTHS, seed=1):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for n in lengths:
        ids = torch.randint(8, 64, (n,), generator=g)
        ids[PLANT_AT] = PLANT_TOKEN
        rows.append(ids.tolist())
    return rows


def eager_attentions(model, ids: list[int], layers=(0, 1)) -> dict[int, torch.Tensor]:
    """The model's own attention probabilities of one unpadded sequence: attention layer ->
    (H, L, L) float64 (hybrids return none, or None, for their linear-attention layers)."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), use_cache=False, output_attentions=True)
    finally:
        model.set_attn_implementation(previous)
    maps = [a[0].double() for a in out.attentions if a is not None]
    assert len(maps) == len(layers)
    return dict(zip(layers, maps))


def visible(L: int, window: int | None) -> torch.Tensor:
    """(L, L) bool: query t sees key s."""
    t, s = torch.arange(L)[:, None], torch.arange(L)[None, :]
    return (s <= t) if window is None else (s <= t) & (s > t - window)


def column_means(p: torch.Tensor, window: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(score (H, L), total (H, L), count (L,)): Gu et al.'s score from an explicit P (H, L, L)."""
    count = visible(p.shape[-1], window).sum(0)                                  # (L,)
    total = p.sum(1)                                                              # (H, L)
    return total / count, total, count


def bucket_of(k: int) -> int:
    return max(b for b, edge in enumerate(EDGES) if edge <= k)


def reference_positions(attn: list[torch.Tensor], window: int | None) -> dict:
    """(head, key_lo) -> (cells, queries, score, pooled, sink_rate) over the sequences' cells, head
    -1 pooling the heads, as received_by_position.csv defines them; from eager P alone."""
    H = attn[0].shape[0]
    acc: dict = {}
    for p in attn:
        score, total, count = column_means(p, window)
        for k in range(p.shape[-1]):
            b = EDGES[bucket_of(k)]
            cell = acc.setdefault(b, {"cells": 0, "queries": 0, "score": torch.zeros(H, dtype=torch.float64),
                                      "total": torch.zeros(H, dtype=torch.float64), "sinks": torch.zeros(H)})
            cell["cells"] += 1
            cell["queries"] += int(count[k])
            cell["score"] += score[:, k]
            cell["total"] += total[:, k]
            cell["sinks"] += (score[:, k] > EPSILON).double()
    want = {}
    for lo, c in acc.items():
        for head in range(H):
            want[(head, lo)] = (c["cells"], c["queries"], float(c["score"][head]) / c["cells"],
                                float(c["total"][head]) / c["queries"], float(c["sinks"][head]) / c["cells"])
        want[(-1, lo)] = (c["cells"], c["queries"], float(c["score"].mean()) / c["cells"],
                          float(c["total"].mean()) / c["queries"], float(c["sinks"].mean()) / c["cells"])
    return want


def assert_positions_match(table: pd.DataFrame, layer: int, want: dict) -> None:
    rows = table[table.layer == layer]
    assert len(rows) == len(want)
    for r in rows.itertuples():
        cells, queries, score, pooled, sink_rate = want[(r.head, r.key_lo)]
        assert (r.cells, r.queries) == (cells, queries), (layer, r.head, r.key_lo)
        assert r.score == pytest.approx(score, abs=TOL), (layer, r.head, r.key_lo)
        assert r.pooled == pytest.approx(pooled, abs=TOL), (layer, r.head, r.key_lo)
        assert r.sink_rate == pytest.approx(sink_rate, abs=1e-12), (layer, r.head, r.key_lo)
        assert r.key_hi == (EDGES[bucket_of(r.key_lo) + 1] if bucket_of(r.key_lo) + 1 < len(EDGES) else math.inf)


@pytest.fixture(scope="module")
def planted_run(planted):
    """The planted key at position 9 of 25-40 token sequences is seen by 16-31 queries, fewer
    than a secondary sink needs on real text (SINK_MIN_QUERIES): the bar is lowered to the token
    table's here, so that the plant is listed and can be checked against eager attention."""
    rows = planted_ids()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(anatomy_metric, "SINK_MIN_QUERIES", MIN_QUERIES)
        a = probe.analyze(planted, rows, per_document=True, seq_len=HF_T, batch_size=2, bos="none",
                          display_len=0, progress=False, anatomy=True)
    return a, rows, [eager_attentions(planted, ids) for ids in rows]


def test_a_secondary_sink_needs_enough_queries(planted):
    """With the default bar no key seen by fewer than SINK_MIN_QUERIES queries is a secondary
    sink (the end of a sequence reads high from recency), and meta.json says the bar."""
    a = probe.analyze(planted, planted_ids(), per_document=True, seq_len=HF_T, batch_size=2, bos="none",
                      display_len=0, progress=False, anatomy=True)
    assert HF_T < anatomy_metric.SINK_MIN_QUERIES
    assert a.secondary_sinks.empty and a.summary["anatomy"]["secondary_sinks"] == 0
    assert a.meta["anatomy_sink_min_queries"] == anatomy_metric.SINK_MIN_QUERIES


def test_received_by_position_equals_eager_column_means(planted_run):
    """Padding (per_document, unequal lengths, two batches), GQA (4 query / 2 KV heads), layer 1 a
    sliding window of 8 over 40 tokens: every (layer, head, key bucket) row within 1e-5."""
    a, rows, eager = planted_run
    for layer, window in enumerate([None, HF_WINDOW]):
        assert_positions_match(a.received_by_position, layer, reference_positions([e[layer] for e in eager], window))


def test_the_planted_secondary_sink_is_found_at_its_position_and_token(planted_run):
    a, rows, eager = planted_run
    sinks = a.secondary_sinks[a.secondary_sinks.layer == 0]
    at = sinks[sinks.position == PLANT_AT]
    assert {(r.head, r.sequence) for r in at.itertuples()} == {(h, s) for h in range(4) for s in range(len(rows))}
    assert set(at.token_id) == {PLANT_TOKEN} and set(at.token) == {str(PLANT_TOKEN)}   # no tokenizer: the id
    # Its score is the eager column mean of that key in that head and sequence.
    for r in at.itertuples():
        score, _, _ = column_means(eager[r.sequence][0], None)
        assert r.score == pytest.approx(float(score[r.head, PLANT_AT]), abs=TOL)
    top = a.received_by_token[(a.received_by_token.layer == 0) & (a.received_by_token["rank"] == 1)]
    assert top.token_id.tolist() == [PLANT_TOKEN]
    assert a.summary["anatomy"]["top_sink_tokens"][0]["token_id"] == PLANT_TOKEN
    assert a.summary["anatomy"]["secondary_sinks"] >= len(at)
    # per_sequence.csv counts them per sequence and layer: the planted key's four heads in each
    # sequence, and the per-sequence counts add up to the summary's total.
    per_seq = a.per_sequence[a.per_sequence.quantity == "secondary_sinks"]
    assert per_seq["value"].sum() == a.summary["anatomy"]["secondary_sinks"]
    counted = per_seq[per_seq.layer == 0].set_index("sequence")["value"]
    for s in range(len(rows)):
        assert counted[s] >= len(at[at.sequence == s]) == 4
    # Value drains of each head's top key (the plant, in layer 0): one key per sequence, every
    # query counted; the numbers themselves: test_value_drains_equal_a_direct_computation.
    drains = a.value_drains[a.value_drains.layer == 0]
    assert drains.sink_keys.tolist() == [len(rows)] * 4
    assert drains.queries.tolist() == [sum(LENGTHS)] * 4


def eager_drain_inputs(model, ids: list[int]) -> dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """layer -> (P (H, L, L), v (KV, L, D), o (H, L, D)), float64, of one unpadded sequence, from
    a plain eager forward: P from `output_attentions`, v from v_proj's output, o (each head's
    attention output, before o_proj) from o_proj's input. Nothing of probe's back-end is read."""
    cfg = model.config
    H, KV, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    values, outs, hooks = {}, {}, []
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        hooks.append(attn.v_proj.register_forward_hook(
            lambda m, args, out, i=i: values.__setitem__(i, out[0].view(-1, KV, D).transpose(0, 1).double())))
        hooks.append(attn.o_proj.register_forward_pre_hook(
            lambda m, args, i=i: outs.__setitem__(i, args[0][0].view(-1, H, D).transpose(0, 1).double())))
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            attentions = model(input_ids=torch.tensor([ids]), use_cache=False, output_attentions=True).attentions
    finally:
        model.set_attn_implementation(previous)
        for h in hooks:
            h.remove()
    return {i: (attentions[i][0].double(), values[i], outs[i]) for i in range(len(model.model.layers))}


def test_value_drains_equal_a_direct_computation(planted_run, planted):
    """value_drains.csv's value_norm_ratio, norm_share and projection_share of every (layer,
    head) against the same numbers formed directly from an eager forward of each unpadded
    sequence (eager_drain_inputs: P, the values v_proj made, the output o_proj was given):
    the sink key of a head is its highest Gu score among keys seen by >= MIN_QUERIES queries
    (the lowest position on ties; none qualify under layer 1's window of 8: key 0), its
    contribution c_t = P[t, sink] v_sink, then
      value_norm_ratio = ||v_sink|| / lower median of ||v_s|| over the sequence's keys (its KV
        head), averaged over the sequences (one sink key each);
      norm_share = ||c_t|| / ||o_t||, projection_share = (c_t . o_t) / ||o_t||^2, averaged over
        every query of every sequence (o_t != 0 here).
    This is what ties the table to the values: the counts alone (sink_keys, queries) would not
    notice key vectors read in place of values, nor a share against another output. Padding,
    GQA (4 query / 2 KV heads) and a sliding window are all in the run. Tolerance: 1e-5
    relative (1e-7 absolute): a float32 model, probe's back-end against eager attention; the
    largest difference measured was 4e-7 relative."""
    a, rows, eager = planted_run
    H = planted.config.num_attention_heads
    group = H // planted.config.num_key_value_heads
    sums = {}                   # (layer, head) -> [ratio sum, sink keys, norm sum, projection sum, queries]
    for ids, p_eager in zip(rows, eager):
        for layer, (p, v, o) in eager_drain_inputs(planted, ids).items():
            torch.testing.assert_close(p, p_eager[layer])                         # the same forward
            torch.testing.assert_close(o, p @ v.repeat_interleave(group, 0), rtol=1e-5, atol=1e-6)
            score, _, count = column_means(p, [None, HF_WINDOW][layer])
            top = torch.where(count >= MIN_QUERIES, score, -math.inf).argmax(-1)  # (H,)
            if layer == 0:
                assert top.tolist() == [PLANT_AT] * H
            norms = v.norm(dim=-1)                                                # (KV, L)
            for h in range(H):
                kv, k = h // group, int(top[h])
                c = p[h, :, k, None] * v[kv, k]                                   # (L, D)
                o_sq = (o[h] * o[h]).sum(-1)                                      # (L,)
                assert bool((o_sq > 0).all())
                s = sums.setdefault((layer, h), [0.0, 0, 0.0, 0.0, 0])
                s[0] += float(norms[kv, k] / norms[kv].median())
                s[1] += 1
                s[2] += float((c.norm(dim=-1) / o_sq.sqrt()).sum())
                s[3] += float(((c * o[h]).sum(-1) / o_sq).sum())
                s[4] += len(ids)
    table = a.value_drains
    assert sorted(zip(table.layer, table["head"])) == sorted(sums)
    for r in table.itertuples():
        ratio, keys, norm, projection, queries = sums[(r.layer, r.head)]
        where = (r.layer, r.head)
        assert (r.sink_keys, r.queries) == (keys, queries), where
        assert r.value_norm_ratio == pytest.approx(ratio / keys, rel=1e-5, abs=1e-7), where
        assert r.norm_share == pytest.approx(norm / queries, rel=1e-5, abs=1e-7), where
        assert r.projection_share == pytest.approx(projection / queries, rel=1e-5, abs=1e-7), where
    # Not vacuous: in layer 0 the plant carries most of each head's output.
    assert bool((table[table.layer == 0].norm_share > 0.5).all())


def test_one_pooled_token_score_in_the_table_and_the_summary(planted_run):
    """A token's received attention over the whole model is defined once: the mean of its
    cells' eager column means over every layer, head and (sequence, key) seen by at least
    MIN_QUERIES queries. received_by_token's layer -1 rows and summary.json's top_sink_tokens
    are that number (the report's token table reads the layer -1 rows)."""
    a, rows, eager = planted_run
    total, cells = {}, {}
    for ids, per_layer in zip(rows, eager):
        for layer, window in enumerate([None, HF_WINDOW]):
            score, _, count = column_means(per_layer[layer], window)             # (H, L), (L,)
            for k, tok in enumerate(ids):
                if count[k] >= MIN_QUERIES:
                    total[tok] = total.get(tok, 0.0) + float(score[:, k].sum())
                    cells[tok] = cells.get(tok, 0) + score.shape[0]
    want = sorted(((total[t] / cells[t], t) for t in total), key=lambda x: (-x[0], x[1]))
    pooled = a.received_by_token[a.received_by_token.layer == -1].sort_values("rank")
    assert pooled["rank"].tolist() == list(range(1, len(pooled) + 1)) and len(pooled) == min(20, len(want))
    assert pooled.token_id.tolist() == [t for _, t in want[:len(pooled)]]
    assert pooled.score.tolist() == pytest.approx([m for m, _ in want[:len(pooled)]], abs=TOL)
    summary = a.summary["anatomy"]["top_sink_tokens"]
    assert [s["token_id"] for s in summary] == pooled.token_id.tolist()[:len(summary)]
    assert [s["score"] for s in summary] == pooled.score.tolist()[:len(summary)]


def test_meta_summary_and_the_bridge_refusal(planted_run):
    a, _, _ = planted_run
    assert a.meta["anatomy"] is True and a.meta["anatomy_min_queries"] == MIN_QUERIES
    assert a.summary["anatomy"]["epsilon"] == EPSILON
    assert a.gate_sink.empty                                                      # an ungated model
    for table, columns in Anatomy.TABLES.items():
        if table != "gate_sink":
            assert list(getattr(a, table).columns) == list(columns), table
    assert set(Anatomy.TABLES) <= set(schema.OPTIONAL_TABLES)


def test_off_by_default_and_nothing_listens(loaded):
    lm = loaded("official_headwise")
    cap = probe.Capture(lm.model, lm.layout)
    assert not cap.wants("attn.hook_attention")
    assert cap.metrics["anatomy"].reducers() == []                  # nothing saved by --resume, merged
    on = probe.Capture(lm.model, lm.layout, anatomy=True, vocab_size=256)
    assert on.wants("attn.hook_attention") and on.wants("attn.hook_gate")
    # One AnatomyStats per attention layer and the per-sequence values of them all.
    assert len(on.reducers()) == len(cap.reducers()) + len(lm.layout.attention_layers) + 1


# -- gate-sink coupling on a gated model ------------------------------------------------------------

def qwen3_next_gate_means(model, ids: list[int]) -> dict[int, torch.Tensor]:
    """layer -> (H, L) the sigmoid gate of each query and head, mean over the head's dimensions,
    as Qwen3-Next's attention forms it: q_proj's output per head is [query | gate logits]."""
    cfg = model.config
    D, means, hooks = cfg.head_dim, {}, []
    for i, layer in enumerate(model.model.layers):
        attn = getattr(layer, "self_attn", None)
        if attn is None:
            continue

        def keep(module, args, out, i=i):
            gate = out[0].view(out.shape[1], -1, 2 * D)[..., D:]                  # (L, H, D)
            means[i] = torch.sigmoid(gate.double()).mean(-1).T                    # (H, L)
        hooks.append(attn.q_proj.register_forward_hook(keep))
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return means


def test_gate_sink_equals_gate_module_and_eager_sink_attention(checkpoint):
    """Per (layer, head, bin of the attention a query puts on its head's top key): query counts
    exactly, mean sink attention and mean gate within 1e-5, gate_std within 1e-5, from the gate
    module's output and eager P of each sequence alone (unequal lengths: padding)."""
    lm = probe.load(checkpoint("qwen3_next"))
    g = torch.Generator().manual_seed(4)
    rows = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (48, 33, 40)]
    a = probe.analyze(lm, rows, per_document=True, seq_len=48, batch_size=2, bos="none", display_len=0,
                      progress=False, anatomy=True)
    H = lm.layout.num_heads
    sums, eagers = {}, []
    for ids in rows:
        eager = eager_attentions(lm.model, ids, lm.layout.attention_layers)
        gates = qwen3_next_gate_means(lm.model, ids)
        eagers.append(eager)
        for layer in lm.layout.attention_layers:
            p = eager[layer]                                                      # (H, L, L)
            score, _, count = column_means(p, None)
            score = torch.where(count >= MIN_QUERIES, score, -math.inf)
            top = score.argmax(-1)                                                # (H,), lowest on ties
            sink = p[torch.arange(H), :, top]                                     # (H, L)
            bins = (sink * GATE_BINS).long().clamp(0, GATE_BINS - 1)
            for h in range(H):
                for t in range(len(ids)):
                    s = sums.setdefault((layer, h, int(bins[h, t])), [0, 0.0, 0.0, 0.0])
                    g = float(gates[layer][h, t])
                    s[0] += 1
                    s[1] += float(sink[h, t])
                    s[2] += g
                    s[3] += g * g
    table = a.gate_sink
    assert len(table) == len(sums)
    for r in table.itertuples():
        n, att, g, g2 = sums[(r.layer, r.head, round(r.attention_lo * GATE_BINS))]
        assert r.queries == n
        assert r.attention == pytest.approx(att / n, abs=TOL)
        assert r.gate == pytest.approx(g / n, abs=TOL)
        assert r.gate_std == pytest.approx(math.sqrt(max(g2 / n - (g / n) ** 2, 0.0)), abs=TOL)
        assert r.attention_hi == pytest.approx(r.attention_lo + 1 / GATE_BINS)
    assert table.queries.sum() == H * sum(len(r) for r in rows) * len(lm.layout.attention_layers)
    for layer in lm.layout.attention_layers:
        assert_positions_match(a.received_by_position, layer, reference_positions([e[layer] for e in eagers], None))


def test_run_directories_with_and_without_the_tables_load(planted_run, tmp_path):
    """The tables are optional (runs without them load, empty), but one that is there must have
    every column: a missing one is an error naming it."""
    from probe import reports

    a, _, _ = planted_run
    a.save(tmp_path / "on")
    runs = reports.load_runs(tmp_path / "on")
    assert len(runs.received_by_position) == len(a.received_by_position) and runs.gate_sink.empty
    assert probe.Analysis.load(tmp_path / "on").secondary_sinks.equals(runs.secondary_sinks)
    off = probe.Analysis(meta={"name": "off"}, summary={"model": "off"}, first_token=a.first_token)
    off.save(tmp_path / "off")
    assert reports.load_runs(tmp_path / "off").value_drains.empty
    table = tmp_path / "on" / "value_drains.csv"
    table.write_text(pd.read_csv(table).drop(columns="norm_share").to_csv(index=False))
    with pytest.raises(ValueError, match="lacks the column norm_share"):
        reports.load_runs(tmp_path / "on")


def test_an_interrupted_anatomy_run_resumes_to_identical_tables(checkpoint, text_file, tmp_path, monkeypatch,
                                                                 capsys):
    """The anatomy reducers are saved in OUT.partial/ and continued (the same tables as a whole
    run, secondary-sink list included); resuming without --anatomy is refused (the fingerprint)."""
    from probe.api.cli import main
    from tests.run.interrupted_runs import _interrupt_after, _tables

    ckpt = str(checkpoint("official_headwise"))
    common = ["--data", str(text_file), "--seq-len", "32", "--batch-size", "2", "--quiet", "--anatomy"]
    assert main(["analyze", ckpt, "--out", str(tmp_path / "whole"), *common]) == 0
    out = tmp_path / "resumed"
    with monkeypatch.context() as m:
        _interrupt_after(m, 2)
        assert main(["analyze", ckpt, "--out", str(out), *common, "--save-every", "0"]) == 130
    assert main(["analyze", ckpt, "--out", str(out), *common[:-1], "--resume"]) == 2
    assert "another model, weights, data or options" in capsys.readouterr().err
    assert main(["analyze", ckpt, "--out", str(out), *common, "--resume"]) == 0
    whole, resumed = _tables(tmp_path / "whole"), _tables(out)
    assert whole.keys() == resumed.keys() and set(Anatomy.TABLES) - {"secondary_sinks"} <= {
        name[:-4] for name in whole}
    for name in whole:
        same_frames(whole[name], resumed[name], name)
