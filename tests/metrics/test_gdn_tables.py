"""gdn_sparsity, gdn_head_norms, gdn_gates' mean_g / half_life and gdn_top_beta (probe/metrics/gdn/)
against numbers formed here from the tiny hybrids' own tensors (random Qwen3-Next, Qwen3.5,
OLMo-Hybrid and the trained arm as Qwen3.5 and Qwen3-Next, float32), recorded on a separate plain
forward of the same ids with plain hooks on the model's own modules, not with probe's capture:

- o and z: a forward pre-hook on the layer's RMSNormGated (`norm`, `o_norm` on OLMo-Hybrid);
- y: a forward pre-hook on the output projection (`out_proj`, `o_proj`): what it is given;
- g and beta: the arguments of the gated-delta-rule kernel function the module calls (wrapped);
- the normed output w * rmsnorm(o) the gate multiplies: formed here in float64 from o and the
  norm's own weight and epsilon (the random kinds' norm weights are all 1, the trained arm's
  0.80 to 1.09: there a missing weight changes the numbers).

Tolerances: shares below a threshold are exact counts (the table's share times the element count
is an integer, the count |x| < t gives, and the share equals it over the count to 1e-12); for the
normed output, formed here in float64 and by the model in float32, the count lies between those
of |x| < t (1 -+ 1e-6); the mean-gate control is read inside one 0.78%-wide log bin, so it is
within the share of values within 0.8% of t / m. Norms and means of the recorded tensors: 1e-12
relative (float64 sums in another order); of the normed output: 1e-6 (its float32 rounding).
"""
from __future__ import annotations

import importlib
import math

import pytest
import torch
import torch.nn.functional as F

import probe
from probe.core.options import THRESHOLDS
from tests.metrics.trained_hybrids import TRAINED_KINDS, trained_checkpoint

KINDS = ("qwen3_next", "qwen3_5", "olmo_hybrid") + TRAINED_KINDS
B, T = 2, 64
EXACT = 1e-12             # shares against counts / element counts; float64 norms and means
NORMED = 1e-6             # the float32 normed output against the float64 one formed here
BIN = 0.008               # a LogHistogram bin is at most 0.78% wide (2**-7 of its octave)
GROUPS = ("all", "first", "rest")


@pytest.fixture(scope="module")
def hybrid(checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("trained_tables")
    return lambda kind: trained_checkpoint(kind, root) if kind in TRAINED_KINDS else checkpoint(kind)


def _gdn_modules(model) -> dict:
    """layer -> its linear_attn module, by the model's own attribute names."""
    return {i: layer.linear_attn for i, layer in enumerate(model.model.layers) if hasattr(layer, "linear_attn")}


@pytest.fixture(scope="module", params=KINDS)
def measured(request, hybrid):
    """(tables, recorded, member): probe's GDN tables of one forward of (B, T) ids, and per GDN
    layer o, z, y (B, T, Hv, dv), g, beta (B, T, Hv), the norm's weight and epsilon, recorded on
    a separate plain forward of the same ids; member: group -> (B, T) bool."""
    lm = probe.load(hybrid(request.param))
    model, config = lm.model, lm.model.config
    Hv, dv = config.linear_num_value_heads, config.linear_value_head_dim
    ids = torch.randint(3, 200, (B, T), generator=torch.Generator().manual_seed(11))
    mixers = _gdn_modules(model)
    assert sorted(mixers) == [0, 1, 2]

    modeling = importlib.import_module(type(mixers[0]).__module__)
    original = modeling.torch_chunk_gated_delta_rule
    order, kernel = list(mixers), []
    rec = {i: {} for i in mixers}

    def recording(query, key, value, g, beta, **kw):
        kernel.append((g.detach().clone(), beta.detach().clone()))
        return original(query, key, value, g=g, beta=beta, **kw)

    handles = []
    for i, m in mixers.items():
        norm = getattr(m, "norm", None) or m.o_norm
        out = getattr(m, "out_proj", None) or m.o_proj
        rec[i].update(weight=norm.weight.detach().clone(), eps=float(norm.variance_epsilon))

        def pre_norm(mod, args, i=i):
            rec[i]["o"], rec[i]["z"] = (a.detach().clone().reshape(B, T, Hv, dv) for a in args[:2])

        def pre_out(mod, args, i=i):
            rec[i]["y"] = args[0].detach().clone().reshape(B, T, Hv, dv)
        handles += [norm.register_forward_pre_hook(pre_norm), out.register_forward_pre_hook(pre_out)]
    mp = pytest.MonkeyPatch()
    mp.setattr(modeling, "torch_chunk_gated_delta_rule", recording)
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        mp.undo()
        for h in handles:
            h.remove()
    assert len(kernel) == len(order)
    for i, (g, beta) in zip(order, kernel):
        rec[i]["g"], rec[i]["beta"] = g, beta

    cap = probe.Capture(model, lm.layout, gdn=True, vocab_size=config.vocab_size)
    with torch.no_grad(), cap, cap.batch(ids):
        model(input_ids=ids, use_cache=False)
    tables = cap.tables("m", lm.tokenizer)
    pos = torch.arange(T).expand(B, T)
    member = {"all": torch.ones(B, T, dtype=torch.bool), "first": pos == 0, "rest": pos >= 1}
    return tables, rec, member, ids, request.param


def _normed64(r) -> torch.Tensor:
    """w * rmsnorm(o) in float64, from the recorded o and the norm's own weight and epsilon."""
    o = r["o"].double()
    return r["weight"].double() * o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + r["eps"])


