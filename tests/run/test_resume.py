"""An interrupted analysis continues with --resume and gives the same tables."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

import probe
from probe import ProbeError
from probe.capture.hf import Capture
from probe.api.cli import main
from tests.run.interrupted_runs import _interrupt_after, _tables


# The display patterns (attention_patterns.csv) of a run that saw dataset row 0 are read off the
# pass (probe/capture/display.py); a resumed run whose row 0 was in the interrupted part computes
# them by a separate forward. Both are the exact softmax of the same logits, so they agree to
# float32 rounding, not bit for bit; every other table is compared exactly.
ROUNDED = {"attention_patterns": dict(rtol=1e-5, atol=1e-7)}


def same_frames(whole: pd.DataFrame, resumed: pd.DataFrame, name: str) -> None:
    tolerance = ROUNDED.get(name.removesuffix(".csv"))
    if tolerance is None:
        pd.testing.assert_frame_equal(whole, resumed, check_exact=True, obj=name)
    else:
        pd.testing.assert_frame_equal(whole, resumed, check_exact=False, obj=name, **tolerance)


def test_interrupted_run_resumes_to_identical_tables(checkpoint, text_file, tmp_path, monkeypatch, capsys):
    ckpt = str(checkpoint("official_headwise"))
    common = ["--data", str(text_file), "--seq-len", "32", "--batch-size", "4", "--quiet"]
    assert main(["analyze", ckpt, "--out", str(tmp_path / "whole"), *common]) == 0

    out = tmp_path / "resumed"
    with monkeypatch.context() as m:
        _interrupt_after(m, 2)
        assert main(["analyze", ckpt, "--out", str(out), *common, "--save-every", "0"]) == 130
    err = capsys.readouterr().err
    assert "--resume" in err and ".partial" in err
    partial = tmp_path / "resumed.partial"
    assert not out.exists() and (partial / "README.txt").exists()
    assert json.loads((partial / "progress.json").read_text())["batches_done"] == 2

    with pytest.raises(ProbeError, match="resume=True") as err:   # a plain rerun does not clobber it
        probe.analyze(ckpt, text_file, seq_len=32, batch_size=4, progress=False, partial=partial)
    assert "--" not in str(err.value)                               # named as in Python, not as flags
    assert main(["analyze", ckpt, "--out", str(out), *common, "--resume"]) == 0
    assert not partial.exists()
    whole, resumed = _tables(tmp_path / "whole"), _tables(out)
    assert whole.keys() == resumed.keys()
    for name in whole:
        same_frames(whole[name], resumed[name], name)


def test_resume_refuses_state_from_other_data(checkpoint, text_file, tmp_path, monkeypatch):
    ckpt = checkpoint("qwen3")
    partial = tmp_path / "run.partial"
    with monkeypatch.context() as m:
        _interrupt_after(m, 1)
        with pytest.raises(KeyboardInterrupt):
            probe.analyze(ckpt, text_file, seq_len=16, batch_size=2, progress=False, partial=partial,
                          checkpoint_seconds=0)
    with pytest.raises(ProbeError, match="another model, weights, data or options") as refused:
        probe.analyze(ckpt, text_file, seq_len=24, batch_size=2, progress=False, partial=partial,
                      resume=True)
    # The line names what differs, with both values where they are short.
    assert "(what differs: " in str(refused.value) and "seq_len 16 then, 24 now" in str(refused.value)


def test_resume_refuses_a_model_object_in_another_dtype(loaded, text_file, tmp_path, monkeypatch):
    """A partial run of a float32 model object is not continued with its bfloat16 copy: the
    fingerprint holds the dtype the object has, not the loading default."""
    import copy

    lm = loaded("qwen3")
    partial = tmp_path / "run.partial"
    with monkeypatch.context() as m:
        _interrupt_after(m, 1)
        with pytest.raises(KeyboardInterrupt):
            probe.analyze(lm.model, text_file, tokenizer=lm.tokenizer, seq_len=16, batch_size=2,
                          progress=False, partial=partial, checkpoint_seconds=0)
    half = copy.deepcopy(lm.model).to(torch.bfloat16)
    with pytest.raises(ProbeError, match="another model, weights, data or options"):
        probe.analyze(half, text_file, tokenizer=lm.tokenizer, seq_len=16, batch_size=2, progress=False,
                      partial=partial, resume=True)


# -- what must be the same, and what must be whole, to continue ------------------------------------

COMMON = ["--seq-len", "16", "--batch-size", "2", "--max-sequences", "8", "--quiet"]


def _interrupted(ckpt, text_file, out, monkeypatch, batches=2):
    """`probe analyze` interrupted after `batches` batches (state saved after each): 130."""
    with monkeypatch.context() as m:
        _interrupt_after(m, batches)
        assert main(["analyze", str(ckpt), "--data", str(text_file), "--out", str(out), *COMMON,
                     "--save-every", "0"]) == 130
    return out.with_name(out.name + ".partial")


@pytest.fixture(scope="module")
def saved_partial(checkpoint, text_file, tmp_path_factory):
    """RUN.partial/ of a qwen3 run interrupted after 2 batches (COMMON options), made once."""
    import _pytest.monkeypatch

    out = tmp_path_factory.mktemp("interrupted") / "run"
    with _pytest.monkeypatch.MonkeyPatch.context() as m:
        return _interrupted(checkpoint("qwen3"), text_file, out, m)


def _copy_partial(saved_partial, tmp_path):
    """A copy of saved_partial as tmp_path/run.partial; returns (out, partial)."""
    import shutil

    shutil.copytree(saved_partial, tmp_path / "run.partial")
    return tmp_path / "run", tmp_path / "run.partial"


def _one_line(capsys, argv) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("probe: error: ") and "\n" not in err, err
    return err


def test_resume_refuses_a_checkpoint_whose_weights_changed(checkpoint, text_file, tmp_path, monkeypatch, capsys):
    """Same config.json, same shapes, other numbers (a re-trained or re-saved checkpoint): the
    saved state must not be continued with them."""
    import shutil

    from safetensors.torch import load_file, save_file

    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint("qwen3"), ckpt)
    out = tmp_path / "run"
    partial = _interrupted(ckpt, text_file, out, monkeypatch)
    weights = load_file(ckpt / "model.safetensors")
    weights = {k: v * 1.01 if v.dtype.is_floating_point else v for k, v in weights.items()}
    save_file(weights, ckpt / "model.safetensors", metadata={"format": "pt"})
    line = _one_line(capsys, ["analyze", str(ckpt), "--data", str(text_file), "--out", str(out), *COMMON,
                              "--resume"])
    assert "another model, weights, data or options (what differs: weights)" in line and "--force" in line
    assert (partial / "progress.json").exists()          # refused, not destroyed


def test_resume_refuses_a_model_object_whose_weights_changed(loaded, text_file, tmp_path, monkeypatch):
    import copy

    lm = loaded("qwen3")
    partial = tmp_path / "run.partial"
    kwargs = dict(tokenizer=lm.tokenizer, seq_len=16, batch_size=2, progress=False, partial=partial)
    with monkeypatch.context() as m:
        _interrupt_after(m, 1)
        with pytest.raises(KeyboardInterrupt):
            probe.analyze(lm.model, text_file, checkpoint_seconds=0, **kwargs)
    other = copy.deepcopy(lm.model)
    with torch.no_grad():
        other.model.layers[0].mlp.down_proj.weight[0, 0] += 1.0       # one weight
    with pytest.raises(ProbeError, match="another model, weights"):
        probe.analyze(other, text_file, resume=True, **kwargs)


def _tamper_state(partial, **changes):
    state = torch.load(partial / "state-rank0.pt", weights_only=True)
    state.update(changes)
    torch.save(state, partial / "state-rank0.pt")


@pytest.mark.parametrize("where", ["state", "progress"])
def test_a_tampered_batch_count_is_checked_against_the_data(where, checkpoint, text_file, tmp_path,
                                                            saved_partial, capsys):
    ckpt = checkpoint("qwen3")
    out, partial = _copy_partial(saved_partial, tmp_path)
    if where == "state":
        _tamper_state(partial, batches_done=10**6)
    else:
        progress = json.loads((partial / "progress.json").read_text())
        progress["batches_done"] = 10**6
        (partial / "progress.json").write_text(json.dumps(progress))
    line = _one_line(capsys, ["analyze", str(ckpt), "--data", str(text_file), "--out", str(out), *COMMON,
                              "--resume"])
    assert "1000000" in line and "batches" in line and "--force" in line
    assert not out.exists()


@pytest.mark.parametrize("damage", ["truncated_state", "garbage_state", "invalid_progress", "list_progress",
                                    "foreign_state"])
def test_a_damaged_partial_folder_is_one_line(damage, checkpoint, text_file, tmp_path, saved_partial, capsys):
    ckpt = checkpoint("qwen3")
    out, partial = _copy_partial(saved_partial, tmp_path)
    state, progress = partial / "state-rank0.pt", partial / "progress.json"
    if damage == "truncated_state":
        state.write_bytes(state.read_bytes()[:2000])
    elif damage == "garbage_state":
        state.write_bytes(b"\x80\x04not a pickle at all" * 50)
    elif damage == "invalid_progress":
        progress.write_text('{"batches_done": 2, "finger')
    elif damage == "list_progress":
        progress.write_text("[1, 2]")
    else:                                   # reducers of another shape, batch count in range
        saved = torch.load(state, weights_only=True)
        saved["reducers"][0] = {k: torch.zeros(3) for k in saved["reducers"][0]}
        torch.save(saved, state)
    line = _one_line(capsys, ["analyze", str(ckpt), "--data", str(text_file), "--out", str(out), *COMMON,
                              "--resume"])
    assert str(partial) in line and "--force" in line
    if damage == "garbage_state":               # the line's advice works: --force starts again
        assert main(["analyze", str(ckpt), "--data", str(text_file), "--out", str(out), *COMMON, "--force"]) == 0
        assert not partial.exists()


@pytest.fixture(scope="module")
def whole(checkpoint, text_file, tmp_path_factory):
    """The tables of an uninterrupted run with COMMON options (official_headwise)."""
    out = tmp_path_factory.mktemp("whole") / "run"
    assert main(["analyze", str(checkpoint("official_headwise")), "--data", str(text_file), "--out",
                 str(out), *COMMON]) == 0
    return _tables(out)


@pytest.mark.parametrize("at", ["inside_torch_save", "between_state_and_progress"])
def test_an_interruption_while_saving_the_state_resumes_to_identical_tables(at, whole, checkpoint, text_file,
                                                                             tmp_path, monkeypatch):
    """Ctrl-C in the middle of writing state-rank0.pt (half its bytes out), or after it but before
    progress.json: the state on disk stays whole, and --resume equals an uninterrupted run."""
    import probe.core.atomic
    import probe.run.resume

    ckpt = str(checkpoint("official_headwise"))
    args = ["--data", str(text_file), *COMMON]
    out = tmp_path / "run"
    calls = {"n": 0}
    real_write_with, real_write_text = probe.core.atomic.write_with, probe.run.resume.write_text

    def write_with(path, write):
        if path.name == "state-rank0.pt":
            calls["n"] += 1
            if calls["n"] == 3 and at == "inside_torch_save":
                def half(f):
                    write(_Half(f))
                return real_write_with(path, half)
        return real_write_with(path, write)

    def write_text(path, text):
        if path.name == "progress.json" and calls["n"] == 3 and at == "between_state_and_progress":
            raise KeyboardInterrupt
        return real_write_text(path, text)

    with monkeypatch.context() as m:
        m.setattr(probe.core.atomic, "write_with", write_with)
        m.setattr(probe.run.resume, "write_text", write_text)
        assert main(["analyze", ckpt, "--out", str(out), *args, "--save-every", "0"]) == 130
    partial = tmp_path / "run.partial"
    assert not [p.name for p in partial.iterdir() if p.name.endswith(".tmp")]
    assert main(["analyze", ckpt, "--out", str(out), *args, "--resume"]) == 0
    resumed = _tables(out)
    assert whole.keys() == resumed.keys()
    for name in whole:
        same_frames(whole[name], resumed[name], name)


class _Half:
    """A file that takes half of what is written and then is interrupted, as Ctrl-C would."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(bytes(data[: len(data) // 2]))
        raise KeyboardInterrupt


