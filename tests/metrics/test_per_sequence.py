"""per_sequence.csv against a direct per-sequence computation on a tiny gated model: F-Attn sums
from the model's own eager attention, M-Act from its own layer outputs, the loss from its own
logits, gate scores and sparsity from a probe pass over that sequence alone; the intervals of the
saved table equal those of the direct values, and the point of each (W = ones) is the summary's."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

import probe
from probe.intervals import SequenceValues, intervals_of
from probe.results.analysis import Analysis
from tests.samples import TEXT

TEXTS = [TEXT[:60], TEXT[400:520], TEXT[900:950], TEXT[1200:1330]]      # unequal: padded batches


@pytest.fixture(scope="module")
def run(checkpoint, tmp_path_factory):
    ck = checkpoint("official_headwise")
    a = probe.analyze(ck, texts=TEXTS, per_document=True, seq_len=64, batch_size=3, display_len=0,
                      progress=False)
    saved = Analysis.load(a.save(tmp_path_factory.mktemp("per-seq") / "run"))
    return ck, a, saved


def per_sequence(frame: pd.DataFrame, quantity: str, key: str = "") -> pd.DataFrame:
    rows = frame[(frame["quantity"] == quantity) & (frame["key"].fillna("") == key)]
    return rows


def direct(ck, sequences):
    """Per sequence: eager P[t, 0] sums (A, H), query counts, uniform sums, max |layer output| per
    layer, summed next-token NLL and pairs, each from one unpadded forward of the model."""
    model = probe.load(ck).model
    outputs = {}
    layers = model.model.layers
    hooks = [layer.register_forward_hook(lambda m, a, out, i=i: outputs.__setitem__(i, out[0] if isinstance(out, tuple) else out))
             for i, layer in enumerate(layers)]
    model.set_attn_implementation("eager")
    rows = []
    try:
        for ids in sequences:
            with torch.no_grad():
                out = model(input_ids=ids[None], use_cache=False, output_attentions=True)
            T = len(ids)
            p0 = torch.stack([a[0, :, 1:, 0].double().sum(1) for a in out.attentions])      # (L, H)
            logits = out.logits[0, :-1].double()
            nll = torch.nn.functional.cross_entropy(logits, ids[1:], reduction="sum")
            rows.append({"f_sum": p0.numpy(), "f_n": T - 1, "uniform": sum(1 / (t + 1) for t in range(1, T)),
                         "m_act": [float(outputs[i].abs().max()) for i in range(len(layers))],
                         "nll": float(nll), "pairs": T - 1})
    finally:
        for h in hooks:
            h.remove()
    return rows


def test_per_sequence_values_equal_the_models_own_attention_outputs_and_loss(run):
    ck, a, saved = run
    sequences = [torch.tensor(x) for x in _sequences(ck)]
    ref = direct(ck, sequences)
    ps = saved.per_sequence
    assert sorted(ps["sequence"].unique()) == list(range(len(sequences)))
    f = per_sequence(ps, "f_attn_sum").pivot_table(index="sequence", columns=["layer", "head"], values="value")
    for s, r in enumerate(ref):
        np.testing.assert_allclose(f.loc[s].to_numpy().reshape(r["f_sum"].shape), r["f_sum"], rtol=2e-6)  # float32 P
        n = per_sequence(ps, "f_attn_n")
        assert (n[n.sequence == s]["value"] == r["f_n"]).all()
        u = per_sequence(ps, "f_attn_uniform")
        np.testing.assert_allclose(u[u.sequence == s]["value"], r["uniform"], rtol=1e-12)
        m = per_sequence(ps, "m_act", "resid_post").sort_values("layer")
        np.testing.assert_allclose(m[m.sequence == s]["value"], r["m_act"], rtol=1e-5)
        nll = per_sequence(ps, "nll")
        assert float(nll[nll.sequence == s]["value"].iloc[0]) == pytest.approx(r["nll"], rel=1e-5)


def _sequences(ck):
    from probe.data.sequences import build_dataset
    from probe.load.loader import load_tokenizer

    tok = load_tokenizer(ck)
    return [s.tolist() for s in build_dataset(None, tok, seq_len=64, bos="auto", per_document=True,
                                               texts=TEXTS).sequences]


def gate_scores_alone(ck, ids) -> dict[int, torch.Tensor]:
    """Per gated layer the gate module's scores (T, H, Dg), float64, from one unpadded forward of
    the model over `ids` (no probe pass: the module's own output, read through the layout)."""
    lm = probe.load(ck)
    L, out, hooks = lm.layout, {}, []
    for p in L.layers:
        if p.gate_module is not None:
            hooks.append(p.gate_module.register_forward_hook(
                lambda m, args, o, i=p.index: out.__setitem__(i, L.gate.scores(o, L.num_heads, L.num_kv_heads,
                                                                               L.head_dim)[0].double())))
    try:
        with torch.no_grad():
            lm.model(input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return out


def test_gate_and_sparsity_sums_equal_a_pass_over_each_sequence_alone(checkpoint, run):
    """A sequence's gate-score sum, count and count below 0.1 per (layer, head) against the gate
    module's own output over that sequence alone: the counts exactly, the sum to 1e-6 relative
    (the padded batch rounds float32 differently), the count below 0.1 within one score either
    side of the cut. Its sparsity counts against probe's sparsity.csv of the sequence alone
    (sparsity is checked against direct counts in tests/capture/test_capture.py)."""
    from probe.metrics.per_sequence import LOW_GATE

    ck, a, saved = run
    ps = saved.per_sequence
    for s, ids in enumerate(_sequences(ck)[:2]):
        alone = probe.analyze(ck, data=np.asarray([ids]), display_len=0, progress=False, bos="none",
                              seq_len=len(ids))
        mine = ps[ps.sequence == s]
        scores = gate_scores_alone(ck, ids)
        assert scores
        for q, reduce, tolerance in (("gate_n", lambda g: float(g.numel()), dict(rtol=0, atol=0)),
                                     ("gate_sum", lambda g: float(g.sum()), dict(rtol=1e-6, atol=0)),
                                     ("gate_low", lambda g: float((g < LOW_GATE).sum()), dict(rtol=0, atol=1))):
            got = per_sequence(mine, q).set_index(["layer", "head"])["value"]
            want = pd.Series({(layer, h): reduce(g[:, h]) for layer, g in scores.items() for h in range(g.shape[1])})
            assert set(got.index) == set(want.index), q
            np.testing.assert_allclose(got.loc[want.index], want, **tolerance, err_msg=q)
        for variant in ("ungated", "gated"):
            n = per_sequence(mine, "sparsity_n", variant).set_index("layer")["value"]
            for t in (1e-2, 1e-3):
                below = per_sequence(mine, "sparsity_below", variant)
                below = below[np.isclose(below.threshold, t)].set_index("layer")["value"]
                sp = alone.sparsity[(alone.sparsity.variant == variant) & np.isclose(alone.sparsity.threshold, t)]
                np.testing.assert_allclose((below / n).loc[sp.layer], sp["value"], rtol=0, atol=3 / n.min())


def test_the_point_of_every_interval_is_the_summarys_number(run):
    _, a, saved = run
    v = SequenceValues.from_frame(saved.per_sequence)
    ones = np.ones((1, v.sequences))
    s = a.summary
    for key, got in (("f_attn", v.f_attn(ones)), ("f_attn_uniform", v.f_attn_uniform(ones)),
                     ("sink_rate", v.sink_rate(ones, s["sink_epsilon"])), ("mean_gate", v.mean_gate(ones)),
                     ("m_act", v.m_act(ones)), ("loss", v.loss(ones))):
        assert float(got[0]) == pytest.approx(s[key], rel=1e-9), key
        assert s[f"{key}_lo"] <= s[key] <= s[f"{key}_hi"], key
    sp = a.sparsity
    for variant in ("ungated", "gated"):
        for t in (1e-2, 1e-3):
            want = sp[(sp.variant == variant) & np.isclose(sp.threshold, t)].set_index("layer")["value"]
            np.testing.assert_allclose(v.sparsity_layers(ones, variant, t)[0], want.loc[v.attention_layers], rtol=1e-12)
    assert s["intervals"]["sequences"] == len(TEXTS) and s["intervals"]["resamples"] == 1000


def test_intervals_from_the_saved_table_equal_those_of_the_direct_values(run):
    ck, a, saved = run
    ref = direct(ck, [torch.tensor(x) for x in _sequences(ck)])
    v = SequenceValues.from_frame(saved.per_sequence)
    S, A = len(ref), len(v.attention_layers)
    m = np.full((S, len(ref[0]["m_act"]), 4), np.nan)
    m[:, :, 3] = [r["m_act"] for r in ref]
    d = SequenceValues(S, v.attention_layers, v.layers, np.stack([r["f_sum"] for r in ref]),
                       np.array([[r["f_n"]] * A for r in ref], float), np.array([[r["uniform"]] * A for r in ref]),
                       None, None, None, {}, m, np.array([r["nll"] for r in ref]), np.array([r["pairs"] for r in ref], float))
    for name in ("f_attn", "m_act", "loss", "f_attn_layers"):
        saved_i, direct_i = intervals_of(v, getattr(v, name), 1000), intervals_of(d, getattr(d, name), 1000)
        for x, y in zip(saved_i, direct_i):
            np.testing.assert_allclose(x, y, rtol=2e-5, err_msg=name)
    # And the saved summary's interval is the one the table gives.
    assert intervals_of(v, v.f_attn, a.meta["resamples"])[1] == pytest.approx(a.summary["f_attn_lo"], rel=1e-12)
    assert not math.isnan(a.summary["f_attn_lo"])


@pytest.fixture(scope="module")
def anatomy_run(checkpoint):
    ck = checkpoint("official_headwise")
    return ck, probe.analyze(ck, texts=TEXTS, per_document=True, seq_len=64, batch_size=3, display_len=0,
                             anatomy=True, progress=False)


def test_key0_scores_per_sequence_equal_the_models_own_attention(anatomy_run):
    """With --anatomy: key 0's importance score in each sequence (the mean of P[t, 0] over its
    queries, t = 0 included) is the model's own eager attention's, to float32 rounding; the
    secondary-sink counts add up to the summary's."""
    ck, a = anatomy_run
    model = probe.load(ck).model
    model.set_attn_implementation("eager")
    ps = a.per_sequence
    got = per_sequence(ps, "key0_score").pivot_table(index="sequence", columns=["layer", "head"], values="value")
    for s, ids in enumerate(_sequences(ck)):
        with torch.no_grad():
            out = model(input_ids=torch.tensor(ids)[None], use_cache=False, output_attentions=True)
        want = torch.stack([att[0, :, :, 0].double().mean(1) for att in out.attentions])    # (L, H)
        np.testing.assert_allclose(got.loc[s].to_numpy().reshape(want.shape), want.numpy(), rtol=2e-6)
    assert (per_sequence(ps, "key0_n")["value"] == 1).all()
    assert per_sequence(ps, "secondary_sinks")["value"].sum() == a.summary["anatomy"]["secondary_sinks"]


def test_anatomy_intervals_point_at_the_received_attention_table(anatomy_run):
    """summary.json anatomy.key0_score / key0_sink_rate are received_by_position.csv's key-0 rows
    (mean over layers of the head-pooled score and sink rate), inside their own intervals; the
    saved table gives the same intervals again."""
    _, a = anatomy_run
    an = a.summary["anatomy"]
    rp = a.received_by_position
    key0 = rp[(rp["key_lo"] == 0) & (rp["head"] == -1)]
    assert an["key0_score"] == pytest.approx(key0["score"].mean(), rel=1e-12)
    assert an["key0_sink_rate"] == pytest.approx(key0["sink_rate"].mean(), rel=1e-12)
    assert an["key0_score_lo"] <= an["key0_score"] <= an["key0_score_hi"]
    assert an["key0_score_lo"] < an["key0_score_hi"]                    # four sequences differ
    v = SequenceValues.from_frame(a.per_sequence)
    _, lo, hi = intervals_of(v, v.key0_score_mean, a.meta["resamples"])
    assert (lo, hi) == (an["key0_score_lo"], an["key0_score_hi"])
    assert an["secondary_sinks_lo"] <= an["secondary_sinks"] <= an["secondary_sinks_hi"]


def test_runs_without_anatomy_keep_no_anatomy_rows(run):
    _, a, _ = run
    assert not a.per_sequence["quantity"].isin(["key0_score", "key0_n", "secondary_sinks"]).any()
    assert SequenceValues.from_frame(a.per_sequence).key0_score is None
