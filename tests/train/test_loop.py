"""probe/train/loop.py: what a run writes, that the loss falls, determinism, resume (bit-exact,
also for --arm all), refused resumes, and a full disk.

Every model here is tiny (tests/train/tiny_runs.py: width 64, 2 layers, a 300-token BPE) and
trains for a few steps on a few kilobytes; the three arms are trained once per session
(tests/train/conftest.py).
"""
from __future__ import annotations

import csv
import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from probe.api.cli import main
from probe.core.errors import ProbeError
from probe.train import ARMS, TrainConfig
from probe.train.log import read_log
from probe.train.loop import train
from tests.train.tiny_runs import TINY, tiny_config, weights


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


# ------------------------------------------------------------------ determinism and resume

def test_same_seed_same_model_other_seed_other_model(tmp_path, corpus_file):
    short = dict(tokens=4 * 4 * 32, arm="headwise", name="run")
    a = train(tiny_config(tmp_path / "a", corpus_file, **short))
    b = train(tiny_config(tmp_path / "b", corpus_file, **short))
    c = train(tiny_config(tmp_path / "c", corpus_file, **short, seed=1))
    wa, wb, wc = weights(a.out), weights(b.out), weights(c.out)
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
    ws, wr = weights(straight.out), weights(second.out)
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
    assert all(torch.equal(a, b) for a, b in zip(weights(straight.out).values(),
                                                 weights(second.out).values()))


def test_interrupted_arm_all_resumes_to_the_same_three_models(tmp_path, corpus_file, arms, capsys):
    """--arm all stopped mid-way (the last arm not even begun), then resumed, then resumed again."""
    out = tmp_path / "run"
    argv = ["train", "--arm", "all", "--data", str(corpus_file), "--tokens", "1536", "--out", str(out),
            "--eval-every", "4", "--save-every", "3", *TINY]
    assert main([*argv, "--stop-after", "7"]) == 0
    shutil.rmtree(out / "elementwise")                 # interrupted before this arm began
    assert main([*argv, "--resume"]) == 0
    for arm in ARMS:
        fresh, resumed = weights(arms / arm), weights(out / arm)
        assert all(torch.equal(fresh[k], resumed[k]) for k in fresh), arm
        assert (arms / arm / "training.csv").read_text() == (out / arm / "training.csv").read_text()
    assert main([*argv, "--resume"]) == 0              # nothing left to do
    assert "already finished" in capsys.readouterr().out


def test_one_arm_alone_equals_the_same_arm_of_arm_all(tmp_path, corpus_file, arms):
    out = tmp_path / "elementwise"
    assert main(["train", "--arm", "elementwise", "--data", str(corpus_file), "--tokens", "1536",
                 "--out", str(out), "--eval-every", "4", *TINY]) == 0
    alone, together = weights(out), weights(arms / "elementwise")
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


def test_training_leaves_transformers_progress_bars_as_the_caller_set_them(tmp_path, corpus_file):
    """probe train hides save_pretrained's per-shard bar while it saves, and only then: a Python
    caller's transformers progress bars are theirs again afterwards."""
    from transformers.utils import logging as hf_logging

    saved = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()
    try:
        assert train(tiny_config(tmp_path / "run", corpus_file, tokens=4 * 4 * 32, save_every=2)).finished
        assert hf_logging.is_progress_bar_enabled()
    finally:
        (hf_logging.enable_progress_bar if saved else hf_logging.disable_progress_bar)()
