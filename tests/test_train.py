"""`probe train`: matched arms, loss falls, determinism, resume, loading, and the gate's wiring.

Every model here is tiny (width 64, 2 layers, a 300-token BPE) and trains for a few steps on a
few kilobytes, so the whole module runs in seconds.
"""
from __future__ import annotations

import csv
import inspect
import json
import math
import shutil
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import probe
from probe.cli import main
from probe.errors import ProbeError
from probe.train import ARMS, TrainConfig
from probe.train import corpus as corpus_mod
from probe.train.log import read_log
from probe.train.loop import train
from probe.train.model import (Shape, build_model, check_matched, count_parameters,
                               expected_parameters, model_config)

TINY = ["--layers", "2", "--width", "64", "--heads", "2", "--kv-heads", "1", "--seq-len", "32",
        "--batch-size", "4", "--vocab-size", "300", "--lr", "1e-2", "--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    """About 12 KB of English prose and Python: a few dozen stdlib docstrings, one per paragraph."""
    parts = []
    for module in (json, csv, textwrap, inspect):
        for name in sorted(dir(module)):
            doc = inspect.getdoc(getattr(module, name))
            if doc and not name.startswith("_") and doc not in parts:
                parts.append(doc)
    text = "\n\n".join(parts)[:12_000]
    path = tmp_path_factory.mktemp("train-data") / "docs.txt"
    path.write_text(text)
    return path


def tiny_config(out, data, **kw) -> TrainConfig:
    base = TrainConfig(out=str(out), data=(str(data),), tokens=12 * 4 * 32, layers=2, width=64,
                       heads=2, kv_heads=1, seq_len=32, batch_size=4, vocab_size=300, lr=1e-2,
                       threads=1, progress=False, eval_every=4)
    return replace(base, **kw)


@pytest.fixture(scope="module")
def arms(tmp_path_factory, corpus_file) -> Path:
    """The three arms, trained through the command line (--arm all) for 12 steps."""
    out = tmp_path_factory.mktemp("arms") / "run"
    assert main(["train", "--arm", "all", "--data", str(corpus_file), "--tokens", "1536",
                 "--out", str(out), "--eval-every", "4", *TINY]) == 0
    return out


# ------------------------------------------------------------------ what the command writes

def test_each_arm_writes_a_checkpoint_log_and_heldout_text(arms):
    for arm in ARMS:
        folder = arms / arm
        for name in ("config.json", "model.safetensors", "tokenizer.json", "training.csv",
                     "train_config.json", "heldout.txt"):
            assert (folder / name).exists(), f"{arm}: {name} missing"
        assert not (folder / "checkpoint").exists()      # removed once the run finished
        config = json.loads((folder / "config.json").read_text())
        assert config["model_type"] == "qwen3"
        assert config["architectures"] == ["Qwen3ForCausalLM"]
        assert config["headwise_attn_output_gate"] is (arm == "headwise")
        assert config["elementwise_attn_output_gate"] is (arm == "elementwise")
        with open(folder / "training.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert list(rows[0]) == ["model", "step", "tokens", "lr", "train_loss", "eval_loss",
                                 "grad_norm", "spike"]
        assert [int(r["step"]) for r in rows] == list(range(1, 13))
        assert {r["model"] for r in rows} == {arm}
        assert [int(r["tokens"]) for r in rows] == [4 * 32 * s for s in range(1, 13)]
        assert [bool(r["eval_loss"]) for r in rows] == [s % 4 == 0 for s in range(1, 13)]
        assert all(math.isfinite(float(r["grad_norm"])) for r in rows)


def test_arms_share_tokenizer_and_heldout_text(arms):
    texts = {(arms / a / "heldout.txt").read_text() for a in ARMS}
    vocabs = {(arms / a / "tokenizer.json").read_text() for a in ARMS}
    assert len(texts) == 1 and len(vocabs) == 1


def test_loss_falls(arms):
    for arm in ARMS:
        rows = read_log(arms / arm / "training.csv")
        train_losses = [r["train_loss"] for r in rows]
        evals = [r["eval_loss"] for r in rows if not math.isnan(r["eval_loss"])]
        assert sum(train_losses[-3:]) / 3 < sum(train_losses[:3]) / 3 - 0.5, arm
        assert evals[-1] < evals[0], arm
        assert evals[-1] < math.log(300), arm           # better than uniform over the vocabulary


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


# ------------------------------------------------------------------ determinism and resume

def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def test_same_seed_same_model_other_seed_other_model(tmp_path, corpus_file):
    short = dict(tokens=4 * 4 * 32, arm="headwise", name="run")
    a = train(tiny_config(tmp_path / "a", corpus_file, **short))
    b = train(tiny_config(tmp_path / "b", corpus_file, **short))
    c = train(tiny_config(tmp_path / "c", corpus_file, **short, seed=1))
    wa, wb, wc = _weights(a.out), _weights(b.out), _weights(c.out)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)
    assert (a.out / "training.csv").read_text() == (b.out / "training.csv").read_text()


@pytest.mark.parametrize("arm", ["none", "elementwise"])
def test_resume_after_interruption_equals_uninterrupted_run(tmp_path, corpus_file, arm):
    straight = train(tiny_config(tmp_path / "straight", corpus_file, arm=arm, save_every=2, name="r"))
    cfg = tiny_config(tmp_path / "resumed", corpus_file, arm=arm, save_every=2, name="r")
    first = train(replace(cfg, stop_after=5))       # "interrupted" after step 5 (checkpoint: step 5)
    assert not first.finished and (first.out / "checkpoint" / "trainer_state.pt").exists()
    assert not (first.out / "config.json").exists()  # no final model until the run finishes
    second = train(replace(cfg, resume=True))
    assert second.finished and second.steps == 12
    ws, wr = _weights(straight.out), _weights(second.out)
    assert all(torch.equal(ws[k], wr[k]) for k in ws)
    assert (straight.out / "training.csv").read_text() == (second.out / "training.csv").read_text()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (straight.out / name).read_bytes() == (second.out / name).read_bytes(), name
    sessions = json.loads((second.out / "train_config.json").read_text())["sessions"]
    assert [(x["from_step"], x["to_step"]) for x in sessions] == [(0, 5), (5, 12)]


def test_resume_from_an_earlier_checkpoint_replays_the_same_steps(tmp_path, corpus_file):
    """Killed between checkpoints: the steps after the last checkpoint are redone identically."""
    straight = train(tiny_config(tmp_path / "straight", corpus_file, save_every=4))
    cfg = tiny_config(tmp_path / "killed", corpus_file, save_every=4)
    train(replace(cfg, stop_after=4))
    second = train(replace(cfg, resume=True))
    assert all(torch.equal(a, b) for a, b in zip(_weights(straight.out).values(),
                                                 _weights(second.out).values()))


def test_interrupted_arm_all_resumes_to_the_same_three_models(tmp_path, corpus_file, arms, capsys):
    """--arm all stopped mid-way (the last arm not even begun), then resumed, then resumed again."""
    out = tmp_path / "run"
    argv = ["train", "--arm", "all", "--data", str(corpus_file), "--tokens", "1536", "--out", str(out),
            "--eval-every", "4", "--save-every", "3", *TINY]
    assert main([*argv, "--stop-after", "7"]) == 0
    shutil.rmtree(out / "elementwise")                 # interrupted before this arm began
    assert main([*argv, "--resume"]) == 0
    for arm in ARMS:
        fresh, resumed = _weights(arms / arm), _weights(out / arm)
        assert all(torch.equal(fresh[k], resumed[k]) for k in fresh), arm
        assert (arms / arm / "training.csv").read_text() == (out / arm / "training.csv").read_text()
    assert main([*argv, "--resume"]) == 0              # nothing left to do
    assert "already finished" in capsys.readouterr().out


def test_one_arm_alone_equals_the_same_arm_of_arm_all(tmp_path, corpus_file, arms):
    out = tmp_path / "elementwise"
    assert main(["train", "--arm", "elementwise", "--data", str(corpus_file), "--tokens", "1536",
                 "--out", str(out), "--eval-every", "4", *TINY]) == 0
    alone, together = _weights(out), _weights(arms / "elementwise")
    assert all(torch.equal(alone[k], together[k]) for k in alone)


def test_resume_refuses_changed_settings_and_existing_output(tmp_path, corpus_file):
    cfg = tiny_config(tmp_path / "run", corpus_file, save_every=2)
    train(replace(cfg, stop_after=2))
    with pytest.raises(ProbeError, match="different settings.*lr"):
        train(replace(cfg, lr=1e-3, resume=True))
    with pytest.raises(ProbeError, match="--resume"):
        train(cfg)                                  # neither --resume nor --force
    with pytest.raises(ProbeError, match="no checkpoint"):
        train(replace(cfg, out=str(tmp_path / "empty"), resume=True))


def test_cli_reports_errors_in_one_line(tmp_path, corpus_file, capsys):
    assert main(["train", "--arm", "headwise", "--data", str(tmp_path / "missing.txt"),
                 "--out", str(tmp_path / "x"), *TINY]) == 2
    assert "does not exist" in capsys.readouterr().err


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


def test_tokenizer_adds_bos_only_under_prepend(corpus_file):
    docs = corpus_mod.file_documents([corpus_file])
    texts = [d.text for d in docs]
    with_bos = corpus_mod.train_tokenizer(texts, 300, "prepend")
    without = corpus_mod.train_tokenizer(texts, 300, "none")
    assert with_bos("def f")["input_ids"][0] == with_bos.bos_token_id == 0
    assert without("def f")["input_ids"][0] != without.bos_token_id
    assert with_bos.get_vocab() == without.get_vocab()      # same merges, only the template differs


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


def _force_gates(model, logit: float, query_width: int, group: int, kv: int):
    def hook(module, args, out):
        grouped = out.view(*out.shape[:-1], kv, group).clone()
        grouped[..., query_width:] = logit
        return grouped.view(out.shape)
    return [layer.self_attn.q_proj.register_forward_hook(hook) for layer in model.model.layers]


@pytest.mark.parametrize("arm", ["headwise", "elementwise"])
def test_gate_forced_open_equals_ungated_attention(arms, arm):
    loaded = probe.load(arms / arm)
    stock, qw, group, kv = _stock_twin(arms / arm)
    ids = torch.randint(3, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    ids[:, 0] = 0
    with torch.no_grad():
        reference = stock(input_ids=ids).logits
        natural = loaded.model(input_ids=ids).logits
        handles = _force_gates(loaded.model, 40.0, qw, group, kv)   # sigmoid(40) == 1.0 in fp32
        try:
            forced = loaded.model(input_ids=ids).logits
        finally:
            for h in handles:
                h.remove()
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
        handles = _force_gates(loaded.model, -200.0, qw, group, kv)  # sigmoid(-200) == 0.0
        try:
            forced = loaded.model(input_ids=ids).logits
        finally:
            for h in handles:
                h.remove()
    torch.testing.assert_close(forced, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arm", ["headwise", "elementwise"])
def test_probe_check_passes_on_trained_arms(arms, arm):
    """probe's own wiring checks (probe check), where that module is present."""
    check = pytest.importorskip("probe.check")
    report = check.run_checks(probe.load(arms / arm), seq_len=16, batch_size=2, seed=0)
    assert len(report.frame) and report.passed, report.frame


# ------------------------------------------------------------------ corpus (schedule: test_train_schedule.py, spikes: test_train_log.py)

def test_default_corpus_is_fixed_and_split_by_name():
    docs = corpus_mod.stdlib_documents()
    names = [d.name for d in docs]
    assert names == sorted(names) and len(names) == len(set(names)) > 100
    assert not any(part in corpus_mod.EXCLUDED_PARTS for n in names for part in n.split("/")[:-1])
    assert not any(n.split("/")[-1].startswith("_sysconfigdata") for n in names)
    train_docs, held = corpus_mod.split_documents(docs)
    assert {d.name for d in train_docs}.isdisjoint(d.name for d in held)
    assert 0.02 < len(held) / len(docs) < 0.10
    assert [d.name for d in held] == [n for n in names if corpus_mod.is_heldout(n)]


def test_packing_puts_bos_first_and_keeps_order():
    stream = torch.arange(10, 30)
    rows = corpus_mod.pack(stream, 5, bos_id=0)
    assert rows[:, 0].eq(0).all() and rows[:, 1:].reshape(-1).tolist() == list(range(10, 30))
    assert corpus_mod.pack(stream, 5, bos_id=None).reshape(-1).tolist() == list(range(10, 30))


# ------------------------------------------------------------------ --no-qk-norm

@pytest.fixture(scope="module")
def no_qk_arms(tmp_path_factory, corpus_file):
    """The three arms trained with --no-qk-norm (12 steps), and each arm's model as it stood
    when training saved it (captured from the loop, to compare with what probe.load reads)."""
    import probe.train.loop as loop

    out = tmp_path_factory.mktemp("no-qk") / "run"
    trained = {}
    save = loop.save_model

    def capture(model, tokenizer, folder):
        save(model, tokenizer, folder)
        trained[Path(folder).name] = model            # the last save of each arm is its final one

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "save_model", capture)
        assert main(["train", "--arm", "all", "--data", str(corpus_file), "--tokens", "1536",
                     "--out", str(out), "--eval-every", "4", "--no-qk-norm", *TINY]) == 0
    return out, trained


