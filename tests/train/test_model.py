"""probe/train/model.py: matched parameter budgets, checkpoints in the official layout that probe
loads and analyses as such, the gate's wiring against a stock Qwen3 twin, and --no-qk-norm.

The arms are the session's (tests/train/conftest.py).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import probe
from probe.core.errors import ProbeError
from probe.train import ARMS
from probe.train.model import (Shape, build_model, check_matched, count_parameters,
                               expected_parameters, model_config)
from tests.train.tiny_runs import ids, weights


# ------------------------------------------------------------------ matched parameter budgets

@pytest.mark.parametrize("shape", [
    Shape(vocab_size=300, width=64, layers=2, heads=2, kv_heads=1, head_dim=32, intermediate=256),
    Shape(vocab_size=1024, width=128, layers=4, heads=4, kv_heads=2, head_dim=32, intermediate=512),
    Shape(vocab_size=4096, width=256, layers=6, heads=8, kv_heads=4, head_dim=32, intermediate=1024),
    Shape(vocab_size=512, width=96, layers=3, heads=3, kv_heads=1, head_dim=32, intermediate=288),
    Shape(vocab_size=1024, width=128, layers=4, heads=4, kv_heads=2, head_dim=32, intermediate=512,
          qk_norm=False),
])
def test_parameter_counts_match_within_one_percent(shape):
    counts = check_matched(shape)
    base = counts["none"]
    for arm in ARMS:
        assert abs(counts[arm] - base) <= 0.01 * base
        model = build_model(model_config(arm, shape, bos_token_id=0, eos_token_id=1, pad_token_id=2), 0)
        assert count_parameters(model) == expected_parameters(arm, shape) == counts[arm]


def test_trained_arms_report_matched_counts(arms):
    counts = {a: json.loads((arms / a / "train_config.json").read_text())["parameters"] for a in ARMS}
    assert all(abs(n - counts["none"]) <= 0.01 * counts["none"] for n in counts.values())
    intermediates = json.loads((arms / "none" / "train_config.json").read_text())["intermediate_size"]
    assert intermediates["none"] > intermediates["headwise"] > intermediates["elementwise"]


def test_too_narrow_mlp_is_refused():
    with pytest.raises(ProbeError, match="too small"):
        check_matched(Shape(vocab_size=300, width=64, layers=1, heads=2, kv_heads=1, head_dim=32,
                            intermediate=8))


# ------------------------------------------------------------------ loading and analysis

def test_checkpoints_load_and_analyse_like_official_ones(arms):
    layouts = {}
    for arm in ARMS:
        loaded = probe.load(arms / arm)
        gate = loaded.layout.gate
        layouts[arm] = None if gate is None else (gate.module, gate.layout, gate.granularity)
        assert loaded.tokenizer is not None
        analysis = probe.analyze(loaded, str(arms / arm / "heldout.txt"), seq_len=32,
                                 max_sequences=4, progress=False)
        s = analysis.summary
        assert math.isfinite(s["loss"]) and math.isfinite(s["f_attn"]) and math.isfinite(s["m_act"])
        assert (s["mean_gate"] is None) == (arm == "none")
        assert analysis.meta["position0"].startswith("BOS token '<|bos|>'")
    assert layouts == {"none": None, "headwise": ("q_proj", "grouped", "headwise"),
                       "elementwise": ("q_proj", "grouped", "elementwise")}


# ------------------------------------------------------------------ the gate's wiring

def _stock_twin(gated_dir: Path):
    """A stock Qwen3 with the gated model's weights minus the gate rows of q_proj.

    Written from the checkpoint format, independently of probe's loader: q_proj rows are grouped
    per KV head as [G*D query rows | G*Dg gate rows].
    """
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = json.loads((gated_dir / "config.json").read_text())
    H, KV, D = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    G = H // KV
    Dg = D if config["elementwise_attn_output_gate"] else 1
    group = G * D + G * Dg
    query_rows = torch.cat([torch.arange(kv * group, kv * group + G * D) for kv in range(KV)])
    stock_cfg = Qwen3Config(**{k: v for k, v in config.items()
                               if k not in ("architectures", "headwise_attn_output_gate",
                                            "elementwise_attn_output_gate", "use_qk_norm", "qkv_bias",
                                            "transformers_version", "dtype")})
    stock = Qwen3ForCausalLM(stock_cfg).eval()
    weights = load_file(str(gated_dir / "model.safetensors"))
    for key in [k for k in weights if k.endswith("q_proj.weight")]:
        weights[key] = weights[key][query_rows]
    missing, unexpected = stock.load_state_dict(weights, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    return stock, G * D, group, KV


def _forced_logits(model, ids, logit: float, query_width: int, group: int, kv: int) -> torch.Tensor:
    """The model's logits with every gate logit in q_proj set to `logit` (hooks removed after)."""
    def hook(module, args, out):
        grouped = out.view(*out.shape[:-1], kv, group).clone()
        grouped[..., query_width:] = logit
        return grouped.view(out.shape)
    handles = [layer.self_attn.q_proj.register_forward_hook(hook) for layer in model.model.layers]
    try:
        with torch.no_grad():
            return model(input_ids=ids).logits
    finally:
        for h in handles:
            h.remove()


