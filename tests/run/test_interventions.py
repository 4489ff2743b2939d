"""Interventions against models built to compute the same thing without hooks.

The official checkpoints have an exact gate-free twin (`tiny.official_to_stock`: the same
weights minus the gate rows). Gates forced to 1 must give the twin's loss; forced to 0, the
twin with every o_proj zeroed; the mean-gate control, the twin with o_proj scaled by the
layer's mean gate, because o_proj(m * O) = m * o_proj(O) without a bias.
"""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

import probe
from tests import tiny
from tests.samples import TEXT
from probe.capture import attention
from probe.run import interventions
from probe.data.sequences import build_dataset


def hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.fixture(scope="module")
def official(loaded):
    return loaded("official_headwise")


@pytest.fixture(scope="module")
def dataset(official):
    return build_dataset(None, official.tokenizer, texts=[TEXT], seq_len=20, max_sequences=2)


@pytest.fixture(scope="module")
def frame(official, dataset):
    before = hook_count(official.model)
    # The tiny model has no massive activation: massive_zero says it zeroed nothing.
    with pytest.warns(UserWarning, match="massive_zero'?: no activation reached the threshold"):
        out = interventions.run(official, dataset, batch_size=2)
    assert hook_count(official.model) == before
    assert not attention.observed(official.model) and official.model.config._attn_implementation == "sdpa"
    return out


@pytest.fixture(scope="module")
def twin(checkpoint, tmp_path_factory):
    path = tiny.official_to_stock(checkpoint("official_headwise"), tmp_path_factory.mktemp("twin") / "stock")
    return probe.load(path)


def twin_loss(twin, dataset, scale: dict[int, float]) -> float:
    """Loss of the gate-free twin with each layer's o_proj scaled (the weights are restored)."""
    saved = {}
    try:
        for p in twin.layout.layers:
            saved[p.index] = p.o_proj.weight.detach().clone()
            with torch.no_grad():
                p.o_proj.weight.mul_(scale.get(p.index, 1.0))
        return interventions.loss_pass(twin.model, dataset, 2)
    finally:
        with torch.no_grad():
            for p in twin.layout.layers:
                p.o_proj.weight.copy_(saved[p.index])


def pick(frame, kind, layer):
    row = frame[(frame.intervention == kind) & (frame.layer == layer)]
    assert len(row) == 1, (kind, layer)
    return row.iloc[0]


def test_table_shape(frame):
    assert list(frame.columns) == interventions.COLUMNS
    layers = [0, 1, 2, 3, -1]
    for kind in ("mean_gate", "gate_one", "gate_zero", "massive_zero"):
        assert list(frame[frame.intervention == kind].layer) == layers, kind
    none = pick(frame, "none", -1)
    assert none.delta_loss == 0 and math.isfinite(none.loss)
    assert (frame.delta_loss == frame.loss - none.loss).all()


@pytest.mark.parametrize("kind", ["gate_one", "gate_zero", "mean_gate"])
def test_gate_interventions_in_every_layer_equal_the_gate_free_twin(kind, frame, twin, dataset):
    scale = {i: {"gate_one": 1.0, "gate_zero": 0.0}.get(kind) if kind != "mean_gate"
             else pick(frame, "mean_gate", i).setting for i in range(4)}
    row = pick(frame, kind, -1)
    assert row.loss == pytest.approx(twin_loss(twin, dataset, scale), abs=2e-5)
    assert abs(row.delta_loss) > 1e-3                        # it did change something


def test_gate_zero_in_one_layer_equals_a_zeroed_output_projection(frame, official, dataset):
    """No o_proj bias here, so a closed gate and a zero o_proj remove the same branch."""
    for layer in (0, 2):
        p = official.layout.layers[layer]
        saved = p.o_proj.weight.detach().clone()
        try:
            with torch.no_grad():
                p.o_proj.weight.zero_()
            expected = interventions.loss_pass(official.model, dataset, 2)
        finally:
            with torch.no_grad():
                p.o_proj.weight.copy_(saved)
        assert pick(frame, "gate_zero", layer).loss == pytest.approx(expected, abs=2e-5)


def test_attrs_count_passes_and_tokens(frame, dataset):
    # 3 gate kinds x (4 layers + all); massive_zero is skipped: tiny models have no |h| >= 100.
    assert frame.attrs["passes"] == 15
    assert frame.attrs["tokens_per_process"] == [15 * dataset.tokens]