def test_sparsity_shares_are_counts_of_the_recorded_tensors(measured):
    """gdn_sparsity per layer, variant and threshold: pre_gate is the share of the norm's input o,
    gated that of out_proj's input y (exact counts); normed that of w * rmsnorm(o) (between the
    float64 counts at t (1 -+ 1e-6)); mean_gate that of |w * rmsnorm(o)| * |mean SiLU(z)| (within
    the values of one log bin around t)."""
    tables, rec, _, _, kind = measured
    table = tables["gdn_sparsity"]
    assert sorted(set(table.layer)) == sorted(rec), kind
    for layer, r in rec.items():
        rows = table[table.layer == layer]
        assert set(rows.variant) == {"pre_gate", "normed", "mean_gate", "gated"}, (kind, layer)
        normed = _normed64(r).abs()
        m = abs(float(F.silu(r["z"].double()).mean()))
        total = r["o"].numel()
        for variant in ("pre_gate", "normed", "mean_gate", "gated"):
            got = rows[rows.variant == variant].set_index("threshold").value
            assert sorted(got.index) == sorted(THRESHOLDS), (kind, layer, variant)
            for t, share in got.items():
                where = (kind, layer, variant, t)
                if variant in ("pre_gate", "gated"):
                    x = r["o" if variant == "pre_gate" else "y"].abs()
                    count = int((x < t).sum())
                    assert round(share * total) == count, where
                    assert abs(share - count / total) <= EXACT, where
                elif variant == "normed":
                    n = round(share * total)
                    assert abs(share - n / total) <= EXACT, where
                    lo, hi = int((normed < t * (1 - NORMED)).sum()), int((normed < t * (1 + NORMED)).sum())
                    assert lo <= n <= hi, (where, lo, n, hi)
                else:
                    exact = float((normed * m < t).double().mean())
                    near = float(((normed >= t / m * (1 - BIN)) & (normed < t / m * (1 + BIN))).double().mean())
                    assert abs(share - exact) <= near + EXACT, (where, share, exact, near)
        # Not a check of equal numbers: the gate changes the shares here.
        pre, gated = (rows[rows.variant == v].sort_values("threshold").value.to_numpy() for v in ("pre_gate", "gated"))
        assert (pre != gated).any(), (kind, layer)


