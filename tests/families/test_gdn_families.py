"""Gated DeltaNet layers (--gdn --anatomy) in every registered hybrid family, on the tiny configs
of test_adapters.py: Qwen3-Next (fused projections, MoE), Qwen3.5 and its MoE (separate
projections; text model and the multimodal release format), Qwen4-Exp (hyper-connections, a
token indexer on the softmax layers). Each GDN layer is found and read, and its per-key terms
add up to the layer's own kernel output and to out_proj's output (gdn_check.csv, measured against
what the model computed in the same pass) to 1e-5 relative in float32.

OLMo-Hybrid and Kimi Linear are not in probe's registry: loading them fails in one line (Kimi
Linear's KDA layers have a channel-wise decay, which the per-key split here does not cover;
docs/gdn.md)."""
from __future__ import annotations

import pytest

import probe
from tests.families.test_adapters import CASES, IDS, T, family  # noqa: F401  (the session fixture)

HYBRIDS = [name for name, case in CASES.items() if "linear_num_value_heads" in case.text]
RTOL = 1e-5


def test_every_hybrid_family_is_covered():
    assert {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen4_exp_text"} <= set(HYBRIDS)


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
    assert len(beta) and beta.between(0, 1).all()
