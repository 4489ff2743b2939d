"""Loading checkpoints offline, detecting layouts, and refusing broken ones in one line."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

import probe
import tiny
from probe import ProbeError


@pytest.mark.parametrize("kind,layout,layer_types", [
    ("qwen3_next", "interleaved_elementwise", ["linear_attention"] * 3 + ["attention"]),
    ("qwen3_5", "interleaved_elementwise", ["linear_attention"] * 3 + ["attention"]),
    ("official_headwise", "grouped_headwise", ["attention"] * 4),
    ("official_elementwise", "grouped_elementwise", ["attention"] * 4),
    ("qwen3", "none", ["attention"] * 4),
    ("gpt2", "none", ["attention"] * 4),
])
def test_layout_is_detected(kind, layout, layer_types, loaded):
    lm = loaded(kind)
    assert lm.layout.gate_layout == layout
    assert [p.layer_type for p in lm.layout.layers] == layer_types
    assert lm.tokenizer is not None and lm.config_hash


@pytest.mark.parametrize("kind", ["official_headwise", "official_elementwise"])
def test_official_checkpoints_match_an_independent_implementation(kind, checkpoint, loaded):
    """The native loader against tests/tiny.py's pure-torch transcription of the official code."""
    ids = torch.randint(3, 200, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = loaded(kind).model(input_ids=ids).logits
    reference = tiny.official_reference_forward(checkpoint(kind), ids)
    torch.testing.assert_close(ours, reference, atol=5e-5, rtol=1e-5)


def test_declared_gate_overrides_the_registry(checkpoint):
    lm = probe.load(checkpoint("qwen3_next"), gate="q_proj:interleaved:headwise")
    assert lm.layout.gate.granularity == "headwise"
    with pytest.raises(ProbeError, match="MODULE:LAYOUT:GRANULARITY"):
        probe.load(checkpoint("qwen3"), gate="nonsense")


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_broken_checkpoints_fail_in_one_line(checkpoint, tmp_path):
    with pytest.raises(ProbeError, match="does not exist"):
        probe.load(tmp_path / "nowhere")
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(ProbeError, match="no config.json"):
        probe.load(bare)

    unknown = _copy(checkpoint("qwen3"), tmp_path / "unknown")
    cfg = json.loads((unknown / "config.json").read_text())
    cfg["model_type"] = "mystery_net"
    (unknown / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ProbeError, match="unsupported architecture 'mystery_net'.*qwen3_next.*--gate"):
        probe.load(unknown)

    truncated = _copy(checkpoint("qwen3"), tmp_path / "truncated")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ProbeError, match="truncated or corrupt"):
        probe.load(truncated)

    corrupt = _copy(checkpoint("qwen3"), tmp_path / "corrupt")
    (corrupt / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ProbeError, match="truncated or corrupt"):
        probe.load(corrupt)

    no_weights = _copy(checkpoint("qwen3"), tmp_path / "noweights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(ProbeError, match="no weights"):
        probe.load(no_weights)


def test_checkpoint_without_tokenizer_files_is_detected(checkpoint, tmp_path):
    bare = tiny.make_checkpoint("qwen3", tmp_path / "notok", tokenizer=False)
    lm = probe.load(bare)
    assert lm.tokenizer is None
    with pytest.raises(ProbeError, match="no tokenizer files.*--tokenizer"):
        probe.analyze(lm, texts=["hello"], progress=False)
    # The option it names works: a tokenizer from elsewhere.
    a = probe.analyze(bare, texts=["hello world " * 10], tokenizer=checkpoint("qwen3"), seq_len=16,
                      progress=False)
    assert a.summary["tokens"] > 0
