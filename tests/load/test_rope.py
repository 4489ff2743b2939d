"""--rope-scaling (probe/load/rope.py): parsed in one line, written into config.rope_parameters
before the weights load, with the original length from the config; refused for a model
without RoPE. The scaled model must be transformers' own model with the same parameters."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import probe
from tests import tiny
from probe.load import rope
from probe.api.cli import main


def test_parse():
    assert rope.parse("yarn:4") == {"rope_type": "yarn", "factor": 4.0}
    assert rope.parse('{"type": "linear", "factor": 2}') == {"rope_type": "linear", "factor": 2.0}
    assert rope.parse({"rope_type": "dynamic", "factor": 3}) == {"rope_type": "dynamic", "factor": 3.0}
    for bad, words in (("yarn", "TYPE:FACTOR"), ("yarn:x", "factor must be"), ("yarn:0.5", "at least 1"),
                       ("{nope", "not valid JSON"), ('{"factor": 2}', "no rope_type"),
                       ("warp:2", "unknown rope type")):
        with pytest.raises(probe.ProbeError, match=words):
            rope.parse(bad)


def test_options_check_the_spec_before_anything_runs():
    with pytest.raises(probe.ProbeError, match="unknown rope type"):
        probe.AnalysisOptions(rope_scaling="warp:2")


def test_yarn_is_transformers_own_yarn(checkpoint):
    """probe.load(..., rope_scaling="yarn:4") gives the logits of transformers' model built from
    a config whose rope_parameters were written by hand, and not the unscaled logits."""
    path = checkpoint("qwen3")
    loaded = probe.load(path, rope_scaling="yarn:4")
    config = AutoConfig.from_pretrained(path)
    theta = config.rope_parameters["rope_theta"]
    config.rope_parameters = {"rope_type": "yarn", "factor": 4.0, "rope_theta": theta,
                              "original_max_position_embeddings": 2048}
    config.max_position_embeddings = 8192
    reference = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=torch.float32).eval()
    plain = probe.load(path).model
    ids = torch.randint(3, 256, (1, 300), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        mine = loaded.model(input_ids=ids).logits
        theirs = reference(input_ids=ids).logits
        unscaled = plain(input_ids=ids).logits
    assert torch.equal(mine, theirs)
    assert (mine - unscaled).abs().max() > 1e-3
    record = loaded.rope_scaling
    assert record["original_max_position_embeddings"] == 2048
    assert record["max_position_embeddings"] == 8192 and record["max_position_embeddings_before"] == 2048
    assert loaded.model.config.rope_parameters["rope_type"] == "yarn"


def test_per_layer_type_rope_scales_the_full_attention_layers_only(tmp_path):
    path = tiny.make_checkpoint("gemma3", tmp_path / "gemma3")
    loaded = probe.load(path, rope_scaling="linear:2")
    params = loaded.model.config.rope_parameters
    assert params["full_attention"]["rope_type"] == "linear" and params["full_attention"]["factor"] == 2.0
    assert params["sliding_attention"]["rope_type"] == "default"
    assert loaded.rope_scaling["layer_types"] == ["full_attention"]


def test_refused_in_one_line(checkpoint, tmp_path, capsys):
    gpt2 = checkpoint("gpt2")
    capsys.readouterr()
    code = main(["analyze", str(gpt2), "--rope-scaling", "yarn:2", "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "has no rotary position embedding" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()
    model = probe.load(checkpoint("qwen3")).model
    with pytest.raises(probe.ProbeError, match="applied while loading"):
        probe.analyze(model, texts=["a b c d"], rope_scaling="yarn:2")


def test_meta_records_what_was_applied(checkpoint):
    a = probe.analyze(checkpoint("qwen3"), texts=["the gate " * 40], seq_len=64, rope_scaling="yarn:2",
                      progress=False, display_len=0)
    assert a.meta["rope_scaling"]["spec"] == {"rope_type": "yarn", "factor": 2.0}
    assert a.meta["rope_scaling"]["rope_parameters"]["original_max_position_embeddings"] == 2048
    plain = probe.analyze(checkpoint("qwen3"), texts=["the gate " * 40], seq_len=64, progress=False, display_len=0)
    assert "rope_scaling" not in plain.meta and "past_positions" not in plain.meta


@pytest.mark.parametrize("spec", [
    '{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": true}',     # recorded 4 positions
    '{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 1e9}',      # 4,000,000,000
    '{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 1000000000}',
    '{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": "2048"}',
    '{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": -5}',
    '{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 0}',
    "yarn:1e308",
])
def test_a_rope_scaling_probe_cannot_trust_is_refused_in_one_line(spec):
    """Issue 37 #6 and its tracebacks: original_max_position_embeddings must be a whole number of
    positions no larger than the config's own (the training length), and the scaled length must
    be one a model can have; each is one ProbeError naming the option, the config left as it was."""
    config = AutoConfig.for_model("llama", **{**tiny.TINY, "max_position_embeddings": 2048})
    before = config.to_dict()
    with pytest.raises(probe.ProbeError, match="rope_scaling"):
        rope.apply(config, spec)
    assert config.to_dict() == before
