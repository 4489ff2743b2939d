"""The per-token series of Gated DeltaNet layers (probe/metrics/token_series/, --gdn) on the tiny
hybrids (Qwen3-Next: fused projections; Qwen3.5: separate ones; 4 value heads over 2 key heads),
in float32, against what the model computes, recorded apart from probe's hooks:

- beta, exp(g) and SiLU(z) per token and value head equal the arguments transformers' module
  passes its gated-delta-rule kernel (recorded by wrapping the kernel function the module calls)
  and the output norm's gate input (a forward pre-hook on the norm): exactly for beta and the
  decay (the same float32 values), to 1e-6 for the head and dimension means;
- the key-0 share of each query, |c_{t,0}| / sum_s |c_{t,s}|, equals the one a float64
  step-by-step recurrence written here gives from the kernel's own q, k, v, beta and g, to 1e-6
  (float64 shares stored in float32);
- their pooled means equal the pass's own gdn reducers (gdn_gates.csv, gdn_keys.csv) to 1e-6,
  and, through probe.analyze and the run directory, the stored (quantised) series pool to the
  tables' numbers within half a quantisation step;
- softmax layers have no GDN values, GDN layers no softmax series, and without --gdn there is no
  GDN series at all.
"""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import probe
from probe.metrics.token_series import SERIES
from probe.results.token_series import KINDS as DTYPES
from probe.results.token_series import DECAYS, LOG_STEPS, SHARE_FLOOR, SPAN_STEPS, STEPS, TokenSeries

KINDS = ("qwen3_next", "qwen3_5")
B, T = 2, 40
TOL = 1e-6
GDN_SERIES = ("gdn_beta", "gdn_decay", "gdn_gate", "gdn_key0")


@pytest.fixture(scope="module")
def patcher():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module", params=KINDS)
def case(request, loaded, patcher):
    """One pass of a tiny hybrid with the series of every token; the kernel's arguments and the
    output norm's gate input of each GDN layer, recorded apart."""
    lm = loaded(request.param)
    module = importlib.import_module(type(lm.layout.layers[0].mixer).__module__)
    kernel, gate_in = [], {}
    original = module.torch_chunk_gated_delta_rule

    def recording(query, key, value, g, beta, **kw):
        kernel.append({n: x.detach().clone() for n, x in dict(q=query, k=key, v=value, g=g, beta=beta).items()})
        return original(query, key, value, g=g, beta=beta, **kw)
    patcher.setattr(module, "torch_chunk_gated_delta_rule", recording)
    linear = [p.index for p in lm.layout.layers if p.layer_type == "linear_attention"]
    handles = [lm.layout.layers[i].mixer.norm.register_forward_pre_hook(
        lambda m, a, i=i: gate_in.__setitem__(i, a[1].detach().clone())) for i in linear]
    ids = torch.randint(3, 200, (B, T), generator=torch.Generator().manual_seed(7))
    cap = probe.Capture(lm.model, lm.layout, gdn=True, anatomy=True, token_series=B * T,
                        vocab_size=lm.model.config.vocab_size)
    try:
        with torch.no_grad(), cap, cap.batch(ids):
            cap.observe_logits(lm.model(input_ids=ids, use_cache=False).logits)
    finally:
        for h in handles:
            h.remove()
        patcher.undo()
    assert len(kernel) == len(linear)
    return lm, cap, cap.metrics["token_series"].captured(), dict(zip(linear, kernel)), gate_in


def _rows(values: np.ndarray) -> np.ndarray:
    """(..., B*T) -> (..., B, T)."""
    return values.reshape(*values.shape[:-1], B, T)


def _heads(values: np.ndarray) -> np.ndarray:
    """(H, B*T) -> (B, T, H), as the model's tensors."""
    return _rows(values).transpose(1, 2, 0)