@pytest.mark.parametrize("arm", ["headwise", "elementwise"])
def test_gate_forced_open_equals_ungated_attention(arms, arm):
    loaded = probe.load(arms / arm)
    stock, qw, group, kv = _stock_twin(arms / arm)
    ids = torch.randint(3, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    ids[:, 0] = 0
    with torch.no_grad():
        reference = stock(input_ids=ids).logits
        natural = loaded.model(input_ids=ids).logits
    forced = _forced_logits(loaded.model, ids, 40.0, qw, group, kv)     # sigmoid(40) == 1.0 in fp32
    torch.testing.assert_close(forced, reference, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(natural, reference, atol=1e-3)        # the trained gate does act


@pytest.mark.parametrize("arm", ["headwise", "elementwise"])
def test_gate_forced_shut_removes_only_the_attention_branch(arms, arm):
    loaded = probe.load(arms / arm)
    stock, qw, group, kv = _stock_twin(arms / arm)
    with torch.no_grad():
        for layer in stock.model.layers:
            layer.self_attn.o_proj.weight.zero_()   # attention branch adds nothing; residual stays
    ids = torch.randint(3, 300, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = stock(input_ids=ids).logits
    forced = _forced_logits(loaded.model, ids, -200.0, qw, group, kv)   # sigmoid(-200) == 0.0
    torch.testing.assert_close(forced, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arm", ["headwise", "elementwise"])
def test_probe_check_passes_on_trained_arms(arms, arm):
    """probe's own wiring checks (probe check), where that module is present."""
    check = pytest.importorskip("probe.api.check")
    report = check.run_checks(probe.load(arms / arm), seq_len=16, batch_size=2, seed=0)
    assert len(report.frame) and report.passed, report.frame


# ------------------------------------------------------------------ --no-qk-norm

def test_default_arms_keep_qk_norm_and_the_stock_baseline(arms):
    from transformers import Qwen3ForCausalLM

    for arm in ARMS:
        settings = json.loads((arms / arm / "train_config.json").read_text())
        assert settings["qk_norm"] is True and settings["recipe"]["qk_norm"] is True
        assert json.loads((arms / arm / "config.json").read_text())["use_qk_norm"] is True
        assert any(k.endswith("q_norm.weight") for k in weights(arms / arm))
    assert type(probe.load(arms / "none").model) is Qwen3ForCausalLM


def test_no_qk_norm_arms_have_no_q_norm_or_k_norm(no_qk_arms):
    out, _ = no_qk_arms
    for arm in ARMS:
        assert json.loads((out / arm / "config.json").read_text())["use_qk_norm"] is False
        assert not any("q_norm" in k or "k_norm" in k for k in weights(out / arm)), arm
        model = probe.load(out / arm).model
        for layer in model.model.layers:
            assert isinstance(layer.self_attn.q_norm, torch.nn.Identity), arm
            assert isinstance(layer.self_attn.k_norm, torch.nn.Identity), arm


@pytest.mark.parametrize("qk_norm", [True, False])
def test_scaling_the_keys_changes_the_logits_only_without_qk_norm(arms, no_qk_arms, qk_norm):
    # k_norm divides each key by its RMS, so scaling k_proj is invisible with QK-norm and
    # sharpens every attention distribution without it (k_proj holds keys only, in every arm).
    folder = arms if qk_norm else no_qk_arms[0]
    for arm in ARMS:
        model = probe.load(folder / arm).model
        with torch.no_grad():
            before = model(input_ids=ids()).logits
            for layer in model.model.layers:
                layer.self_attn.k_proj.weight.mul_(4.0)
            after = model(input_ids=ids()).logits
        change = (after - before).abs().max().item()
        if qk_norm:
            assert change < 1e-4, (arm, change)
        else:
            assert change > 1e-2, (arm, change)


def test_no_qk_norm_arms_reload_with_the_trained_logits(no_qk_arms):
    from transformers import Qwen3ForCausalLM

    out, trained = no_qk_arms
    for arm in ARMS:
        model = trained[arm].eval()
        loaded = probe.load(out / arm).model
        with torch.no_grad():
            want = model(input_ids=ids()).logits
            got = loaded(input_ids=ids()).logits
        assert (got - want).abs().max().item() <= 1e-5, arm
    # What a stock Qwen3 would make of the baseline's weights (fresh q_norm/k_norm, which
    # still normalise): different logits, so the check above can fail.
    config = json.loads((out / "none" / "config.json").read_text())
    from transformers import Qwen3Config

    stock = Qwen3ForCausalLM(Qwen3Config(**{k: v for k, v in config.items()
                                            if k not in ("architectures", "transformers_version",
                                                         "dtype")})).eval()
    stock.load_state_dict(weights(out / "none"), strict=False)
    with torch.no_grad():
        wrong = stock(input_ids=ids()).logits
        want = trained["none"](input_ids=ids()).logits
    assert (wrong - want).abs().max().item() > 1e-3


def test_no_qk_norm_is_recorded_and_counts_stay_matched(no_qk_arms, arms):
    out, trained = no_qk_arms
    counts = {}
    for arm in ARMS:
        settings = json.loads((out / arm / "train_config.json").read_text())
        assert settings["qk_norm"] is False and settings["recipe"]["qk_norm"] is False
        assert settings["shape"]["qk_norm"] is False
        assert settings["parameters"] == count_parameters(trained[arm])
        counts[arm] = settings["parameters"]
        with_norm = json.loads((arms / arm / "train_config.json").read_text())
        shape = settings["shape"]
        # exactly the two D-wide norm weights per layer fewer than the same arm with QK-norm
        assert with_norm["parameters"] - counts[arm] == 2 * shape["head_dim"] * shape["layers"]
        assert settings["parameters_by_arm"] == json.loads(
            (out / "none" / "train_config.json").read_text())["parameters_by_arm"]
    assert all(abs(n - counts["none"]) <= 0.01 * counts["none"] for n in counts.values())
    assert counts == json.loads((out / "none" / "train_config.json").read_text())["parameters_by_arm"]