def test_shards_merge_to_the_whole_pass(official, dataset):
    """Each rank's share of a pass (every world-th batch), merged, is the one-process pass: the
    arithmetic torchrun relies on (the collectives themselves run in test_distributed.py)."""
    state = interventions._PassState()
    whole = interventions.shard_pass(official.model, dataset, 1, state, interventions.PassStats())
    shares = [interventions.shard_pass(official.model, dataset, 1, state, interventions.PassStats(r, 2))
              for r in range(2)]
    n = [dataset.shard_tokens(1, r, 2) for r in range(2)]
    assert min(n) > 0
    # A rank counts its tokens in its own slot only, so the SUM merge keeps every rank's share.
    assert shares[0].tokens.tolist() == [n[0], 0] and shares[1].tokens.tolist() == [0, n[1]]
    merged = shares[0].merge(shares[1])
    assert merged.tokens.tolist() == n and sum(n) == int(whole.tokens.sum()) == dataset.tokens
    assert int(merged.loss.count) == int(whole.loss.count)
    assert merged.loss.loss() == pytest.approx(whole.loss.loss(), rel=1e-12)


def test_reference_of_part_of_the_data_is_one_clear_error(official, dataset):
    """E.g. one process's share under torchrun, never merged: its statistics are not the data's."""
    cap = probe.Capture(official.model, official.layout)
    with torch.inference_mode(), cap:
        for ids, valid, seq in dataset.batches(1, rank=0, world=2):
            with cap.batch(ids, valid, seq):
                cap.observe_logits(official.model(input_ids=ids, use_cache=False).logits)
    with pytest.raises(probe.ProbeError, match=r"scored \d+ next-token pairs, this dataset has \d+: .*merge_reducers"):
        interventions.run(official, dataset, reference=cap)


def test_mean_gate_setting_is_the_layer_mean(frame, official, dataset):
    cap = probe.Capture(official.model, official.layout)
    with torch.inference_mode(), cap:
        for ids, valid, seq in dataset.batches(2):
            with cap.batch(ids, valid, seq):
                official.model(input_ids=ids, use_cache=False)
    for layer in range(4):
        assert pick(frame, "mean_gate", layer).setting == pytest.approx(cap.gates[layer].mean(), rel=1e-12)


def test_massive_zero_counts_and_zeroes(official, dataset):
    """With a low threshold some elements are massive: the hook zeroes exactly the elements of
    the layer output at or above the threshold, which a plain recording pass counts too."""
    frame = interventions.run(official, dataset, kinds="massive_zero", batch_size=2, all_layers=False,
                              massive_min_abs=0.0, massive_ratio=4.0)
    outputs = []
    handle = official.layout.layers[2].layer.register_forward_hook(
        lambda m, a, o: outputs.append(o[0] if isinstance(o, tuple) else o))
    try:
        with torch.inference_mode():
            valid_masks = []
            for ids, valid, _ in dataset.batches(2):
                official.model(input_ids=ids, use_cache=False)
                valid_masks.append(valid)
    finally:
        handle.remove()
    row = pick(frame, "massive_zero", 2)
    expected = sum(int(((h.abs() >= row.setting) & v[..., None]).sum()) for h, v in zip(outputs, valid_masks))
    assert expected > 0 and row.zeroed == expected
    assert row.delta_loss != 0


def test_massive_zero_skips_layers_without_massive_activations(official, dataset):
    """Nothing reaches the threshold (tiny models: max << 100): the rows say so, and so does a
    warning, instead of a silent delta of 0."""
    with pytest.warns(UserWarning, match="^interventions='massive_zero': no activation reached the threshold"):
        frame = interventions.run(official, dataset, kinds=["massive_zero"], batch_size=2)
    rows = frame[frame.intervention == "massive_zero"]
    assert (rows.zeroed == 0).all() and (rows.delta_loss == 0).all()
    assert (rows.note == interventions.NOTHING_ZEROED).all()
    assert (frame[frame.intervention == "none"].note == "").all()