def test_a_full_disk_while_saving_the_state_leaves_no_temporary(checkpoint, text_file, tmp_path,
                                                              monkeypatch, capsys):
    import errno
    import os

    import probe.core.atomic

    ckpt = checkpoint("qwen3")
    out = tmp_path / "run"
    calls = {"n": 0}
    real_fsync = os.fsync

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] == 4:                   # the second state file
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    with monkeypatch.context() as m:
        m.setattr(probe.core.atomic.os, "fsync", fsync)
        line = _one_line(capsys, ["analyze", str(ckpt), "--data", str(text_file), "--out", str(out), *COMMON,
                                  "--save-every", "0"])
    assert "could not save the analysis state" in line and "No space left on device" in line
    partial = tmp_path / "run.partial"
    assert sorted(p.name for p in partial.iterdir()) == ["README.txt", "lock", "progress.json", "state-rank0.pt"]
    assert json.loads((partial / "progress.json").read_text())["batches_done"] == 1
    assert main(["analyze", str(ckpt), "--data", str(text_file), "--out", str(out), *COMMON, "--resume"]) == 0
    assert not partial.exists() and (out / "summary.json").exists()


def test_a_failure_before_anything_was_saved_leaves_no_partial_folder(checkpoint, text_file, tmp_path,
                                                                    monkeypatch, capsys):
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        _interrupt_after(m, 0)
        assert main(["analyze", str(checkpoint("qwen3")), "--data", str(text_file), "--out", str(out),
                     *COMMON]) == 130
    assert "nothing was saved yet" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# -- one run per --out ---------------------------------------------------------------------------