def test_head_norms_are_the_norms_of_the_recorded_tensors(measured):
    """gdn_head_norms per layer, group and value head: tokens, and the mean over its tokens of
    ||o_h|| (pre), ||w * rmsnorm(o)_h|| (normed) and ||y_h|| (post) in float64, and post / normed."""
    tables, rec, member, _, kind = measured
    table = tables["gdn_head_norms"]
    assert sorted(set(table.layer)) == sorted(rec), kind
    for layer, r in rec.items():
        norms = {"pre": r["o"].double().norm(dim=-1), "normed": _normed64(r).norm(dim=-1),
                 "post": r["y"].double().norm(dim=-1)}                                     # (B, T, Hv)
        rows = table[table.layer == layer]
        assert set(rows.group) == set(GROUPS), (kind, layer)
        for group in GROUPS:
            mask = member[group]
            by_head = rows[rows.group == group].set_index("head")
            assert sorted(by_head.index) == list(range(r["o"].shape[2]))
            for h, row in by_head.iterrows():
                where = (kind, layer, group, h)
                want = {k: float(v[..., h][mask].mean()) for k, v in norms.items()}
                assert row.tokens == int(mask.sum()), where
                assert row.pre == pytest.approx(want["pre"], rel=EXACT, abs=0), where
                assert row.post == pytest.approx(want["post"], rel=EXACT, abs=0), where
                assert row.normed == pytest.approx(want["normed"], rel=NORMED, abs=0), where
                assert row.ratio_of_means == pytest.approx(want["post"] / want["normed"], rel=NORMED, abs=0), where


def test_mean_g_and_half_life_are_those_of_the_kernels_decay(measured):
    """gdn_gates, quantity decay: mean_g per layer, group and value head is the float64 mean of
    the g the module passed its kernel (g <= 0, the log decay), half_life = ln 0.5 / mean_g (> 0:
    the tokens until exp(sum g) halves); 1e-12 relative. Also the decay's mean, of exp(g) (1e-6:
    exp in float32)."""
    tables, rec, member, _, kind = measured
    gates = tables["gdn_gates"]
    decay = gates[gates.quantity == "decay"]
    for layer, r in rec.items():
        g = r["g"].double()                                                                 # (B, T, Hv)
        assert bool((g <= 0).all())
        for group in GROUPS:
            mask = member[group]
            rows = decay[(decay.layer == layer) & (decay.group == group)]
            for h in range(g.shape[-1]):
                where = (kind, layer, group, h)
                value = rows[rows["head"] == h].set_index("metric").value
                mean_g = float(g[..., h][mask].mean())
                assert value["mean_g"] == pytest.approx(mean_g, rel=EXACT, abs=0), where
                assert value["half_life"] == pytest.approx(math.log(0.5) / mean_g, rel=EXACT, abs=0), where
                assert value["half_life"] > 0, where
                assert value["mean"] == pytest.approx(float(g[..., h][mask].exp().mean()), rel=NORMED, abs=0), where


def test_top_beta_are_the_largest_betas_the_kernel_was_given(measured):
    """gdn_top_beta per layer and value head: the 10 largest beta the module passed its kernel,
    largest first, with their sequence (batch row here), position and token id; beta exactly
    (float32 to float64), ties in the stated order: the earlier sequence, then position. (Layer
    0's beta is a function of the token alone, so a repeated token ties at the 10th value; the
    per-batch topk once picked among such ties before the order was applied.)"""
    tables, rec, _, ids, kind = measured
    top = tables["gdn_top_beta"]
    for layer, r in rec.items():
        beta = r["beta"].float()                                                            # (B, T, Hv)
        for h in range(beta.shape[-1]):
            where = (kind, layer, h)
            cands = sorted(((float(beta[s, p, h]), s, p) for s in range(B) for p in range(T)),
                           key=lambda c: (-c[0], c[1], c[2]))
            want = [(b, s, p, int(ids[s, p])) for b, s, p in cands[:10]]
            rows = top[(top.layer == layer) & (top["head"] == h)].sort_values("rank")
            assert list(rows["rank"]) == list(range(10)), where
            got = [(float(b), int(s), int(p), int(t)) for b, s, p, t in
                   zip(rows.beta, rows.sequence, rows.position, rows.token_id)]
            assert got == want, where