def _ids(vocab=300, seed=0):
    ids = torch.randint(3, vocab, (2, 24), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = 0
    return ids


def test_qk_norm_flag_parses_and_defaults_on():
    from probe.train.cli import add_arguments, config_from_args
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    base = ["--arm", "none", "--out", "x"]
    assert config_from_args(p.parse_args(base)).qk_norm is True
    assert config_from_args(p.parse_args(base + ["--qk-norm"])).qk_norm is True
    assert config_from_args(p.parse_args(base + ["--no-qk-norm"])).qk_norm is False


def test_default_arms_keep_qk_norm_and_the_stock_baseline(arms):
    from transformers import Qwen3ForCausalLM

    for arm in ARMS:
        settings = json.loads((arms / arm / "train_config.json").read_text())
        assert settings["qk_norm"] is True and settings["recipe"]["qk_norm"] is True
        assert json.loads((arms / arm / "config.json").read_text())["use_qk_norm"] is True
        assert any(k.endswith("q_norm.weight") for k in _weights(arms / arm))
    assert type(probe.load(arms / "none").model) is Qwen3ForCausalLM


def test_no_qk_norm_arms_have_no_q_norm_or_k_norm(no_qk_arms):
    out, _ = no_qk_arms
    for arm in ARMS:
        assert json.loads((out / arm / "config.json").read_text())["use_qk_norm"] is False
        assert not any("q_norm" in k or "k_norm" in k for k in _weights(out / arm)), arm
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
            before = model(input_ids=_ids()).logits
            for layer in model.model.layers:
                layer.self_attn.k_proj.weight.mul_(4.0)
            after = model(input_ids=_ids()).logits
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
            want = model(input_ids=_ids()).logits
            got = loaded(input_ids=_ids()).logits
        assert (got - want).abs().max().item() <= 1e-5, arm
    # What a stock Qwen3 would make of the baseline's weights (fresh q_norm/k_norm, which
    # still normalise): different logits, so the check above can fail.
    config = json.loads((out / "none" / "config.json").read_text())
    from transformers import Qwen3Config

    stock = Qwen3ForCausalLM(Qwen3Config(**{k: v for k, v in config.items()
                                            if k not in ("architectures", "transformers_version",
                                                         "dtype")})).eval()
    stock.load_state_dict(_weights(out / "none"), strict=False)
    with torch.no_grad():
        wrong = stock(input_ids=_ids()).logits
        want = trained["none"](input_ids=_ids()).logits
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


def test_resume_treats_old_recipes_as_qk_norm_on():
    from probe.train.loop import _check_same_recipe

    now = TrainConfig().recipe()
    old = {k: v for k, v in now.items() if k != "qk_norm"}      # saved before the flag existed
    _check_same_recipe(old, now)
    with pytest.raises(ProbeError, match="qk_norm"):
        _check_same_recipe(old, replace(TrainConfig(), qk_norm=False).recipe())


def test_a_full_disk_keeps_the_last_checkpoint_for_resume(tmp_path, corpus_file, monkeypatch):
    """The disk fills up while the finished model is written: one line saying to --resume, the
    last checkpoint kept; --resume then finishes. Without a checkpoint yet, nothing is left."""
    import errno
    import os

    import probe.train.loop as loop

    cfg = tiny_config(tmp_path / "run", corpus_file, save_every=4)
    real = loop.save_model

    def save_model(model, tokenizer, folder):
        if not Path(folder).name.startswith("."):   # the final model, not .checkpoint.tmp
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(model, tokenizer, folder)

    with monkeypatch.context() as m:
        m.setattr(loop, "save_model", save_model)
        with pytest.raises(ProbeError, match=r"No space left on device.*checkpoint is kept.*--resume"):
            train(cfg)
    assert (tmp_path / "run" / "checkpoint").is_dir()
    assert train(replace(cfg, resume=True)).finished

    with monkeypatch.context() as m:
        m.setattr(loop, "save_model", save_model)
        with pytest.raises(ProbeError, match="nothing was kept"):
            train(replace(cfg, out=str(tmp_path / "fresh"), save_every=100))
    assert not (tmp_path / "fresh").exists()
