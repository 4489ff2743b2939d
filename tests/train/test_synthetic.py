"""`probe train --data synthetic:...`: determinism, disjoint held-out rows, the row structure,
and held-out files that `probe analyze` reads row for row.

The data tests build rows only (no model); one tiny arm (width 32, 1 layer, 8 steps) is trained
through the command line for the file and analysis checks.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import probe
from probe.api.cli import main
from probe.train import TrainConfig
from probe.train import synthetic as syn
from probe.train.loop import prepare_data, train

TINY = ["--layers", "1", "--width", "32", "--heads", "1", "--kv-heads", "1", "--seq-len", "24",
        "--batch-size", "4", "--vocab-size", "40", "--copy-len", "5", "--threads", "1", "--quiet"]


def config(task="noise-copy-marked", **kw) -> TrainConfig:
    base = dict(data=(f"synthetic:{task}",), tokens=40 * 4 * 24, seq_len=24, batch_size=4,
                vocab_size=40, copy_len=5, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def is_periodic(body: torch.Tensor, period: int) -> bool:
    return bool((body[period:] == body[:-period]).all())


# ------------------------------------------------------------------ determinism and the split

def test_same_seed_same_rows_other_seed_other_rows():
    a, b, c = (prepare_data(config(seed=s)).corpus for s in (0, 0, 1))
    assert torch.equal(a.train, b.train) and torch.equal(a.heldout, b.heldout)
    assert not torch.equal(a.train, c.train) and not torch.equal(a.heldout, c.heldout)


def test_rows_do_not_depend_on_how_many_are_drawn():
    # A longer run sees the shorter run's rows first, and the same held-out rows.
    short, long = (prepare_data(config(tokens=t)).corpus for t in (40 * 4 * 24, 400 * 4 * 24))
    assert len(long.train) == 10 * len(short.train)
    assert torch.equal(long.train[: len(short.train)], short.train)
    assert torch.equal(long.heldout, short.heldout)


def test_heldout_rows_never_equal_a_training_row():
    # 3 content tokens and a 2-token segment: only 9 distinct copy rows, so the held-out stream
    # keeps drawing rows the training set already holds; they must be dropped, not kept.
    cfg = config(vocab_size=3, copy_len=2, seq_len=12, tokens=300 * 4 * 12, noise_frac=0.9)
    data = prepare_data(cfg).corpus
    seen = {r.numpy().tobytes() for r in data.train}
    assert data.description["heldout_dropped_as_duplicates"] > 0
    assert not any(r.numpy().tobytes() in seen for r in data.heldout)
    assert len(data.heldout) == syn.HELDOUT_ROWS


def test_training_and_heldout_streams_differ_from_the_start():
    task = syn.Task.from_config(config())
    train_rows, _ = syn.draw_rows(task, 0, "train", 64)
    held_rows, _ = syn.draw_rows(task, 0, "heldout", 64)
    assert not (train_rows[:, 1:] == held_rows[:, 1:]).all(dim=1).any()


# ------------------------------------------------------------------ what the rows hold

@pytest.mark.parametrize("task", ["noise-copy", "noise-copy-marked"])
def test_copy_rows_repeat_their_segment_and_noise_rows_do_not(task):
    cfg = config(task, vocab_size=256, copy_len=7, seq_len=64)
    data = prepare_data(cfg).corpus
    rows, noise = data.heldout, data.heldout_noise
    assert 0.4 < noise.float().mean() < 0.6            # noise_frac 0.5
    body = rows[:, 1:]
    assert ((body >= syn.FIRST_CONTENT_ID) & (body < syn.FIRST_CONTENT_ID + 256)).all()
    for row, is_noise in zip(body, noise):
        # A noise row of 63 draws from 256 tokens repeats with period 7 with probability 256^-56.
        assert is_periodic(row, 7) is not bool(is_noise)


def test_first_token_is_the_row_type_only_in_the_marked_task():
    marked = prepare_data(config("noise-copy-marked")).corpus
    plain = prepare_data(config("noise-copy")).corpus
    expected = torch.where(marked.heldout_noise, syn.NOISE_ID, syn.COPY_ID)
    assert torch.equal(marked.heldout[:, 0], expected)
    assert set(marked.train[:, 0].tolist()) == {syn.NOISE_ID, syn.COPY_ID}
    assert (plain.heldout[:, 0] == syn.BOS_ID).all() and (plain.train[:, 0] == syn.BOS_ID).all()
    # Same seed: the two tasks draw the same bodies, so they differ only at position 0.
    assert torch.equal(marked.train[:, 1:], plain.train[:, 1:])


def test_unmarked_task_without_bos_starts_with_the_body():
    data = prepare_data(config("noise-copy", bos="none", copy_len=4)).corpus
    assert data.train.shape[1] == 24
    for row, is_noise in zip(data.heldout, data.heldout_noise):
        assert is_periodic(row, 4) is not bool(is_noise)


def test_loss_floor_counts_uniform_targets():
    task = syn.Task.from_config(config(vocab_size=256, copy_len=16, seq_len=128))
    # Noise rows: 127 uniform targets; copy rows: 16; half each.
    assert task.loss_floor() == pytest.approx((127 + 16) / 2 / 127 * np.log(256))


def test_the_default_copy_length_is_said_to_be_the_default():
    """Under a short --seq-len the default --copy-len fails: the message named a flag the user never
    passed, as if they had."""
    from probe.core.errors import ProbeError

    with pytest.raises(ProbeError, match=r"--copy-len 16 \(the default\) leaves nothing to copy in rows of 15 "
                                         r"tokens \(--seq-len 16\)"):
        config(copy_len=None, seq_len=16).check()


@pytest.mark.parametrize("argv, message", [
    (["--data", "synthetic:parity"], "unknown synthetic task"),
    (["--data", "synthetic:noise-copy", "extra.txt"], "cannot be mixed"),
    (["--data", "synthetic:noise-copy-marked", "--bos", "none"], "needs --bos prepend"),
    (["--data", "synthetic:noise-copy", "--copy-len", "23"], "leaves nothing to copy"),
    # A bad --noise-frac is named even where the copy length fails too.
    (["--data", "synthetic:noise-copy", "--copy-len", "23", "--noise-frac", "2"], "--noise-frac must be between"),
    (["--copy-len", "8"], "synthetic:TASK only"),
])
def test_bad_synthetic_settings_end_in_one_line(tmp_path, capsys, argv, message):
    args = ["train", "--arm", "none", "--out", str(tmp_path / "x"), *TINY, *argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# ------------------------------------------------------------------ files and analysis

@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic") / "none"
    assert main(["train", "--arm", "none", "--data", "synthetic:noise-copy-marked",
                 "--tokens", str(8 * 4 * 24), "--out", str(out), "--eval-every", "4", *TINY]) == 0
    return out


def test_train_config_records_the_task(arm):
    settings = json.loads((arm / "train_config.json").read_text())
    assert settings["recipe"]["data"] == ["synthetic:noise-copy-marked"]
    assert settings["recipe"]["copy_len"] == 5 and settings["recipe"]["vocab_size"] == 40
    assert settings["recipe"]["noise_frac"] == 0.5
    corpus = settings["corpus"]
    assert corpus["task"] == "noise-copy-marked" and corpus["marked"] is True
    assert corpus["heldout_files"] == ["heldout.npy", "heldout-noise.npy", "heldout-copy.npy"]
    assert settings["shape"]["vocab_size"] == syn.FIRST_CONTENT_ID + 40
    assert not (arm / "heldout.txt").exists()


def test_heldout_files_split_the_rows_by_type(arm):
    every = np.load(arm / "heldout.npy")
    noise, copy = np.load(arm / "heldout-noise.npy"), np.load(arm / "heldout-copy.npy")
    assert every.shape == (syn.HELDOUT_ROWS, 24) and len(noise) + len(copy) == len(every)
    assert (noise[:, 0] == syn.NOISE_ID).all() and (copy[:, 0] == syn.COPY_ID).all()
    assert all(is_periodic(torch.from_numpy(r[1:]), 5) for r in copy)
    # The files hold the rows training evaluated on, in the same order.
    held = prepare_data(config(tokens=8 * 4 * 24)).corpus.heldout
    assert np.array_equal(every, held.numpy())


def test_analyze_reads_heldout_rows_one_sequence_each(arm):
    rows = np.load(arm / "heldout-copy.npy")[:6]
    path = arm.parent / "six-copy-rows.npy"
    np.save(path, rows)
    result = probe.analyze(str(arm), str(path), per_document=True, bos="none", seq_len=24,
                           progress=False)
    assert result.summary["sequences"] == 6 and result.summary["tokens"] == 6 * 24
    assert "<|copy|>" in result.meta["position0"]
    assert result.meta["display_tokens"][:3] == ["<|copy|>", *(f"t{i - syn.FIRST_CONTENT_ID}"
                                                              for i in rows[0, 1:3])]
    assert 0 < result.summary["f_attn"] < 1


def test_resume_regenerates_the_same_rows(tmp_path):
    straight = train(config(out=str(tmp_path / "a"), tokens=8 * 4 * 24, layers=1, width=32, heads=1,
                            kv_heads=1, threads=1, eval_every=4))
    train(config(out=str(tmp_path / "b"), tokens=8 * 4 * 24, layers=1, width=32, heads=1,
                 kv_heads=1, threads=1, eval_every=4, stop_after=3))
    resumed = train(config(out=str(tmp_path / "b"), tokens=8 * 4 * 24, layers=1, width=32, heads=1,
                           kv_heads=1, threads=1, eval_every=4, resume=True))
    assert [r["train_loss"] for r in straight.log] == [r["train_loss"] for r in resumed.log]
