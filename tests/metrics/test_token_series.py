"""The per-token series (probe/metrics/token_series/) against independent computations on the
same tensors: eager softmax attention for the first-token share and the attention each key
receives, the model's own outputs for the layer output and the loss, the gate module's output
for the gate scores; their pooled means against the pass's own summary reducers; and the stored
(quantised) values against the captured ones, within half a quantisation step.

Tolerances: 1e-5 absolute on probabilities and gate scores (float32 softmax / sigmoid of the
same logits through two kernels: a few ulps of 1), 1e-5 relative on activations and the loss
(float32 reductions in another order)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from probe import Capture
from probe.core.events import EVENTS
from probe.metrics.token_series import SERIES
from probe.results.token_series import LOG_STEPS, STEPS, TokenSeries
from tests.capture.captures import ids_for
from tests.reference import eager_attentions, recorded

PROB_TOL = 1e-5
REL_TOL = 1e-5
B, T = 2, 24


def _capture(lm, ids, limit, **options):
    cap = Capture(lm.model, lm.layout, token_series=limit, anatomy=True,
                  vocab_size=lm.model.config.get_text_config().vocab_size, **options)
    with torch.no_grad(), cap:
        with cap.batch(ids):
            cap.observe_logits(lm.model(input_ids=ids, use_cache=False).logits)
    return cap


@pytest.fixture(scope="module", params=("official_headwise", "llama"))
def case(request, loaded):
    lm = loaded(request.param)
    ids = ids_for(lm.model, B=B, T=T, seed=5)
    cap = _capture(lm, ids, B * T)
    return lm, ids, cap, cap.metrics["token_series"].captured()


def _rows(values: np.ndarray) -> np.ndarray:
    """(..., B*T) -> (..., B, T): the series of every token, row by row."""
    return values.reshape(*values.shape[:-1], B, T)


def test_first_token_and_received_equal_eager_attention(case):
    lm, ids, cap, got = case
    eager = eager_attentions(lm.model, ids).attentions
    for layer, att in zip(lm.layout.attention_layers, [a for a in eager if a is not None]):
        p0 = att[:, :, :, 0].double()                                          # (B, H, T)
        heads = _rows(got["series"]["first_token_heads"][layer])               # (H, B, T)
        np.testing.assert_allclose(heads.transpose(1, 0, 2), p0.numpy(), atol=PROB_TOL, rtol=0)
        np.testing.assert_allclose(_rows(got["series"]["first_token"][layer]), p0.mean(1).numpy(),
                                   atol=PROB_TOL, rtol=0)
        # Key k is seen by the queries t >= k: their mean attention on it, then over heads.
        seen = torch.arange(T, 0, -1, dtype=torch.float64)                    # (T,) queries per key
        received = (att.double().sum(2) / seen).mean(1)                        # (B, T)
        np.testing.assert_allclose(_rows(got["series"]["received"][layer]), received.numpy(),
                                   atol=PROB_TOL, rtol=0)


def test_activations_and_loss_equal_the_models_outputs(case):
    lm, ids, cap, got = case
    with torch.no_grad(), recorded(lm.model, lm.layout) as rec:
        out = lm.model(input_ids=ids, output_hidden_states=True, use_cache=False)
    for p in lm.layout.layers:
        h = rec["sites"][(p.index, "resid_post")].abs()                        # (B, T, C)
        if p.index + 1 < len(lm.layout.layers):     # the last hidden state is after the final norm
            torch.testing.assert_close(h, out.hidden_states[p.index + 1].abs(), rtol=0, atol=0)
        largest, dim = h.max(-1)
        np.testing.assert_allclose(_rows(got["series"]["max_abs"][p.index]), largest.numpy(), rtol=REL_TOL)
        assert (_rows(got["series"]["max_abs_dim"][p.index]) == dim.numpy()).all()
    nll = F.cross_entropy(out.logits[:, :-1].transpose(1, 2).float(), ids[:, 1:], reduction="none")  # (B, T-1)
    loss = _rows(got["series"]["loss"][0])
    assert np.isnan(loss[:, 0]).all()                    # position 0 predicts nothing
    np.testing.assert_allclose(loss[:, 1:], nll.numpy(), rtol=REL_TOL, atol=1e-6)


def test_gate_scores_equal_the_gate_module(case):
    lm, ids, cap, got = case
    L = lm.layout
    if not L.gated:
        assert "gate" not in got["series"]
        return
    with torch.no_grad(), recorded(lm.model, L) as rec:
        lm.model(input_ids=ids, use_cache=False)
    for layer, out in rec["gate_out"].items():
        g = L.gate.scores(out, L.num_heads, L.num_kv_heads, L.head_dim).float().mean(-1)  # (B, T, H)
        np.testing.assert_allclose(_rows(got["series"]["gate"][layer]), g.mean(-1).numpy(), atol=PROB_TOL, rtol=0)
        heads = _rows(got["series"]["gate_heads"][layer]).transpose(1, 2, 0)   # (B, T, H)
        np.testing.assert_allclose(heads, g.numpy(), atol=PROB_TOL, rtol=0)


def test_pooled_means_equal_the_summary_reducers(case):
    lm, ids, cap, got = case
    s = got["series"]
    for layer in lm.layout.attention_layers:
        # F-Attn: queries t >= 1, mean over heads of each head's mean.
        rest = _rows(s["first_token"][layer])[:, 1:]
        assert float(rest.astype(np.float64).mean()) == pytest.approx(
            float(cap.first_token[layer].f_attn().mean()), abs=PROB_TOL)
        if lm.layout.gated:
            assert float(s["gate"][layer].astype(np.float64).mean()) == pytest.approx(
                cap.gates[layer].mean(), abs=PROB_TOL)
    for p in lm.layout.layers:
        assert float(s["max_abs"][p.index].max()) == pytest.approx(
            cap.massive[(p.index, "resid_post")].max_abs(), rel=REL_TOL)
    assert float(np.nanmean(s["loss"][0].astype(np.float64))) == pytest.approx(cap.loss.loss(), rel=REL_TOL)


def test_stored_values_are_the_captured_ones_within_half_a_step(case, tmp_path):
    lm, ids, cap, got = case
    series = TokenSeries.from_capture(got, SERIES)
    series.write(tmp_path)
    back = TokenSeries.read(tmp_path)
    assert back.tokens == B * T and (back.arrays["token_ids"] == ids.flatten().numpy()).all()
    assert back.header["rows"] == [[0, T], [1, T]]
    for name, values in got["series"].items():
        stored, kind = back.values(name), back.header["series"][name]["kind"]
        v = values.astype(np.float64)
        assert (np.isnan(stored) == np.isnan(v)).all(), name
        ok = ~np.isnan(v)
        if kind in STEPS:
            assert np.abs(stored[ok] - v[ok]).max() <= 0.5 / STEPS[kind] + 1e-12, name
        elif kind == "index":
            assert (stored[ok] == v[ok]).all(), name
        else:
            s = back.header["series"][name]
            half = 0.5 * (s["hi"] - s["lo"]) / LOG_STEPS[kind]
            positive = ok & (v > 0)
            assert np.abs(np.log(stored[positive]) - np.log(v[positive])).max() <= half + 1e-9, name


def test_only_the_first_tokens_of_the_first_rows_are_taken(loaded):
    lm = loaded("llama")
    ids = ids_for(lm.model, B=3, T=10, seed=2)
    valid = torch.ones_like(ids, dtype=torch.bool)
    valid[1, 7:] = False                  # dataset row 0 (batch row 1) padded after 7 tokens
    cap = Capture(lm.model, lm.layout, token_series=12)
    with torch.no_grad(), cap:
        # The rows arrive out of order: dataset rows 2, 0, 1.
        with cap.batch(ids, valid, torch.tensor([2, 0, 1])):
            cap.observe_logits(lm.model(input_ids=ids, use_cache=False).logits)
    got = cap.metrics["token_series"].captured()
    assert got["rows"] == [(0, 7), (1, 5)]
    assert (got["token_ids"] == torch.cat([ids[1, :7], ids[2, :5]]).numpy()).all()
    assert list(got["positions"]) == [*range(7), *range(5)]
    assert got["series"]["first_token"].shape[-1] == 12


def test_a_pass_that_never_sees_row_0_keeps_nothing(loaded):
    lm = loaded("llama")
    ids = ids_for(lm.model, B=1, T=8)
    cap = Capture(lm.model, lm.layout, token_series=100)
    with torch.no_grad(), cap:
        with cap.batch(ids, None, torch.tensor([3])):         # a resumed pass: rows 0-2 were skipped
            cap.observe_logits(lm.model(input_ids=ids, use_cache=False).logits)
    assert cap.metrics["token_series"].captured() is None
    off = Capture(lm.model, lm.layout, token_series=0)
    assert not any(off.metrics["token_series"].listens(event) for event in EVENTS)


def test_the_loss_of_a_row_without_the_loss_metric(loaded):
    """The series' own loss, block by block, when no loss metric left it (_row_loss)."""
    from probe.metrics.token_series.reduce import _row_loss

    lm = loaded("llama")
    ids = ids_for(lm.model, B=2, T=12, seed=4)
    with torch.no_grad():
        logits = lm.model(input_ids=ids, use_cache=False).logits
    nll = F.cross_entropy(logits[1, :-1].float(), ids[1, 1:], reduction="none")
    torch.testing.assert_close(_row_loss(logits, ids, 1), nll, rtol=REL_TOL, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_first_at_is_where_max_and_min_point(dtype):
    """first_at(x, max) and first_at(x, min) are the indices torch.max / torch.min return: ties
    (the first), signed zeros, and rows with NaN (the first NaN)."""
    from probe.metrics.token_series.reduce import first_at

    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (64, 576), generator=g).to(dtype)               # many ties
    x[5, 100], x[5, 7], x[9, 300] = float("nan"), float("nan"), float("nan")
    x[11] = 0.0
    x[11, 40] = -0.0
    x[12, 3:] = float("inf")
    for reduce in (torch.max, torch.min):
        value, index = reduce(x, -1)
        assert torch.equal(first_at(x, value), index), reduce