def test_baseline_model_gets_only_massive_interventions(loaded):
    lm = loaded("qwen3")
    data = build_dataset(None, lm.tokenizer, texts=[TEXT], seq_len=16, max_sequences=2)
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        frame = interventions.run(lm, data, batch_size=2, massive_min_abs=0.0, massive_ratio=6.0)
    said = [str(w.message) for w in seen]
    assert any(m.startswith("interventions='mean_gate,gate_one,gate_zero': not applicable: the model has no gate")
               for m in said), said
    # The only other thing it may say: a layer whose activations stay below the threshold (this
    # random model's layer 3 on some CPUs), which interventions.csv marks.
    assert all("not applicable" in m or "zeroed nothing in layer(s)" in m for m in said), said
    measured = frame[frame.note == ""]
    assert set(measured.intervention) == {"none", "massive_zero"}
    skipped = frame[frame.note == interventions.NO_GATE]           # asked for, and marked
    assert list(skipped.intervention) == ["mean_gate", "gate_one", "gate_zero"]
    assert skipped.loss.isna().all() and (skipped.layer == -1).all()


def test_warnings_from_the_command_line_name_the_flag(checkpoint, text_file, tmp_path):
    """The warnings above, from `probe analyze`: --interventions, as the user typed it (from
    Python they say interventions=..., the tests above)."""
    import warnings

    from probe.api.cli import main

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["analyze", str(checkpoint("qwen3")), "--data", str(text_file), "--seq-len", "16",
                     "--max-sequences", "1", "--out", str(tmp_path / "run"), "--quiet",
                     "--interventions", "gate_zero,massive_zero"]) == 0
    said = [str(w.message) for w in seen if "interventions" in str(w.message)]
    assert said == [f"--interventions gate_zero: {interventions.NO_GATE}; interventions.csv marks them",
                    f"--interventions massive_zero: {interventions.NOTHING_ZEROED} (no layer output "
                    "reached max(100, 1000 x its median |h|))"]


def test_unknown_intervention_is_one_clear_error(official, dataset):
    with pytest.raises(probe.ProbeError, match="unknown intervention gate_half.*mean_gate"):
        interventions.run(official, dataset, kinds="gate_half")


def test_analyze_writes_interventions_csv(checkpoint, text_file, tmp_path):
    from probe.api.cli import main

    out = tmp_path / "run"
    assert main(["analyze", str(checkpoint("qwen3_next")), "--data", str(text_file), "--seq-len", "24",
                 "--max-sequences", "2", "--out", str(out), "--quiet", "--interventions", "gate_one,gate_zero"]) == 0
    frame = pd.read_csv(out / "interventions.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert list(frame.columns) == interventions.COLUMNS
    assert list(frame.intervention) == ["none", "gate_one", "gate_one", "gate_zero", "gate_zero"]
    assert list(frame.layer) == [-1, 3, -1, 3, -1]            # one gated layer: "all" = layer 3
    # The unmodified row is the analysis pass itself.
    assert frame.loss.iloc[0] == pytest.approx(summary["loss"], abs=1e-12)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["interventions"] == ["gate_one", "gate_zero"]
    assert meta["intervention_passes"] == 2                     # "all" reuses layer 3's pass
    assert meta["intervention_tokens_per_process"] == [2 * meta["tokens"]]


def test_hooks_are_removed_when_an_intervention_pass_fails(official, dataset, monkeypatch):
    before = hook_count(official.model)
    calls = {"n": 0}
    original = official.model.forward

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:                        # inside an intervention pass, hooks installed
            raise RuntimeError("boom")
        return original(*args, **kwargs)

    monkeypatch.setattr(official.model, "forward", failing)
    with pytest.raises(RuntimeError, match="boom"):
        interventions.run(official, dataset, batch_size=2)
    assert calls["n"] == 4
    assert hook_count(official.model) == before
    assert not attention.observed(official.model) and official.model.config._attn_implementation == "sdpa"


def test_the_options_whole_give_the_same_table(frame, official, dataset):
    """run(loaded, dataset, options): batch_size, progress, name and the kinds from the
    AnalysisOptions, the same table as their overrides."""
    from probe.core.options import AnalysisOptions

    with pytest.warns(UserWarning, match="massive_zero'?: no activation reached the threshold"):
        again = interventions.run(official, dataset, AnalysisOptions(batch_size=2, progress=False))
    pd.testing.assert_frame_equal(again, frame, check_exact=True)
    assert set(frame.model) == {"official_headwise"}           # the checkpoint's name (run_names.py)
    only = interventions.run(official, dataset, AnalysisOptions(batch_size=2, interventions="gate_one",
                                                                name="m", progress=False))
    assert set(only.intervention) == {"none", "gate_one"} and set(only.model) == {"m"}
    pd.testing.assert_frame_equal(only[only.intervention == "gate_one"].reset_index(drop=True),
                                  frame[frame.intervention == "gate_one"].reset_index(drop=True).assign(model="m"),
                                  check_exact=True)
