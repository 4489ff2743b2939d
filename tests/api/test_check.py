"""`probe check`: the implementation checks pass on every gated layout, fail loudly on a
wrongly declared one, and leave no hook behind."""
from __future__ import annotations

import pytest
import torch

from tests.samples import GATED
from probe.capture import attention
from probe.api.check import run_checks
from probe.api.cli import main


def hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize("kind", GATED)
def test_checks_pass_on_every_gated_layout(kind, loaded):
    lm = loaded(kind)
    before = (hook_count(lm.model), lm.model.config._attn_implementation)
    report = run_checks(lm)
    assert (hook_count(lm.model), lm.model.config._attn_implementation) == before
    assert not attention.observed(lm.model)
    frame = report.frame
    assert report.passed, frame[~frame.passed].to_string()
    layers = lm.layout.attention_layers
    frame = frame[~frame.check.str.startswith("GDN ")]       # hybrids' linear layers: test_check_gdn.py
    checks = set(frame.check)
    assert len(checks) == 7
    for check in checks - {c for c in checks if c.startswith("zero logit gives")}:
        assert sorted(frame[frame.check == check].layer) == layers, check
    # Forcing the gate open reproduces the ungated path exactly: sigmoid(+inf) is 1.0.
    assert (frame[frame.check.str.startswith("gate = 1")].value == 0).all()
    assert frame[frame.check.str.startswith("zero logit gives")].value.iloc[0] == 0.5


def test_check_command_prints_a_table_and_passes(checkpoint, capsys):
    assert main(["check", str(checkpoint("official_headwise"))]) == 0
    out = capsys.readouterr().out
    assert "sdpa_output * gate == o_proj input" in out and "FAIL" not in out
    assert "all 25 checks passed for gate q_proj:grouped:headwise:sigmoid" in out


@pytest.mark.parametrize("kind,declared,fits", [
    ("official_elementwise", "q_proj:interleaved:elementwise", "q_proj:grouped:elementwise:sigmoid"),
    ("official_headwise", "q_proj:grouped:elementwise", "q_proj:grouped:headwise:sigmoid"),
    ("official_elementwise", "q_proj:grouped:headwise", "q_proj:grouped:elementwise:sigmoid"),
    ("qwen3_next", "q_proj:grouped:elementwise", "q_proj:interleaved:elementwise:sigmoid"),
    ("qwen3_next", "q_proj:interleaved:headwise", "q_proj:interleaved:elementwise:sigmoid"),
])
def test_a_wrongly_declared_layout_fails_loudly(kind, declared, fits, checkpoint, loaded, capsys):
    model = loaded(kind).model
    before = hook_count(model)
    path = checkpoint(kind)
    capsys.readouterr()          # a checkpoint built for this test prints transformers' save bar
    code = main(["check", str(path), "--gate", declared])
    captured = capsys.readouterr()
    assert code == 1
    err = captured.err.strip()
    assert err.startswith("probe: check failed: ") and "\n" not in err
    assert f"the recorded tensors fit --gate {fits}" in err
    assert "FAIL" in captured.out
    assert hook_count(model) == before and not attention.observed(model)


def test_wrong_layout_numbers_are_large(checkpoint):
    """Interleaved read on a grouped checkpoint: the product check misses by O(1), and forcing
    the 'gate' writes +-inf into query channels, so every forced check misses too."""
    import probe

    lm = probe.load(checkpoint("official_elementwise"), gate="q_proj:interleaved:elementwise")
    report = run_checks(lm, input_ids=torch.tensor([[5, 6, 7, 8, 9, 10]]))     # given token ids
    frame = report.frame
    product = frame[frame.check == "sdpa_output * gate == o_proj input"]
    assert (product.value > 100 * product.tolerance).all()
    forced = frame[frame.check.str.startswith(("gate = ", "zero logits"))]
    assert len(forced) == 16 and (forced.value > 100 * forced.tolerance).all()


def test_a_model_without_a_gate_has_nothing_to_check(checkpoint, capsys):
    assert main(["check", str(checkpoint("qwen3"))]) == 0
    assert "nothing to check" in capsys.readouterr().out


def test_hooks_are_removed_when_a_pass_fails(loaded, monkeypatch):
    lm = loaded("official_headwise")
    before = hook_count(lm.model)
    calls = {"n": 0}
    original = lm.model.forward

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:                       # the zero-logit pass, with forcing hooks installed
            raise RuntimeError("boom")
        return original(*args, **kwargs)

    monkeypatch.setattr(lm.model, "forward", failing)
    with pytest.raises(RuntimeError, match="boom"):
        run_checks(lm)
    assert calls["n"] == 2
    assert hook_count(lm.model) == before
    assert not attention.observed(lm.model) and lm.model.config._attn_implementation == "sdpa"


def test_nan_weights_are_named_not_blamed_on_the_gate_layout(checkpoint, tmp_path, capsys):
    """One NaN weight makes every compared pass NaN; the check used to fail each comparison and
    suggest another gate layout. It now refuses in one line naming the tensor."""
    import shutil

    from safetensors.torch import load_file, save_file

    path = shutil.copytree(checkpoint("official_headwise"), tmp_path / "nan")
    weights = load_file(path / "model.safetensors")
    name = "model.layers.1.mlp.down_proj.weight"
    weights[name][0, 0] = float("nan")
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("probe: error: the weights are not finite")
    assert name in err[0] and "layout" not in err[0]
