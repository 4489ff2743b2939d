"""GGUF input: tiny Llama GGUF files written here, loaded through probe, checked against the
model they were written from; and the one-line refusals of files that cannot be used."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("gguf")

import probe  # noqa: E402
from tests import tiny  # noqa: E402
from probe.api.cli import main  # noqa: E402
from tests.api.cli_errors import _error  # noqa: E402


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory):
    """{"F32": (path, source model), "Q8_0": (path, source model)}, written once."""
    root = tmp_path_factory.mktemp("gguf")
    return {q: tiny.make_gguf(root / f"tiny-{q.lower()}.gguf", quant=q) for q in ("F32", "Q8_0")}


@pytest.fixture(scope="module")
def loaded_f32(gguf_files):
    return probe.load(gguf_files["F32"][0])


def ids(T=24):
    return torch.randint(3, 250, (2, T), generator=torch.Generator().manual_seed(3))


def test_f32_gguf_gives_the_model_it_was_written_from(gguf_files, loaded_f32):
    """Unquantised weights: the logits equal the source model's (transformers undoes
    llama.cpp's q/k row order); the tokenizer comes from the file."""
    _, source = gguf_files["F32"]
    x = ids()
    with torch.no_grad():
        assert torch.allclose(loaded_f32.model(x).logits, source(x).logits, atol=1e-5, rtol=0)
    assert loaded_f32.layout.family == "llama" and not loaded_f32.layout.gated
    reference = tiny.make_tokenizer("qwen2")
    assert loaded_f32.tokenizer("the gate decides").input_ids == reference("the gate decides").input_ids
    assert loaded_f32.weights == {"format": "gguf", "file": "tiny-f32.gguf", "architecture": "llama",
                                  "quantization": "F32", "tensor_types": {"F32": 39},
                                  "dequantized": True, "dequantized_to": "float32"}
    assert loaded_f32.name == "tiny-f32"


def test_loading_a_gguf_file_draws_no_progress_bar(gguf_files, capfd):
    """transformers' own dequantisation bar would break `--quiet` and the demo's output."""
    probe.load(gguf_files["Q8_0"][0])
    err = capfd.readouterr().err
    assert "GGUF tensors" not in err and "it/s" not in err


def test_q8_gguf_is_dequantised_to_the_dtype_asked(gguf_files):
    """Quantised matrices: probe measures the dequantised weights, equal to gguf's own
    dequantisation of the quantised source weight, in the dtype asked for."""
    from gguf import GGMLQuantizationType, quants

    path, source = gguf_files["Q8_0"]
    for dtype, torch_dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        lm = probe.load(path, dtype=dtype)
        got = lm.model.model.layers[1].mlp.up_proj.weight
        w = source.model.layers[1].mlp.up_proj.weight.detach().float().numpy()
        expected = torch.from_numpy(quants.dequantize(quants.quantize(w, GGMLQuantizationType.Q8_0),
                                                      GGMLQuantizationType.Q8_0)).to(torch_dtype)
        assert got.dtype == torch_dtype and torch.equal(got, expected)
        assert not torch.equal(got.float(), torch.from_numpy(w))       # it really was quantised
        assert lm.weights["quantization"] == "Q8_0" and lm.weights["dequantized_to"] == dtype


def test_analyze_a_gguf_file_and_a_folder_holding_one(gguf_files, text_file, tmp_path, monkeypatch, capsys):
    path, _ = gguf_files["Q8_0"]
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", str(path), "--data", str(text_file), "--seq-len", "32", "--quiet"]) == 0
    meta = json.loads((tmp_path / "runs" / "tiny-q8_0" / "meta.json").read_text())   # runs/<stem>
    assert meta["name"] == "tiny-q8_0" and meta["family"] == "llama"
    assert meta["weights"]["file"] == "tiny-q8_0.gguf" and meta["weights"]["quantization"] == "Q8_0"
    assert meta["weights"]["dequantized"] is True and meta["weights"]["dequantized_to"] == "float32"
    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copy(path, folder / "model.gguf")
    assert main(["analyze", str(folder), "--data", str(text_file), "--seq-len", "32", "--quiet",
                 "--out", str(tmp_path / "from-folder")]) == 0
    again = json.loads((tmp_path / "from-folder" / "summary.json").read_text())
    first = json.loads((tmp_path / "runs" / "tiny-q8_0" / "summary.json").read_text())
    assert again["f_attn"] == first["f_attn"] and again["m_act"] == first["m_act"]


def test_unusable_gguf_files_get_one_line(gguf_files, tmp_path, capsys):
    path, _ = gguf_files["F32"]
    data = path.read_bytes()
    for name, content in (("truncated.gguf", data[: len(data) * 2 // 3]), ("header-only.gguf", data[:200]),
                          ("garbage.gguf", b"not a gguf file at all\n" * 10)):
        bad = tmp_path / name
        bad.write_bytes(content)
        err = _error(capsys, ["analyze", str(bad), "--out", str(tmp_path / f"o-{name}")])
        assert "not a readable GGUF file" in err and "download it again" in err, err
    foreign = tiny.make_gguf(tmp_path / "foreign.gguf", architecture="nosucharch")[0]
    err = _error(capsys, ["analyze", str(foreign), "--out", str(tmp_path / "o-foreign")])
    assert "'nosucharch'" in err and "transformers cannot read" in err
    two = tmp_path / "two"
    two.mkdir()
    shutil.copy(path, two / "a.gguf")
    shutil.copy(path, two / "b.gguf")
    assert "holds 2 .gguf files" in _error(capsys, ["analyze", str(two), "--out", str(tmp_path / "o-two")])
    assert not any(tmp_path.glob("o-*"))                     # nothing written for any of them


def test_missing_gguf_package_says_what_to_install(gguf_files, tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    err = _error(capsys, ["analyze", str(gguf_files["F32"][0]), "--out", str(tmp_path / "o")])
    assert "needs the gguf package" in err and "pip install 'gated-probe[gguf]'" in err
