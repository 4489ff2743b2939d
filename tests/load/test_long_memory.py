"""Long sequences within memory: the logits block by block (probe/capture/logits.py) give the loss of
the full logits, and a pass that cannot fit is refused before the model loads
(probe/load/memory.py, probe/run/memory_checks.py)."""
from __future__ import annotations

import functools
import importlib

import pandas as pd
import pytest
import torch

import probe
import probe.capture.logits
from probe.load import memory
from tests.samples import TEXT

OPTIONS = dict(seq_len=96, batch_size=2, progress=False, display_len=0)


@pytest.mark.parametrize("kind", ["qwen3", "gemma3"])
def test_block_by_block_logits_give_the_full_logits_loss(kind, checkpoint, monkeypatch, tmp_path):
    from tests import tiny

    path = checkpoint(kind) if kind == "qwen3" else tiny.make_checkpoint(
        kind, tmp_path / kind, final_logit_softcapping=5.0)        # soft-capping applies too
    full = probe.analyze(path, texts=[TEXT], **OPTIONS)
    monkeypatch.setattr(probe.capture.logits, "LAZY_BYTES", 0)
    lazy = probe.analyze(path, texts=[TEXT], **OPTIONS)
    # The reference: the model's own (B, T, V) logits, cross-entropy over every pair.
    model = probe.load(path).model
    ids = torch.stack(list(probe.data.sequences.build_dataset(None, probe.load(path).tokenizer, texts=[TEXT],
                                                    seq_len=96).sequences[:2]))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    reference = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).double(), ids[:, 1:].flatten())
    assert lazy.summary["loss"] == pytest.approx(full.summary["loss"], rel=1e-6)
    if full.summary["sequences"] == 2:
        assert lazy.summary["loss"] == pytest.approx(float(reference), rel=1e-6)
    pd.testing.assert_frame_equal(lazy.first_token, full.first_token, check_exact=True)
    pd.testing.assert_frame_equal(lazy.massive, full.massive, check_exact=True)


def test_a_model_whose_head_is_not_its_logits_is_refused(checkpoint, monkeypatch):
    monkeypatch.setattr(probe.capture.logits, "LAZY_BYTES", 0)
    loaded = probe.load(checkpoint("qwen3"))
    head = loaded.model.get_output_embeddings()
    original = head.forward
    # A model that scales its logits after the head: the block-by-block logits would be wrong.
    monkeypatch.setattr(loaded.model, "forward", _scaled(loaded.model.forward))
    with pytest.raises(probe.ProbeError, match="does more after its decoder"):
        probe.analyze(loaded, texts=[TEXT], **OPTIONS)
    assert head.forward == original


def _scaled(forward):
    @functools.wraps(forward)                  # keeps the signature (logits_to_keep) visible
    def wrapped(*args, **kwargs):
        out = forward(*args, **kwargs)
        out.logits = out.logits * 2
        return out
    return wrapped


def test_a_length_that_cannot_fit_is_refused_before_loading(checkpoint, monkeypatch, capsys, tmp_path):
    from probe.api.cli import main

    monkeypatch.setenv(memory.ENV, "0.5")

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were loaded")
    monkeypatch.setattr(importlib.import_module("probe.load.loader"), "from_pretrained", no_loading)
    path = checkpoint("qwen3")
    capsys.readouterr()
    code = main(["analyze", str(path), "--seq-len", "2048", "--out", str(tmp_path / "never"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "would need about" in err and "checked before loading" in err and "PROBE_MEMORY_GB=0.5" in err


def test_prediction_parts(checkpoint):
    config = probe.load(checkpoint("qwen3")).config
    small = memory.predict(config, batch=1, length=1024, params=1000)
    big = memory.predict(config, batch=2, length=4096, params=1000)
    assert big["activations"] == 8 * small["activations"] and big["logits"] == 8 * small["logits"]
    assert small["logits"] == 1024 * config.vocab_size * 4
    blocked = memory.predict(config, batch=2, length=4096, params=1000, logits_rows=10)
    assert blocked["logits"] == 10 * config.vocab_size * 4
    assert memory.parameter_count(config) == sum(p.numel() for p in probe.load(checkpoint("qwen3")).model.parameters())
