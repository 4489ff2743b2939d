"""Loading checkpoints offline, detecting layouts, and refusing broken ones in one line."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

import probe
from tests import tiny
from probe import ProbeError
from probe.load.loader import describe


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
    with pytest.raises(ProbeError, match="transformers cannot read .*mystery_net") as err:
        probe.load(unknown)
    assert "\n" not in str(err.value)

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
    with pytest.raises(ProbeError, match="no tokenizer files.*tokenizer=DIR"):   # the Python argument
        probe.analyze(lm, texts=["hello"], progress=False)
    # The option it names works: a tokenizer from elsewhere.
    a = probe.analyze(bare, texts=["hello world " * 10], tokenizer=checkpoint("qwen3"), seq_len=16,
                      progress=False)
    assert a.summary["tokens"] > 0


# -- real-scale configs, built on the meta device (shapes only, no memory) ---------------------

QWEN3_NEXT_80B = dict(  # Qwen3-Next-80B-A3B's published config, the fields that shape the model
    vocab_size=151936, hidden_size=2048, intermediate_size=5120, num_hidden_layers=48,
    num_attention_heads=16, num_key_value_heads=2, head_dim=256, linear_num_value_heads=32,
    linear_num_key_heads=16, linear_key_head_dim=128, linear_value_head_dim=128, num_experts=512,
    num_experts_per_tok=10, moe_intermediate_size=512, shared_expert_intermediate_size=512,
    full_attention_interval=4, partial_rotary_factor=0.25)
OFFICIAL_1B = dict(  # the paper's 1B release: 28 layers, 16 query / 8 KV heads of 128, as third parties report it
    vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
    num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)


def meta_model(config, cls=None):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return cls(config) if cls else AutoModelForCausalLM.from_config(config)


def test_qwen3_next_80b_layout_at_real_scale():
    from transformers import Qwen3NextConfig

    model = meta_model(Qwen3NextConfig(**QWEN3_NEXT_80B))
    assert 79e9 < sum(p.numel() for p in model.parameters()) < 81e9
    layout = describe(model)
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim) == (16, 2, 256)
    assert layout.gate_layout == "interleaved_elementwise"
    assert layout.attention_layers == list(range(3, 48, 4))          # every 4th layer is softmax
    assert len(layout.layers) == 48
    # The gate read from q_proj has the shape the model multiplies its attention output by.
    q_out = torch.empty(1, 5, layout.layers[3].gate_module.out_features, device="meta")
    assert layout.gate.logits(q_out, 16, 2, 256).shape == (1, 5, 16, 256)


@pytest.mark.parametrize("flag,layout_name,gate_dim", [
    ("headwise_attn_output_gate", "grouped_headwise", 1),
    ("elementwise_attn_output_gate", "grouped_elementwise", 128),
])
def test_official_1b_layout_at_real_scale(flag, layout_name, gate_dim):
    from transformers import Qwen3Config

    from probe.families.official_qwen3 import OfficialGatedQwen3ForCausalLM, adapt_official_config

    config = adapt_official_config(Qwen3Config(**OFFICIAL_1B, **{flag: True}))
    model = meta_model(config, OfficialGatedQwen3ForCausalLM)
    layout = describe(model)
    assert layout.gate_layout == layout_name and len(layout.attention_layers) == 28
    q_proj = layout.layers[0].gate_module
    assert q_proj.out_features == 16 * 128 + 16 * gate_dim
    q_out = torch.empty(2, 3, q_proj.out_features, device="meta")
    assert layout.gate.logits(q_out, 16, 8, 128).shape == (2, 3, 16, gate_dim)


def test_family_without_sdpa_loads_with_eager(tmp_path):
    """Gemma 2 has no SDPA path in transformers (logit soft-capping); probe.load used to fail on it."""
    from tests.capture.softmax_term_models import _gemma2

    _gemma2().save_pretrained(tmp_path)
    lm = probe.load(tmp_path)
    assert type(lm.model).__name__ == "Gemma2ForCausalLM"
    assert lm.model.config._attn_implementation == "eager"
    assert lm.layout.layers[0].post_attn_norm is lm.model.model.layers[0].pre_feedforward_layernorm


def test_unregistered_ungated_decoder_is_analysed_as_ungated_with_a_note(tmp_path, text_file):
    """Granite is not in the registry; q_proj has H*D rows and its attention holds no gate
    module, so it is measured as a baseline, the output and meta.json saying why; its F-Attn
    is probe's (not empty) and equals eager attention."""
    from tests import tiny
    from probe.api.cli import main
    from tests.reference import eager_attentions

    path = tiny.make_checkpoint("granite", tmp_path / "granite")
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="architecture 'granite' is not in probe's registry.*analysed as ungated"):
        assert main(["analyze", str(path), "--data", str(text_file), "--seq-len", "32", "--out", str(out),
                     "--quiet"]) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["family"] == "unregistered" and meta["gate_layout"] == "none"
    assert "no attention-output gate" in meta["layout_note"]
    with pytest.warns(UserWarning, match="not in probe's registry"):
        lm = probe.load(path)
    ids = torch.randint(3, 250, (1, 40), generator=torch.Generator().manual_seed(0))
    from probe import Capture

    with torch.no_grad(), Capture(lm.model, lm.layout) as cap:
        with cap.batch(ids):
            lm.model(input_ids=ids, use_cache=False)
    eager = eager_attentions(lm.model, ids).attentions
    for layer, stats in cap.first_token.items():
        expected = eager[layer][0, :, 1:, 0].double().mean(-1)                 # (H,), queries t >= 1
        assert torch.allclose(stats.f_attn(), expected, atol=1e-5), layer


