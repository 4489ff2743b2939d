"""probe/load/preflight.py: what needs only the command line and the config is refused or answered
before any weights load (a GGUF file dequantises in full first)."""
from __future__ import annotations

import pytest
import torch

import importlib
from pathlib import Path
from probe import ProbeError
from probe.api.cli import main
from probe.load.loader import layout_without_weights
from probe.load.preflight import check_device

pytest.importorskip("gguf")
from tests import tiny  # noqa: E402


@pytest.fixture(scope="module")
def ungated_gguf(tmp_path_factory):
    path, _ = tiny.make_gguf(tmp_path_factory.mktemp("pre") / "tiny.gguf", quant="F32")
    return path


@pytest.fixture
def no_weights(monkeypatch):
    """Loading weights fails the test: whatever passes did not read them."""
    def refuse(*args, **kwargs):
        raise AssertionError("weights were loaded")
    monkeypatch.setattr(importlib.import_module("probe.load.loader"), "from_pretrained", refuse)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has CUDA")
def test_cuda_without_cuda_is_refused_before_the_weights(ungated_gguf, text_file, tmp_path, no_weights, capsys):
    with pytest.raises(ProbeError, match="finds no CUDA device"):
        check_device("cuda")
    code = main(["analyze", str(ungated_gguf), "--data", str(text_file), "--device", "cuda",
                 "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code != 0 and "--device cuda: torch" in err and "pass --device cpu" in err
    assert len(err.strip().splitlines()) == 1


def test_devices_torch_does_not_know_are_one_line():
    with pytest.raises(ProbeError, match="not a device torch knows") as error:
        check_device("gpu0")
    assert "mkldnn" not in str(error.value) and "use cpu, cuda" in str(error.value)   # not torch's list of 20
    check_device("cpu")
    check_device(None)
    with pytest.raises(ProbeError, match="holds no values to measure; pass device='cpu'"):
        check_device("meta")          # shapes only: the pass failed deep in torch (37 lines)


def test_check_on_an_ungated_gguf_answers_from_the_config(ungated_gguf, no_weights, capsys):
    layout = layout_without_weights(ungated_gguf)
    assert layout is not None and not layout.gated and layout.model_type == "llama"
    assert main(["check", str(ungated_gguf)]) == 0
    assert "nothing to check" in capsys.readouterr().out


def test_check_on_a_gated_checkpoint_still_loads_and_checks(checkpoint, capsys):
    layout = layout_without_weights(checkpoint("official_headwise"))
    assert layout is not None and layout.gated
    assert main(["check", str(checkpoint("official_headwise")), "--seq-len", "8"]) == 0
    assert "checks passed" in capsys.readouterr().out


def test_a_hub_id_is_told_that_probe_never_downloads(text_file, capsys):
    assert main(["analyze", "HuggingFaceTB/SmolLM2-135M", "--data", str(text_file)]) != 0
    err = capsys.readouterr().err
    assert "probe never downloads" in err and "hf download HuggingFaceTB/SmolLM2-135M" in err
    assert main(["analyze", "missing/deeper/folder", "--data", str(text_file)]) != 0
    assert "never downloads" not in capsys.readouterr().err


@pytest.mark.parametrize("text, hub", [
    ("HuggingFaceTB/SmolLM2-135M", True), ("Qwen/Qwen3-0.6B", True), ("meta-llama/Llama-3.1-8B", True),
    ("models/tiny.gguf", False), ("runs/model.safetensors", False), ("/abs/org/model", False),
    ("missing/deeper/folder", False), (".cache/model", False),
])
def test_which_missing_paths_read_as_hub_ids(text, hub):
    from probe.load.checkpoint_path import looks_like_hub_id

    assert looks_like_hub_id(Path(text)) is hub
