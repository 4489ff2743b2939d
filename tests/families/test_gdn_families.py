"""Gated DeltaNet layers (--gdn --anatomy) in every registered hybrid family, on the tiny configs
of test_adapters.py: Qwen3-Next (fused projections, MoE), Qwen3.5 and its MoE (separate
projections; text model and the multimodal release format), Qwen4-Exp (hyper-connections, a
token indexer on the softmax layers), OLMo-Hybrid (every projection apart, a g_proj gate, beta up
to 2, ungated post-norm softmax layers). Each GDN layer is found and read, and its per-key terms
add up to the layer's own kernel output and to out_proj's output (gdn_check.csv, measured against
what the model computed in the same pass) to 1e-5 relative in float32.

Kimi Linear is not in probe's registry: loading it fails in one line (its KDA layers have a
channel-wise decay, which the per-key split here does not cover; docs/gdn.md)."""
from __future__ import annotations

import numpy as np
import pytest

import probe
from tests.families.test_adapters import CASES, IDS, T, family  # noqa: F401  (the session fixture)
from tests.metrics.test_token_series_gdn import half_step

HYBRIDS = [name for name, case in CASES.items() if "linear_num_value_heads" in case.text]
RTOL = 1e-5


def test_every_hybrid_family_is_covered():
    assert {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen4_exp_text", "olmo_hybrid"} <= set(HYBRIDS)


@pytest.mark.parametrize("name", HYBRIDS)
def test_gdn_layers_are_read_and_their_terms_add_up(name, family):  # noqa: F811
    run = family(name)
    linear = [p.index for p in run.loaded.layout.layers if p.layer_type == "linear_attention"]
    assert linear, name
    a = probe.analyze(run.loaded, IDS, seq_len=T, progress=False, display_len=0, gdn=True, anatomy=True,
                      resamples=0)
    assert a.meta["gdn"] == linear and a.meta["gdn_refused"] is None
    check = a.tables["gdn_check"]
    main = check[check.site.isin(["kernel_output", "out_proj"])]
    assert sorted(set(main.layer)) == linear and float(main.max_rel_error.max()) < RTOL, main
    gates = a.tables["gdn_gates"]
    beta = gates[(gates.quantity == "beta") & (gates.group == "all") & (gates.metric == "mean")].value
    beta_max = 2 if name == "olmo_hybrid" else 1                    # OLMo-Hybrid doubles beta
    assert len(beta) and beta.between(0, beta_max).all()
    # The per-token series of the GDN layers pool to the same means, within half a stored step
    # (OLMo-Hybrid's beta above 1 included: it is stored on its own range).
    series = a.token_series
    for quantity, key in (("beta", "gdn_beta_heads"), ("gate_silu", "gdn_gate_heads"), ("decay", "gdn_decay_heads")):
        want = gates[(gates.quantity == quantity) & (gates.group == "all") & (gates.metric == "mean")]
        stored = series.values(key)
        assert np.isnan(stored[[i for i in range(len(stored)) if i not in linear]]).all(), (name, key)
        for layer in linear:
            per_head = want[want.layer == layer].sort_values("head").value.to_numpy()
            np.testing.assert_allclose(stored[layer].mean(-1), per_head, atol=half_step(series, key), rtol=0,
                                       err_msg=f"{name} {key} {layer}")
    if name == "olmo_hybrid":
        assert np.nanmax(series.values("gdn_beta_heads")) > 1                # kept, not clipped to 1


def test_kimi_linear_is_refused_in_one_line_saying_why(tmp_path):
    """Kimi Linear (transformers' kimi_linear): its KDA layers have a channel-wise decay, outside
    the per-key split; loading a tiny one fails in one line that says so."""
    import torch
    import transformers as tf
    from transformers import AutoConfig

    from probe.core.errors import ProbeError

    config = AutoConfig.for_model(
        "kimi_linear", vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, qk_rope_head_dim=8,
        v_head_dim=16, qk_nope_head_dim=16, num_experts_per_tok=2, num_local_experts=4, linear_head_dim=16,
        linear_num_heads=4, layer_types=["linear_attention", "full_attention"], mlp_layer_types=["dense", "dense"],
        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "kimi")
    with pytest.raises(ProbeError, match=r"^architecture 'kimi_linear' is not supported: .*channel-wise decay") as err:
        probe.load(tmp_path / "kimi")
    assert "\n" not in str(err.value)
