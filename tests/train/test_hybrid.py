"""probe/train/hybrid.py: the hybrid arms (Qwen3.5's 3 Gated DeltaNet : 1 softmax layout, the
softmax layer gated or not) build with that layout and matched parameters, train through the
command line with a falling loss, and load through probe.load as Qwen3.5 checkpoints whose GDN
layers `--gdn` finds and decomposes.

The arms are the session's (`hybrid_arms`, tests/train/conftest.py).
"""
from __future__ import annotations

import json
import math

import pytest

import probe
from probe.core.errors import ProbeError
from probe.train.config import HYBRID_ARMS
from probe.train.model import (Shape, build_model, check_matched, count_parameters, expected_parameters,
                               model_config)
from tests.train.tiny_runs import ids

GDN_RTOL = 1e-5          # the per-key terms against the layer's own output (docs/gdn.md)


def _build(arm, shape):
    return build_model(model_config(arm, shape, bos_token_id=0, eos_token_id=1, pad_token_id=2), 0)


@pytest.mark.parametrize("shape", [
    Shape(vocab_size=1024, width=128, layers=4, heads=4, kv_heads=2, head_dim=32, intermediate=512),  # the default
    Shape(vocab_size=300, width=64, layers=4, heads=2, kv_heads=1, head_dim=32, intermediate=256),
    Shape(vocab_size=512, width=128, layers=8, heads=4, kv_heads=2, head_dim=32, intermediate=512),
])
def test_arms_have_the_qwen3_5_layout_and_matched_parameters(shape):
    counts = check_matched(shape, HYBRID_ARMS)
    base = counts["hybrid-none"]
    for arm in HYBRID_ARMS:
        model = _build(arm, shape)
        assert count_parameters(model) == expected_parameters(arm, shape) == counts[arm]
        assert abs(counts[arm] - base) <= 0.01 * base
        types = model.config.layer_types
        assert types == ["linear_attention"] * 3 + ["full_attention"] + (["linear_attention"] * 3 + ["full_attention"]) * (shape.layers // 4 - 1)
        # The softmax layer's q_proj: queries only, or [query | gate] rows per head.
        q_rows = model.model.layers[3].self_attn.q_proj.out_features
        assert q_rows == shape.heads * shape.head_dim * (2 if arm == "hybrid-gated" else 1)
    none, gated = (_build(a, shape).config.intermediate_size for a in HYBRID_ARMS)
    assert gated < none == shape.intermediate


def test_default_shape_counts():
    """The numbers docs/training.md quotes for the default shape."""
    shape = Shape(vocab_size=1024)
    assert check_matched(shape, HYBRID_ARMS) == {"hybrid-none": 1_170_744, "hybrid-gated": 1_170_232}
    assert [model_config(a, shape, bos_token_id=0, eos_token_id=1, pad_token_id=2).intermediate_size
            for a in HYBRID_ARMS] == [512, 501]


@pytest.mark.parametrize("shape, match", [
    (Shape(vocab_size=300, width=64, layers=3, heads=2, kv_heads=1, head_dim=32), "at least 4 layers"),
    (Shape(vocab_size=300, width=64, layers=4, heads=2, kv_heads=1, head_dim=32, qk_norm=False), "no-qk-norm"),
])
def test_shapes_a_hybrid_cannot_have_are_refused(shape, match):
    with pytest.raises(ProbeError, match=match):
        model_config("hybrid-none", shape, bos_token_id=0, eos_token_id=1, pad_token_id=2)


def test_trained_hybrids_loss_falls_and_counts_are_recorded(hybrid_arms):
    for arm in HYBRID_ARMS:
        rows = _log(hybrid_arms / arm)
        first, last = rows[0]["train_loss"], rows[-1]["train_loss"]
        assert last < first - 0.5, (arm, first, last)
        settings = json.loads((hybrid_arms / arm / "train_config.json").read_text())
        assert settings["intermediate_size"].keys() == set(HYBRID_ARMS)
        assert settings["parameters"] == settings["parameters_by_arm"][arm]


def test_hybrids_save_as_qwen3_5_and_load_with_their_gate(hybrid_arms):
    gates = {}
    for arm in HYBRID_ARMS:
        config = json.loads((hybrid_arms / arm / "config.json").read_text())
        assert config["model_type"] == "qwen3_5_text"
        assert config["architectures"] == ["Qwen3_5ForCausalLM"]
        assert config["attn_output_gate"] is (arm == "hybrid-gated")
        loaded = probe.load(hybrid_arms / arm)
        gate = loaded.layout.gate
        gates[arm] = None if gate is None else (gate.module, gate.layout, gate.granularity)
        assert [p.layer_type for p in loaded.layout.layers] == ["linear_attention"] * 3 + ["attention"]
    assert gates == {"hybrid-none": None, "hybrid-gated": ("q_proj", "interleaved", "elementwise")}


@pytest.mark.parametrize("arm", HYBRID_ARMS)
def test_gdn_layers_of_a_trained_hybrid_are_found_and_decomposed(hybrid_arms, arm):
    loaded = probe.load(hybrid_arms / arm)
    a = probe.analyze(loaded, ids(), seq_len=32, progress=False, display_len=0, gdn=True, anatomy=True,
                      resamples=0)
    assert a.meta["gdn"] == [0, 1, 2] and a.meta["gdn_refused"] is None
    check = a.tables["gdn_check"]
    main = check[check.site.isin(["kernel_output", "out_proj"])]
    assert float(main.max_rel_error.max()) < GDN_RTOL, main
    assert math.isfinite(a.summary["f_attn"])
    assert (a.summary["mean_gate"] is None) == (arm == "hybrid-none")


def _log(folder):
    import csv

    with open(folder / "training.csv") as f:
        return [{k: float(v) if k == "train_loss" else v for k, v in row.items()} for row in csv.DictReader(f)]