def test_beta_decay_and_gate_are_the_models_own(case):
    lm, cap, got, kernel, gate_in = case
    s = got["series"]
    for layer, own in kernel.items():
        beta, decay = own["beta"].float(), own["g"].float().exp()                  # (B, T, Hv)
        np.testing.assert_array_equal(_heads(s["gdn_beta_heads"][layer]), beta.numpy())
        np.testing.assert_array_equal(_heads(s["gdn_decay_heads"][layer]), decay.numpy())
        np.testing.assert_allclose(_rows(s["gdn_beta"][layer]), beta.double().mean(-1).numpy(), atol=TOL, rtol=0)
        np.testing.assert_allclose(_rows(s["gdn_decay"][layer]), decay.double().mean(-1).numpy(), atol=TOL, rtol=0)
        Hv = beta.shape[-1]
        silu = F.silu(gate_in[layer].double()).reshape(B, T, Hv, -1).mean(-1)     # (B, T, Hv)
        np.testing.assert_allclose(_heads(s["gdn_gate_heads"][layer]), silu.numpy(), atol=TOL, rtol=0)
        np.testing.assert_allclose(_rows(s["gdn_gate"][layer]), silu.mean(-1).numpy(), atol=TOL, rtol=0)


def _key0_by_recurrence(q, k, v, beta, g) -> torch.Tensor:
    """(H, T) float64: |c_{t,0}| / sum_s |c_{t,s}|, with each term c_{t,s} key s's own part of the
    state, written at s (k_s u_s^T, u_s what the delta rule writes), decayed by e^{g} at every
    later step and read by q_t; step by step, one position at a time."""
    H, L, dk = k.shape
    parts = torch.zeros(H, L, dk, v.shape[-1], dtype=torch.float64)
    share = torch.empty(H, L, dtype=torch.float64)
    for t in range(L):
        parts *= g[:, t].exp()[:, None, None, None]
        S = parts.sum(1)                                               # e^{g_t} S_{t-1}
        u = beta[:, t, None] * (v[:, t] - torch.einsum("hkd,hk->hd", S, k[:, t]))
        parts[:, t] = k[:, t, :, None] * u[:, None, :]
        c = torch.einsum("hskd,hk->hsd", parts[:, :t + 1], q[:, t]).norm(dim=-1)   # (H, t + 1)
        share[:, t] = c[:, 0] / c.sum(1)
    return share