def test_a_second_run_on_the_same_out_is_refused_while_the_first_runs(checkpoint, text_file, tmp_path, capsys):
    """Another process holds RUN.partial/ as a running analysis does: with --force, --resume or
    neither, a second run on RUN is refused, told so, and leaves the first run's folder alone."""
    import subprocess
    import sys

    partial = tmp_path / "run.partial"
    code = ("import time; from pathlib import Path; from probe.run.resume import claim; "
            f"claim(Path({str(partial)!r})); (Path({str(partial)!r}) / 'progress.json').write_text('{{}}'); "
            "print('held', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            cwd=str(Path(probe.__file__).parents[1]))
    try:
        assert proc.stdout.readline().strip() == "held"
        for flag in (["--force"], ["--resume"], []):
            line = _one_line(capsys, ["analyze", str(checkpoint("qwen3")), "--data", str(text_file), "--out",
                                      str(tmp_path / "run"), *COMMON, *flag])
            assert f"another probe run (process {proc.pid}) is writing {partial}" in line, flag
            assert sorted(p.name for p in partial.iterdir()) == ["lock", "progress.json"]   # untouched
    finally:
        proc.kill()
        proc.wait()
    # Once the first run is gone (killed: its lock goes with it), --force starts again.
    assert main(["analyze", str(checkpoint("qwen3")), "--data", str(text_file), "--out", str(tmp_path / "run"),
                 *COMMON, "--force"]) == 0
    assert not partial.exists()


def test_a_batch_count_edited_within_range_is_refused(checkpoint, text_file, tmp_path, saved_partial, capsys):
    """batches_done lowered from 2 to 1 (the reducers hold 2 batches): resuming would count batch 2
    twice and report more tokens than it measured; the state's checksum refuses it."""
    ckpt = checkpoint("qwen3")
    out, partial = _copy_partial(saved_partial, tmp_path)
    _tamper_state(partial, batches_done=1)
    progress = json.loads((partial / "progress.json").read_text())
    (partial / "progress.json").write_text(json.dumps({**progress, "batches_done": 1}))
    line = _one_line(capsys, ["analyze", str(ckpt), "--data", str(text_file), "--out", str(out), *COMMON,
                              "--resume"])
    assert "checksum" in line and "--force" in line


def test_a_waiting_run_is_named_before_the_model_loads(tmp_path, capsys):
    partial = tmp_path / "run.partial"
    partial.mkdir()
    (partial / "progress.json").write_text("{}")
    unloadable = tmp_path / "no-config-here"         # exists, so only loading it would fail
    unloadable.mkdir()
    line = _one_line(capsys, ["analyze", str(unloadable), "--out", str(tmp_path / "run"), "--quiet"])
    assert "an interrupted run is waiting" in line and "--resume" in line
    assert sorted(p.name for p in partial.iterdir()) == ["lock", "progress.json"]


def test_resume_says_where_it_continues_and_when_it_cannot(checkpoint, text_file, tmp_path, monkeypatch, capsys):
    ckpt = str(checkpoint("official_headwise"))
    out = tmp_path / "run"
    common = ["--data", str(text_file), "--seq-len", "32", "--batch-size", "4", "--quiet", "--out", str(out)]
    with monkeypatch.context() as m:
        _interrupt_after(m, 2)
        assert main(["analyze", ckpt, *common, "--save-every", "0"]) == 130
    capsys.readouterr()
    partial = tmp_path / "run.partial"
    total = json.loads((partial / "progress.json").read_text())
    state = partial / "state-rank0.pt"

    # progress.json unreadable and no state beside it: starts over, and says so.
    state.unlink()
    (partial / "progress.json").write_text("{not json")
    assert main(["analyze", ckpt, *common, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "has no state-rank0.pt, so there is no saved state to continue; --resume starts from the beginning" in err
    # With the state, the resumed run names the batch it continues with.
    again = [a if a != str(out) else str(tmp_path / "again") for a in common]
    with monkeypatch.context() as m:
        _interrupt_after(m, 2)
        assert main(["analyze", ckpt, *again, "--save-every", "0"]) == 130
    capsys.readouterr()
    assert main(["analyze", ckpt, *again, "--resume"]) == 0
    batches = -(-probe.analyze(ckpt, text_file, seq_len=32, progress=False).meta["sequences"] // 4)
    assert f"2 of {batches} batches were done, continuing with batch 3" in capsys.readouterr().err
    assert total["batches_done"] == 2