def _unregistered(change):
    """A tiny Granite model with `change(attention module, config)` applied to every layer."""
    from tests import tiny

    model = tiny._build_hf("granite", seed=0, overrides={})
    for layer in model.model.layers:
        change(layer.self_attn, model.config)
    return model


def test_ambiguous_unregistered_layouts_are_refused():
    """A q_proj wider than H*D, or a module named like a gate inside attention: it may be gated,
    and reading it as ungated would be silently wrong."""
    from torch import nn

    from probe.load.loader import describe

    def wide(attn, cfg):
        attn.q_proj = nn.Linear(cfg.hidden_size, 2 * cfg.num_attention_heads * cfg.head_dim, bias=False)

    def gate_module(attn, cfg):
        attn.g_gate = nn.Linear(cfg.hidden_size, cfg.num_attention_heads, bias=False)

    def no_q(attn, cfg):
        del attn.q_proj

    for change, message in ((wide, "query projection has 128 rows where 4 heads x 16 need 64"),
                            (gate_module, "holds a module named 'g_gate'"),
                            (no_q, "finds no query projection")):
        with pytest.raises(ProbeError, match=message) as err:
            describe(_unregistered(change))
        # From Python, the argument (the command line's --gate: tests/test_reliability.py).
        assert "gate='MODULE:LAYOUT:GRANULARITY[:ACTIVATION]'" in str(err.value) and "gate='none'" in str(err.value)
        assert "--gate" not in str(err.value)
    # Declaring the gate (or its absence) still works for such a model.
    assert not describe(_unregistered(gate_module), "none").gated


def test_decoder_outside_the_attention_interface_is_refused():
    from transformers import FalconConfig, FalconForCausalLM

    from probe.load.loader import describe

    model = FalconForCausalLM(FalconConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                           num_attention_heads=4)).eval()
    with pytest.raises(ProbeError, match="'falcon' is not in probe's registry.*attention interface"):
        describe(model)


@pytest.mark.parametrize("kind", ["qwen3_next", "official_headwise", "gpt2"])
def test_reprs_fit_on_one_screen(kind, loaded):
    """LoadedModel, its layout and a layer's parts name their modules by class; the dataclass
    reprs printed the whole model once per layer."""
    lm = loaded(kind)
    text = repr(lm)
    assert len(text) < 600 and text.count("\n") <= 2, text
    assert "in_features" not in text and type(lm.model).__name__ in text
    assert lm.layout.gate_layout in text and f"{len(lm.layout.layers)} layers" in text
    part = repr(lm.layout.layers[-1])
    assert len(part) < 300 and "in_features" not in part and type(lm.layout.layers[-1].mixer).__name__ in part


def test_readme_selects_the_head_column_by_key():
    """`head` is a column of the tidy frames and a DataFrame method: the docs show ft["head"]
    (docs/usage.md, where the README's Python API section moved)."""
    from pathlib import Path
    import re

    root = Path(__file__).resolve().parents[2]
    usage, readme = (root / "docs" / "usage.md").read_text(), (root / "README.md").read_text()
    assert '["head"]' in usage
    for text in (usage, readme):
        assert not re.search(r"\b(?:ft|frame|df|first_token|gates)\.head\b(?!\()", text)


@pytest.mark.parametrize("call", ["load", "analyze"])
def test_loading_leaves_transformers_logging_as_the_caller_set_it(call, checkpoint, text_file, capfd):
    """probe silences transformers' log lines and progress bars while it loads, and only then:
    a Python user's verbosity and progress bars are theirs again when the call returns."""
    from transformers.utils import logging as hf_logging

    saved = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_info()             # transformers logs every file it reads at INFO
    hf_logging.enable_progress_bar()
    try:
        capfd.readouterr()
        path = checkpoint("official_headwise")
        if call == "load":
            probe.load(path)
        else:
            probe.analyze(path, text_file, seq_len=16, max_sequences=1, progress=False)
        err = capfd.readouterr().err
        assert hf_logging.get_verbosity() == hf_logging.INFO
        assert hf_logging.is_progress_bar_enabled()
        assert "loading" not in err.lower()         # and quiet while it loaded
    finally:
        hf_logging.set_verbosity(saved[0])
        (hf_logging.enable_progress_bar if saved[1] else hf_logging.disable_progress_bar)()


def test_gate_none_warning_names_the_python_argument(loaded):
    """gate="none" on a gated checkpoint, from Python: the warning says gate='none' (from the
    command line --gate none: tests/api/test_cli.py)."""
    from probe.load.loader import warn_if_gate_declared_away

    lm = loaded("official_headwise")
    with pytest.warns(UserWarning, match="^gate='none' but this checkpoint shows a gate") as seen:
        warn_if_gate_declared_away(lm.model, lm.layout, "none")
    assert "--gate" not in str(seen[0].message)
    assert str(seen[0].message).endswith("declare it with gate='MODULE:LAYOUT:GRANULARITY'")