def test_key0_share_equals_a_step_by_step_recurrence(case):
    lm, cap, got, kernel, gate_in = case
    heads = got["series"]["gdn_key0_heads"]
    for layer, own in kernel.items():
        Hv, nk = own["beta"].shape[-1], own["q"].shape[2]
        dk = own["q"].shape[-1]
        l2 = lambda x: x / (x * x).sum(-1, keepdim=True).add(1e-6).sqrt()      # the kernel's l2norm
        q = (l2(own["q"].double()) / math.sqrt(dk)).repeat_interleave(Hv // nk, 2)
        k = l2(own["k"].double()).repeat_interleave(Hv // nk, 2)
        for row in range(B):
            H = lambda x: x[row].transpose(0, 1).double()
            want = _key0_by_recurrence(H(q), H(k), H(own["v"]), H(own["beta"]), H(own["g"]))   # (Hv, T)
            mine = _rows(heads[layer])[:, row]                                   # (Hv, T)
            np.testing.assert_allclose(mine, want.numpy(), atol=TOL, rtol=0)
            np.testing.assert_allclose(_rows(got["series"]["gdn_key0"][layer])[row], want.mean(0).numpy(),
                                       atol=TOL, rtol=0)


def test_pooled_means_equal_the_gdn_reducers(case):
    lm, cap, got, kernel, gate_in = case
    s, gdn = got["series"], cap.metrics["gdn"]
    for layer in kernel:
        stats = gdn.tokens[layer]
        for qi, name in enumerate(("gdn_gate", "gdn_beta", "gdn_decay")):      # QUANTITIES' order
            mean = stats.metrics(qi)["mean"][0].numpy()                          # group all, (Hv,)
            np.testing.assert_allclose(s[name + "_heads"][layer].astype(np.float64).mean(-1), mean, atol=TOL, rtol=0)
            assert float(s[name][layer].astype(np.float64).mean()) == pytest.approx(float(mean.mean()), abs=TOL)
        keys = gdn.keys[layer].values()
        rest = _rows(s["gdn_key0_heads"][layer])[:, :, 1:].astype(np.float64)     # queries t >= 1
        np.testing.assert_allclose(rest.reshape(len(rest), -1).mean(-1), keys["key0_share"].numpy(), atol=TOL, rtol=0)
        everyone = s["gdn_key0_heads"][layer].astype(np.float64).mean(-1)
        np.testing.assert_allclose(everyone, keys["key0_share_all"].numpy(), atol=TOL, rtol=0)


def test_softmax_layers_have_no_gdn_values_and_gdn_layers_no_softmax_ones(case):
    lm, cap, got, kernel, gate_in = case
    s = got["series"]
    softmax = [i for i in range(len(lm.layout.layers)) if i not in kernel]
    assert softmax
    for name in GDN_SERIES:
        assert np.isnan(s[name][softmax]).all() and not np.isnan(s[name][list(kernel)]).any(), name
        assert s[name + "_heads"].shape[1] == kernel[next(iter(kernel))]["beta"].shape[-1]   # value heads
    assert np.isnan(s["first_token"][list(kernel)]).all() and not np.isnan(s["first_token"][softmax]).any()


def test_no_gdn_series_without_gdn(loaded):
    lm = loaded("qwen3_5")
    ids = torch.randint(3, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    cap = probe.Capture(lm.model, lm.layout, token_series=12, anatomy=True, vocab_size=lm.model.config.vocab_size)
    with torch.no_grad(), cap, cap.batch(ids):
        cap.observe_logits(lm.model(input_ids=ids, use_cache=False).logits)
    names = set(cap.metrics["token_series"].captured()["series"])
    assert "first_token" in names and not any(n.startswith("gdn_") for n in names)


def test_gdn_per_head_series_are_8_bit_and_their_head_means_finer():
    """The precision probe/results/token_series.py and docs/gdn.md state: every per-head GDN series
    in one byte per value (they are most of a hybrid's viewer page), the head means in the 12-bit
    kinds; the key-0 shares on a log scale (a trained hybrid's are 1e-5 .. 1e-3)."""
    heads = {name: kind for name, (_, per_head, kind) in SERIES.items() if name.startswith("gdn_") and per_head}
    assert heads == {"gdn_gate_heads": "span8", "gdn_beta_heads": "span8", "gdn_decay_heads": "decay8",
                     "gdn_key0_heads": "share8"}
    assert all(DTYPES[kind] == np.uint8 for kind in heads.values())
    means = {name: SERIES[name][2] for name in ("gdn_gate", "gdn_beta", "gdn_decay", "gdn_key0")}
    assert means == {"gdn_gate": "span", "gdn_beta": "span", "gdn_decay": "decay", "gdn_key0": "share"}
    assert {DTYPES[kind] for kind in means.values()} == {np.uint16}


def test_stored_gdn_values_are_the_captured_ones_within_half_a_step(case, tmp_path):
    lm, cap, got, kernel, gate_in = case
    TokenSeries.from_capture(got, SERIES).write(tmp_path)
    back = TokenSeries.read(tmp_path)
    for name in (f"{n}{h}" for n in GDN_SERIES for h in ("", "_heads")):
        v, stored, s = got["series"][name].astype(np.float64), back.values(name), back.header["series"][name]
        assert (np.isnan(stored) == np.isnan(v)).all(), name
        ok = ~np.isnan(v)
        if s["kind"] in STEPS:
            assert np.abs(stored[ok] - v[ok]).max() <= 0.5 / STEPS[s["kind"]] + 1e-12, name
        elif s["kind"] in SPAN_STEPS:
            assert s["lo"] == v[ok].min() and s["hi"] == v[ok].max(), name
            assert np.abs(stored[ok] - v[ok]).max() <= 0.5 * (s["hi"] - s["lo"]) / SPAN_STEPS[s["kind"]] + 1e-12, name
        elif s["kind"] not in DECAYS:      # share: the value within half a step of its log scale,
            floor = SHARE_FLOOR if s["kind"].startswith("share") else 0.0          # 0 below the floor
            assert (stored[ok][v[ok] < floor] == 0).all() and (stored[ok][v[ok] == 0] == 0).all(), name
            half = 0.5 * (s["hi"] - s["lo"]) / LOG_STEPS[s["kind"]]
            positive = v[ok] >= max(floor, np.finfo(np.float64).tiny)
            assert np.abs(np.log(stored[ok][positive]) - np.log(v[ok][positive])).max() <= half + 1e-9, name
        else:                  # decay: d = -ln(value) within half a step of its log scale
            d, d_stored = -np.log(v[ok]), -np.log(stored[ok])
            assert s["lo"] == pytest.approx(np.log(d[d > 0].min())) and s["hi"] == pytest.approx(np.log(d.max()))
            assert (d_stored[d == 0] == 0).all(), name
            half = 0.5 * (s["hi"] - s["lo"]) / LOG_STEPS[s["kind"]]
            assert np.abs(np.log(d_stored[d > 0]) - np.log(d[d > 0])).max() <= half + 1e-9, name


def half_step(series: TokenSeries, name: str) -> float:
    """The largest error a value of `name` can carry from its quantisation, absolute."""
    s = series.header["series"][name]
    kind = s["kind"]
    if kind in STEPS:
        return 0.5 / STEPS[kind]
    if kind in SPAN_STEPS:
        return 0.5 * (s["hi"] - s["lo"]) / SPAN_STEPS[kind]
    half = 0.5 * (s["hi"] - s["lo"]) / LOG_STEPS[kind]
    if kind not in DECAYS:   # share: within a relative half step (values up to e^hi), or 0 below the floor
        return math.exp(s["hi"]) * math.expm1(half) + SHARE_FLOOR
    # decay: d = -ln(value) within a relative half step, so |value change| <= value * d * (e^x - 1)
    # with x the half step in ln d; value * d = d e^-d <= 1/e.
    return math.expm1(half) / math.e


@pytest.mark.parametrize("kind", KINDS)
def test_a_runs_stored_series_pool_to_its_gdn_tables(kind, checkpoint, tmp_path):
    ids = torch.randint(3, 200, (3, 32), generator=torch.Generator().manual_seed(2))
    a = probe.analyze(checkpoint(kind), ids, bos="none", batch_size=2, progress=False, resamples=0,
                      gdn=True, anatomy=True, token_series=3 * 32)
    a.save(tmp_path / "run")
    series = probe.Analysis.load(tmp_path / "run").token_series
    assert {f"{n}{h}" for n in GDN_SERIES for h in ("", "_heads")} <= set(series.names)
    gates, keys = a.tables["gdn_gates"], a.tables["gdn_keys"]
    positions = series.arrays["positions"]
    for layer in a.meta["gdn"]:
        for quantity, name in (("gate_silu", "gdn_gate"), ("beta", "gdn_beta"), ("decay", "gdn_decay")):
            rows = gates[(gates.layer == layer) & (gates.quantity == quantity) & (gates.group == "all")
                         & (gates.metric == "mean")].sort_values("head")
            per_head = series.values(name + "_heads")[layer].mean(-1)
            np.testing.assert_allclose(per_head, rows.value.to_numpy(), atol=half_step(series, name + "_heads"), rtol=0)
            assert series.values(name)[layer].mean() == pytest.approx(rows.value.mean(), abs=half_step(series, name))
        share = keys[(keys.layer == layer) & (keys.metric == "key0_share")].sort_values("head").value.to_numpy()
        stored = series.values("gdn_key0_heads")[layer][:, positions >= 1].mean(-1)
        np.testing.assert_allclose(stored, share, atol=half_step(series, "gdn_key0_heads"), rtol=0)
        head_mean = series.values("gdn_key0")[layer][positions >= 1].mean()
        assert head_mean == pytest.approx(share.mean(), abs=half_step(series, "gdn_key0"))
