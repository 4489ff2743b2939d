"""An interrupted analysis continues with --resume and gives the same tables."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

import probe
from probe import ProbeError
from probe.capture import Capture
from probe.cli import main


def _interrupt_after(monkeypatch, batches: int):
    """Raise KeyboardInterrupt when the (batches+1)-th forward pass starts, as Ctrl-C would."""
    calls = {"n": 0}
    real = Capture.batch

    def batch(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > batches:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Capture, "batch", batch)


def _tables(folder):
    return {p.name: pd.read_csv(p) for p in sorted(folder.glob("*.csv"))}


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

    with pytest.raises(ProbeError, match="--resume"):          # a plain rerun does not clobber it
        probe.analyze(ckpt, text_file, seq_len=32, batch_size=4, progress=False, partial=partial)
    assert main(["analyze", ckpt, "--out", str(out), *common, "--resume"]) == 0
    assert not partial.exists()
    whole, resumed = _tables(tmp_path / "whole"), _tables(out)
    assert whole.keys() == resumed.keys()
    for name in whole:
        pd.testing.assert_frame_equal(whole[name], resumed[name], check_exact=True, obj=name)


def test_resume_refuses_state_from_other_data(checkpoint, text_file, tmp_path, monkeypatch):
    ckpt = checkpoint("qwen3")
    partial = tmp_path / "run.partial"
    with monkeypatch.context() as m:
        _interrupt_after(m, 1)
        with pytest.raises(KeyboardInterrupt):
            probe.analyze(ckpt, text_file, seq_len=16, batch_size=2, progress=False, partial=partial,
                          checkpoint_seconds=0)
    with pytest.raises(ProbeError, match="another model, weights, data or options"):
        probe.analyze(ckpt, text_file, seq_len=24, batch_size=2, progress=False, partial=partial,
                      resume=True)


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
