"""probe through a TransformerLens 4.x TransformerBridge against probe's Hugging Face path.

The bridge recomputes attention as an explicit softmax (F-Attn from hook_pattern) while the HF
path reads it from the SDPA log-sum-exp, so the two are independent computations of the same
definitions on the same tokens.
"""
from __future__ import annotations

import json

import pytest
import torch

import probe
import tiny
from samples import TEXT
from probe import ProbeError
from probe.bridge import analyze_bridge, build_bridge, is_bridge
from probe.load import describe
from probe.reorder import reorder_official_q_proj

F_ATTN_TOL = 1e-5
GATE_TOL = 1e-5
M_ACT_REL = 1e-4
LOGITS_TOL = 1e-5
OFFICIAL = ("official_headwise", "official_elementwise")


def _tl_builder():
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

    return build_bridge_from_module


def ids_for(B=2, T=40, seed=1):
    return torch.randint(3, tiny.TINY["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))


def analyses(path):
    """(HF path, bridge path) on the same text: 244 tokens, 6 rows of <= 48, the last padded."""
    kwargs = dict(texts=[TEXT[:400]], seq_len=48, batch_size=4, progress=False, display_len=12)
    return probe.analyze(path, **kwargs), probe.analyze(build_bridge(path), **kwargs)


def joined(a, b, keys):
    m = a.merge(b, on=keys, suffixes=("_hf", "_tl"), how="outer", indicator=True)
    assert (m._merge == "both").all(), m[m._merge != "both"]
    return m


@pytest.mark.parametrize("kind", ("qwen3_next", "qwen3") + OFFICIAL)
def test_bridge_path_gives_the_hf_numbers(kind, checkpoint):
    hf, tl = analyses(checkpoint(kind))
    assert tl.meta["backend"] == "transformer_lens"
    assert (tl.meta["tokens"], tl.meta["sequences"], tl.meta["position0"]) == \
        (hf.meta["tokens"], hf.meta["sequences"], hf.meta["position0"])
    assert tl.summary["gate_layout"] == hf.summary["gate_layout"]

    ft = joined(hf.first_token, tl.first_token, ["layer", "head", "metric"])
    assert list(ft.layer_type_hf) == list(ft.layer_type_tl)
    attn = ft[ft.layer_type_hf == "attention"]
    assert len(attn) and attn.value_tl.notna().all()
    assert (attn.value_hf - attn.value_tl).abs().max() <= F_ATTN_TOL
    assert ft[ft.layer_type_hf != "attention"].value_tl.isna().all()     # linear layers: marked, not 0
    for key in ("f_attn", "f_attn_paper", "f_attn_uniform", "sink_rate"):
        assert tl.summary[key] == pytest.approx(hf.summary[key], abs=F_ATTN_TOL)

    if kind == "qwen3":
        assert tl.gates.empty and hf.gates.empty
    else:
        g = joined(hf.gates, tl.gates, ["layer", "head", "group", "metric"])
        counts = g.metric == "count"
        assert (g[counts].value_hf == g[counts].value_tl).all()          # headwise: one score per head
        assert (g[~counts].value_hf - g[~counts].value_tl).abs().max() <= GATE_TOL
        h = joined(hf.gate_hist, tl.gate_hist, ["layer", "head", "bin_lo"])
        assert (h.count_hf - h.count_tl).abs().sum() <= 2                 # a score on a bin edge may move
        assert tl.summary["mean_gate"] == pytest.approx(hf.summary["mean_gate"], abs=GATE_TOL)

    m = joined(hf.massive, tl.massive, ["layer", "site", "metric"])
    assert len(m[m.metric == "max_abs"]) == 4 * 4                        # 4 layers x 4 sites
    # M-Act is the max; the median is read from a log histogram, where one value that moves
    # across a bin edge shifts the interpolation (its resolution is ~0.5%).
    for metric, rel in (("max_abs", M_ACT_REL), ("median_abs", 1e-3)):
        mm = m[m.metric == metric]
        assert ((mm.value_hf - mm.value_tl).abs() / mm.value_hf.abs()).max() <= rel, metric
    assert (m[m.metric == "count"].value_hf == m[m.metric == "count"].value_tl).all()
    top = joined(hf.massive_top, tl.massive_top, ["layer", "site", "rank"])
    assert ((top.abs_value_hf - top.abs_value_tl).abs() / top.abs_value_hf).max() <= M_ACT_REL
    assert tl.summary["m_act"] == pytest.approx(hf.summary["m_act"], rel=M_ACT_REL)

    sp = joined(hf.sparsity, tl.sparsity, ["layer", "variant", "threshold"])
    assert (sp.value_hf - sp.value_tl).abs().max() <= 1e-3
    assert tl.summary["loss"] == pytest.approx(hf.summary["loss"], abs=1e-5)
    pat = joined(hf.attention_patterns, tl.attention_patterns, ["layer", "query", "key"])
    assert (pat.value_hf - pat.value_tl).abs().max() <= 1e-5


def test_gate_scores_equal_sigmoid_of_hook_q_gate(checkpoint):
    """Issue 2: the gate scores probe carves out of q_proj equal TransformerLens's hook_q_gate."""
    path = checkpoint("qwen3_next")
    lm = probe.load(path)
    L = lm.layout
    ids = ids_for()
    hf_scores = {}
    handles = [p.gate_module.register_forward_hook(
        lambda mod, args, out, i=p.index: hf_scores.__setitem__(
            i, L.gate.scores(out, L.num_heads, L.num_kv_heads, L.head_dim)))
        for p in L.layers if p.gate_module is not None]
    with torch.no_grad():
        lm.model(input_ids=ids, use_cache=False)
    for h in handles:
        h.remove()

    bridge = build_bridge(path)
    q_out, q_gate = {}, {}
    hooks = []
    for i in L.attention_layers:
        # q_proj's output; the bridge shows it split into (2H, D) "heads": flatten it back.
        hooks.append((f"blocks.{i}.attn.q.hook_out",
                      lambda x, hook, i=i: q_out.__setitem__(i, x.flatten(2).clone())))
        hooks.append((f"blocks.{i}.attn.hook_q_gate", lambda x, hook, i=i: q_gate.__setitem__(i, x.clone())))
    with torch.no_grad():
        bridge.run_with_hooks(ids, fwd_hooks=hooks)
    assert set(q_gate) == set(hf_scores) == set(L.attention_layers)
    for i, logits in q_gate.items():
        tl_scores = torch.sigmoid(logits.view(*ids.shape, L.num_heads, L.head_dim))
        # Same tensor, two readings of it: probe's layout logic against TransformerLens's.
        assert torch.equal(L.gate.scores(q_out[i], L.num_heads, L.num_kv_heads, L.head_dim), tl_scores)
        # Across the two forward passes (HF and bridge) on the same tokens.
        torch.testing.assert_close(hf_scores[i], tl_scores, atol=1e-6, rtol=0)


def hf_logits(model, ids, impl="eager"):
    """TransformerLens computes attention as eager softmax; SDPA differs from it by ~1e-5 in fp32."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(impl)
    try:
        with torch.no_grad():
            return model(input_ids=ids, use_cache=False).logits
    finally:
        model.set_attn_implementation(previous)


@pytest.mark.parametrize("kind", OFFICIAL)
def test_official_layout_is_refused_until_reordered(kind, checkpoint):
    path = checkpoint(kind)
    ids = ids_for(seed=2)
    original = probe.load(path).model
    reference, reference_sdpa = hf_logits(original, ids), hf_logits(original, ids, "sdpa")
    build = _tl_builder()

    # What a TransformerLens user would do: Qwen3-Next's per-head gate on the official q_proj.
    raw = probe.load(path).model
    bridge = build(raw, "Qwen3NextForCausalLM", hf_config=raw.config)
    if kind == "official_elementwise":                     # silently wrong, which is why probe refuses
        with torch.no_grad():
            assert (bridge(ids) - reference).abs().max() > 1e-2
    with pytest.raises(ProbeError, match=r"official .* gate layout.*reorder_official_q_proj") as err:
        probe.analyze(bridge, texts=[TEXT], seq_len=32, progress=False)
    assert "\n" not in str(err.value)

    # Reordered first, the same construction is right, and so is build_bridge's.
    lm = probe.load(path)
    fixed = reorder_official_q_proj(lm.model)
    torch.testing.assert_close(hf_logits(fixed, ids), reference, atol=LOGITS_TOL, rtol=0)
    manual = build(fixed, "Qwen3NextForCausalLM", hf_config=fixed.config, tokenizer=lm.tokenizer)
    for bridge in (manual, build_bridge(path)):
        with torch.no_grad():
            logits = bridge(ids)
        torch.testing.assert_close(logits, reference, atol=LOGITS_TOL, rtol=0)
        torch.testing.assert_close(logits, reference_sdpa, atol=5e-5, rtol=0)
        analyze_bridge(bridge, texts=[TEXT], seq_len=32, max_sequences=2, progress=False, display_len=0)


@pytest.mark.parametrize("kind", OFFICIAL)
def test_reordered_rows_are_the_per_head_layout(kind, checkpoint):
    """Against tiny.official_q_rows, the factory's own account of the official row order."""
    path = checkpoint(kind)
    cfg = json.loads((path / "config.json").read_text())
    H, D = cfg["num_attention_heads"], cfg["head_dim"]
    query_rows, gate_rows = tiny.official_q_rows(cfg)
    model = probe.load(path).model
    before = [a.self_attn.q_proj.weight.clone() for a in model.model.layers]
    reorder_official_q_proj(model)
    assert reorder_official_q_proj(model) is model                       # idempotent
    for w, layer in zip(before, model.model.layers):
        new = layer.self_attn.q_proj.weight.view(H, 2 * D, -1)
        torch.testing.assert_close(new[:, :D], w[query_rows].view(H, D, -1), atol=0, rtol=0)
        gates = w[gate_rows].view(H, -1, w.shape[1])                     # (H, 1 or D, hidden)
        torch.testing.assert_close(new[:, D:], gates.expand(H, D, -1), atol=0, rtol=0)
    assert probe.load(path).layout.gate.layout == "grouped"              # a fresh load is untouched
    assert describe(model).gate.layout == "interleaved"                   # probe's HF path follows


def test_hooks_are_gone_and_logits_untouched(checkpoint):
    bridge = build_bridge(checkpoint("qwen3_next"))
    ids = ids_for(seed=3)
    with torch.no_grad():
        plain = bridge(ids)
    analyze_bridge(bridge, texts=[TEXT], seq_len=32, max_sequences=3, progress=False)

    def live(b):
        return sum(len(hp._forward_hooks) + len(hp._forward_pre_hooks) for hp in b.hook_dict.values())
    assert live(bridge) == 0
    with torch.no_grad():
        torch.testing.assert_close(bridge(ids), plain, atol=0, rtol=0)
    with pytest.raises(ProbeError, match="gate= does not apply"):
        probe.analyze(bridge, texts=[TEXT], gate="q_proj:interleaved:elementwise")
    assert is_bridge(bridge) and not is_bridge(bridge.original_model)
