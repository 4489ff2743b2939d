"""Long sequences within memory: the logits block by block (probe/capture/logits.py) give the loss of
the full logits, and a pass that cannot fit is refused before the model loads
(probe/load/memory.py, probe/run/memory_checks.py)."""
from __future__ import annotations

import functools
import importlib

import numpy as np
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


def test_a_config_without_its_sizes_is_named_not_taken_for_a_memory_shortage(checkpoint, capsys, tmp_path):
    """config.json holding only its model_type predicted transformers' default sizes (45.9 GiB for
    a 4 MB checkpoint) and said "free memory"; the folder's weights say what is wrong."""
    import json
    import shutil

    from probe.api.cli import main

    path = shutil.copytree(checkpoint("qwen3"), tmp_path / "sizeless")
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    capsys.readouterr()
    code = main(["analyze", str(path), "--seq-len", "128", "--out", str(tmp_path / "never"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "config.json does not describe these weights" in err and "would need about" not in err


def test_prediction_parts(checkpoint):
    config = probe.load(checkpoint("qwen3")).config
    small = memory.predict(config, batch=1, length=1024, params=1000)
    big = memory.predict(config, batch=2, length=4096, params=1000)
    assert big["activations"] == 8 * small["activations"] and big["logits"] == 8 * small["logits"]
    assert small["logits"] == 1024 * config.vocab_size * 4
    blocked = memory.predict(config, batch=2, length=4096, params=1000, logits_rows=10)
    assert blocked["logits"] == 10 * config.vocab_size * 4
    assert memory.parameter_count(config) == sum(p.numel() for p in probe.load(checkpoint("qwen3")).model.parameters())


def test_ablation_and_intervention_passes_read_the_logits_block_by_block(checkpoint, monkeypatch):
    """Every pass over the data, not only the analysis pass: the sink ablations' and the
    interventions' passes once computed the whole (B, T, V) logits and a log-sum-exp as large
    (17 GB for Gemma 3 at 8,192 tokens). Lazy, the head never sees more than one block of rows
    and every loss is the full logits' (float32 head over fewer rows: rel 1e-6)."""
    from probe.metrics.loss.reduce import LossStats

    path = checkpoint("official_headwise")
    opts = dict(OPTIONS, max_sequences=4, resamples=100, ablate="windows=16 sinks=0,1 key0 first=remove",
                interventions="mean_gate,gate_one")
    full = probe.analyze(path, texts=[TEXT], **opts)
    monkeypatch.setattr(probe.capture.logits, "LAZY_BYTES", 0)
    loaded = probe.load(path)
    head = loaded.model.get_output_embeddings()
    rows = []
    head.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[:-1].numel()))
    lazy = probe.analyze(loaded, texts=[TEXT], **opts)
    # The head's rows per block: the loss's block, or the lazy logits' own when larger (each block
    # reads the head's weights once: probe.capture.logits.BLOCK_BYTES).
    most = max(1, LossStats.BLOCK // head.out_features,
               probe.capture.logits.BLOCK_BYTES // (head.out_features * head.weight.element_size()))
    # one row per pass from the model itself (logits_to_keep=1, the check), else blocks of at most `most`
    assert rows and max(rows) <= max(most, OPTIONS["batch_size"])
    passes = 1 + len(full.ablations) + 1 + len(full.interventions)    # + the ablations' own reference pass
    assert sum(r <= OPTIONS["batch_size"] for r in rows) >= passes
    for frame, key, columns in ((lazy.ablations, "ablation", ["loss", "base_loss", "delta_loss"]),
                                (lazy.interventions, ["intervention", "layer"], ["loss", "delta_loss"])):
        want = (full.ablations if key == "ablation" else full.interventions).set_index(key)[columns]
        got = frame.set_index(key)[columns]
        assert len(got) == len(want) > 1
        np.testing.assert_allclose(got.to_numpy(float), want.to_numpy(float), rtol=1e-6, atol=1e-6)


def test_the_block_by_block_nll_is_the_whole_tensors_to_the_bit():
    from probe.metrics.loss.reduce import next_token_nll

    torch.manual_seed(0)
    logits = torch.randn(2, 37, 50) * 4
    ids = torch.randint(0, 50, (2, 37))
    whole = torch.logsumexp(logits[:, :-1], -1) - logits[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    for block in (50, 7 * 50, 1 << 20):               # one row, seven rows, every row at a time
        assert torch.equal(next_token_nll(logits, ids, block=block), whole)
    assert torch.equal(next_token_nll(logits, ids, block=50, batch_rows=[1]), whole[1:])


def test_lazy_logits_made_in_large_blocks_read_in_small_ones(monkeypatch):
    """LazyLogits of a head other than a plain Linear (a plain one is tiled instead:
    tests/capture/test_logits.py) makes `rows` rows at a time (the head's weights read once per
    block); the loss reads them in its own smaller blocks: the whole logits' numbers (the head's
    matmul over fewer rows may round differently: 1e-6)."""
    from probe.capture.logits import LazyLogits
    from probe.metrics.loss.reduce import next_token_nll

    torch.manual_seed(1)
    head = torch.nn.Sequential(torch.nn.Linear(8, 50, bias=False))
    hidden = torch.randn(2, 37, 8)
    ids = torch.randint(0, 50, (2, 37))
    whole = next_token_nll(head(hidden).detach(), ids, block=50)
    made = []
    head.register_forward_hook(lambda module, args, out: made.append(args[0].shape[0]))
    monkeypatch.setattr(probe.capture.logits, "BLOCK_BYTES", 5 * 50 * 4)       # 5 rows a block
    lazy = LazyLogits(hidden, head, None, 50)
    assert lazy.rows == 5 and not lazy.tiled
    with torch.no_grad():
        got = next_token_nll(lazy, ids, block=2 * 50)                          # read 2 rows at a time
    torch.testing.assert_close(got, whole, rtol=1e-6, atol=1e-6)
    assert max(made) == 5 and len(made) == 2 * 8                                # 36 targets: 8 blocks a row
