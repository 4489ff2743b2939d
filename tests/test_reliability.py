"""Every bad input gets one clear line and a non-zero exit, through `probe.api.cli.main`; bad
numbers are counted, not propagated; a full disk leaves nothing half-written."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

import probe
from tests import tiny
from tests.samples import TEXT
from probe.api.cli import main
from probe.run.interventions import NO_GATE, NOTHING_ZEROED


def one_error_line(capsys, argv, *, code=2) -> str:
    capsys.readouterr()                           # drop what building test checkpoints printed
    got = main(argv)
    err = capsys.readouterr().err.strip()
    assert got == code, err
    assert err.startswith("probe: error: ") and "\n" not in err, err     # one line, nothing else
    return err


def copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def analyze_args(ckpt, out, *extra):
    return ["analyze", str(ckpt), "--out", str(out), "--quiet", "--seq-len", "16", "--max-sequences", "2", *extra]


@pytest.mark.parametrize("command", ["analyze", "check"])
def test_missing_path_and_missing_config(command, tmp_path, capsys):
    extra = ["--out", str(tmp_path / "o")] if command == "analyze" else []
    line = one_error_line(capsys, [command, str(tmp_path / "nowhere"), *extra])
    assert "does not exist" in line and "checkpoint directory" in line
    bare = tmp_path / "bare"
    bare.mkdir()
    assert "no config.json" in one_error_line(capsys, [command, str(bare), *extra])
    assert not (tmp_path / "o").exists()


def test_unsupported_architecture_says_how_to_declare(tmp_path, capsys):
    """An architecture outside the registry whose layout probe cannot read as ungated (Falcon
    does not use transformers' attention interface) is refused with how to declare it."""
    from transformers import FalconConfig, FalconForCausalLM

    odd = tmp_path / "odd"
    FalconForCausalLM(FalconConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=4)).save_pretrained(odd)
    line = one_error_line(capsys, analyze_args(odd, tmp_path / "o"))
    assert "'falcon' is not in probe's registry" in line
    assert "--gate MODULE:LAYOUT:GRANULARITY" in line and "--gate none" in line
    assert "--gate" in one_error_line(capsys, ["check", str(odd)])


def test_sharded_checkpoint_loads_and_a_missing_shard_is_named(checkpoint, tmp_path, capsys):
    """Released checkpoints are sharded with an index: they load like one file, and a shard that
    did not download is named in one line instead of surfacing from inside transformers."""
    from transformers import AutoModelForCausalLM

    src = checkpoint("qwen3")
    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(src).save_pretrained(sharded, max_shard_size="100KB")
    for f in src.iterdir():
        if "token" in f.name or f.name == "vocab.json" or f.name == "merges.txt":
            shutil.copy(f, sharded / f.name)
    shards = sorted(sharded.glob("model-*.safetensors"))
    assert len(shards) > 2
    texts = [TEXT]
    a, b = (probe.analyze(str(p), texts=texts, seq_len=32, progress=False) for p in (sharded, src))
    assert a.summary["loss"] == b.summary["loss"] and a.summary["m_act"] == b.summary["m_act"]
    shards[1].unlink()
    line = one_error_line(capsys, analyze_args(sharded, tmp_path / "o"))
    assert f"missing {shards[1].name}" in line and "model.safetensors.index.json" in line


@pytest.mark.parametrize("damage", ["truncated", "corrupt_header", "garbage"])
def test_broken_safetensors(damage, checkpoint, tmp_path, capsys):
    ckpt = copy(checkpoint("qwen3"), tmp_path / damage)
    weights = ckpt / "model.safetensors"
    data = weights.read_bytes()
    if damage == "truncated":
        weights.write_bytes(data[: len(data) * 2 // 3])
    elif damage == "corrupt_header":
        weights.write_bytes(data[:8] + b"{not json" + data[17:])
    else:
        weights.write_bytes(os.urandom(256))
    line = one_error_line(capsys, analyze_args(ckpt, tmp_path / "o"))
    assert "model.safetensors is truncated or corrupt" in line and "re-download" in line


def test_compare_names_a_broken_later_checkpoint_before_analysing_the_first(checkpoint, text_file, tmp_path,
                                                                           capsys, monkeypatch):
    """compare A B with B's weights cut short: the line comes before A is analysed (it came after,
    and the analysis of A was thrown away)."""
    from probe.api import cli

    broken = copy(checkpoint("qwen3"), tmp_path / "broken")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    monkeypatch.setattr(cli, "_run_analysis", lambda *a, **k: pytest.fail("analysed before the check"))
    line = one_error_line(capsys, ["compare", str(checkpoint("llama")), str(broken), "--out", str(tmp_path / "cmp"),
                                   "--data", str(text_file)])
    assert f"{weights} is truncated or corrupt" in line and not (tmp_path / "cmp").exists()


def test_text_without_tokenizer_names_both_ways_out(checkpoint, text_file, tmp_path, capsys):
    bare = tiny.make_checkpoint("qwen3", tmp_path / "notok", tokenizer=False)
    line = one_error_line(capsys, analyze_args(bare, tmp_path / "o", "--data", str(text_file)))
    assert "no tokenizer files" in line and "--tokenizer DIR" in line and "token ids" in line
    assert not (tmp_path / "o").exists()
    # Both options it names work.
    ids = tmp_path / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(3, 200, size=(2, 16)))
    assert main(analyze_args(bare, tmp_path / "o1", "--data", str(ids))) == 0
    assert main(analyze_args(bare, tmp_path / "o2", "--data", str(text_file),
                             "--tokenizer", str(checkpoint("qwen3")))) == 0
    # In Python with texts=: the message names them as such, not by a placeholder
    with pytest.raises(probe.ProbeError,
                       match=r"^the texts given need a tokenizer, but there is none \(the checkpoint has no tokenizer"):
        probe.analyze(bare, texts=["some text"], seq_len=8, progress=False)


@pytest.mark.parametrize("kind", ["empty_text", "empty_jsonl", "empty_ids", "empty_folder"])
def test_empty_data(kind, checkpoint, tmp_path, capsys):
    if kind == "empty_text":
        data = tmp_path / "empty.txt"
        data.write_text("")
    elif kind == "empty_jsonl":
        data = tmp_path / "empty.jsonl"
        data.write_text("\n")
    elif kind == "empty_ids":
        data = tmp_path / "empty.npy"
        np.save(data, np.zeros(0, dtype=np.int64))
    else:
        data = tmp_path / "folder"
        data.mkdir()
    line = one_error_line(capsys, analyze_args(checkpoint("qwen3"), tmp_path / "o", "--data", str(data)))
    assert "no tokens" in line or "holds no" in line
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    """A qwen3 with only 32 positions."""
    return tiny.make_checkpoint("qwen3", tmp_path_factory.mktemp("short") / "short", max_position_embeddings=32)


def test_sequences_longer_than_the_model_truncate_with_a_warning(short_model, text_file, tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match=r"seq_len 64 lowered to the model's 32 positions \(pass --past-positions"):
        assert main(["analyze", str(short_model), "--data", str(text_file), "--out", str(out), "--quiet",
                     "--seq-len", "64", "--max-sequences", "2"]) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert any("lowered to the model's 32 positions" in n for n in meta["data_notes"])
    assert json.loads((out / "summary.json").read_text())["tokens"] == 64


def test_sequences_longer_than_the_model_refused_on_request(short_model, text_file, tmp_path, capsys):
    line = one_error_line(capsys, ["analyze", str(short_model), "--data", str(text_file), "--out",
                                   str(tmp_path / "o"), "--quiet", "--seq-len", "64", "--on-long", "error"])
    assert "exceeds the model's 32 positions" in line and "--on-long truncate" in line
    docs = tmp_path / "docs.json"
    docs.write_text(json.dumps([list(range(3, 40))]))
    line = one_error_line(capsys, ["analyze", str(short_model), "--data", str(docs), "--per-document",
                                   "--out", str(tmp_path / "o"), "--quiet", "--seq-len", "32", "--on-long", "error"])
    assert "a document has 37 tokens" in line


def _with_weight(src, dst, key, fill, index):
    ckpt = copy(src, dst)
    sd = load_file(ckpt / "model.safetensors")
    sd[key][index] = fill
    save_file(sd, ckpt / "model.safetensors", metadata={"format": "pt"})
    return ckpt


def test_nan_in_the_last_layer_is_counted_and_finite_statistics_kept(checkpoint, text_file, tmp_path, capsys):
    """One NaN weight in the last MLP: one NaN dimension in that layer's MLP output and
    output for every token; everything upstream, and the finite dimensions, are kept."""
    ckpt = _with_weight(checkpoint("official_headwise"), tmp_path / "nan", "model.layers.3.mlp.down_proj.weight",
                        float("nan"), (5, 0))
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="NaN/Inf activation values were seen.*finite values only"):
        assert main(analyze_args(ckpt, out, "--data", str(text_file))) == 0
    meta = json.loads((out / "meta.json").read_text())
    tokens = json.loads((out / "summary.json").read_text())["tokens"]
    bad = meta["nonfinite_activations"]
    assert bad["3:mlp_out"] == tokens and bad["3:resid_post"] == tokens     # dim 5 of every token
    assert not any(k.startswith(("0:", "1:", "2:")) or k.endswith(":gate") for k in bad)
    assert bad["loss_pairs"] > 0                                            # the final norm spreads it
    massive = pd.read_csv(out / "massive.csv")
    layer3 = massive[(massive.layer == 3) & (massive.site == "resid_post")].set_index("metric").value
    assert np.isfinite(layer3["max_abs"]) and layer3["nonfinite"] == tokens
    assert layer3["count"] == tokens * 63                                   # the other 63 dims
    gates = pd.read_csv(out / "gates.csv")
    assert np.isfinite(gates[gates.metric == "mean"].value).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["loss"] is None and summary["f_attn"] is not None and summary["m_act"] is not None


def test_the_nan_warning_names_the_first_site_of_the_forward_pass(checkpoint, text_file, tmp_path):
    """A NaN weight in layer 1's MLP reaches layer 2's gate and everything after: the warning
    names 1:mlp_out, where the forward pass first met it (not 2:gate, the first metric's entry),
    and counts the token losses apart from the activation values."""
    ckpt = _with_weight(checkpoint("official_headwise"), tmp_path / "nan", "model.layers.1.mlp.down_proj.weight",
                        float("nan"), (5, 0))
    out = tmp_path / "run"
    with pytest.warns(UserWarning) as caught:
        assert main(analyze_args(ckpt, out, "--data", str(text_file))) == 0
    [line] = [str(w.message) for w in caught if "NaN/Inf" in str(w.message)]
    bad = json.loads((out / "meta.json").read_text())["nonfinite_activations"]
    assert "2:gate" in bad and "1:mlp_out" in bad
    activations = sum(n for key, n in bad.items() if ":" in key)
    assert line == (f"{activations} NaN/Inf activation values were seen (first at layer:site 1:mlp_out); "
                    f"{bad['loss_pairs']} token losses were not finite; statistics use finite values only. "
                    "The weights are not finite (model.layers.1.mlp.down_proj.weight holds 1 NaN/inf values): "
                    "the checkpoint is damaged, and these numbers describe what is left of it; fix or "
                    "re-download it")


def test_nan_activations_from_finite_weights_do_not_blame_the_checkpoint():
    """Finite weights can still give NaN activations (a float16 overflow): the line then says
    nothing of the weights; with NaN weights it names the tensor (probe check's words)."""
    from probe.run.pipeline import nonfinite_warning

    line = nonfinite_warning({"2:mlp_out": 3})
    assert line == ("3 NaN/Inf activation values were seen (first at layer:site 2:mlp_out); statistics use "
                    "finite values only")
    damaged = nonfinite_warning({"2:mlp_out": 3}, [("a.weight", 2), ("b.weight", 1)])
    assert damaged.endswith("The weights are not finite (a.weight holds 2 NaN/inf values and 1 more tensors): "
                            "the checkpoint is damaged, and these numbers describe what is left of it; fix or "
                            "re-download it")


def test_a_model_whose_every_head_is_nan_has_no_sink_rate(checkpoint, text_file, tmp_path):
    """NaN embeddings: no head of any layer has a finite F-Attn, so the sink rate is undefined
    (null), not 0 of the NaN cells."""
    ckpt = _with_weight(checkpoint("official_headwise"), tmp_path / "nan", "model.embed_tokens.weight",
                        float("nan"), slice(None))
    out = tmp_path / "run"
    with (pytest.warns(UserWarning, match="NaN/Inf activation values were seen"),
          pytest.warns(UserWarning, match="F-Attn left out 128 queries whose attention output was not finite")):
        assert main(analyze_args(ckpt, out, "--data", str(text_file))) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["f_attn"] is None and summary["sink_rate"] is None and summary["mean_gate"] is None
    # Its report builds, and says nothing from numpy: no 0 / 0 of the gate counts, no log axis
    # of empty histograms, no nanmax of an all-NaN map (a KeyError, a ValueError, 20 warnings).
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert main(["report", str(out), "--out", str(tmp_path / "report"), "--format", "html"]) == 0


def test_inf_in_one_sequence_is_counted_and_the_other_kept(checkpoint, text_file, tmp_path):
    """An inf embedding for the first token of sequence 0: through attention, NaN reaches every
    activation of that sequence (16 tokens x 64 dims per site), none of sequence 1's."""
    first = tiny.make_tokenizer("qwen3")(text_file.read_text()[:20])["input_ids"][0]
    ckpt = _with_weight(checkpoint("qwen3"), tmp_path / "inf", "model.embed_tokens.weight",
                        float("inf"), first)
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="NaN/Inf activation values were seen"), \
            pytest.warns(UserWarning, match="F-Attn left out 64 queries whose attention output was not finite"), \
            pytest.warns(UserWarning, match="mean_gate,gate_one,gate_zero: " + re.escape(NO_GATE)), \
            pytest.warns(UserWarning, match="massive_zero: " + re.escape(NOTHING_ZEROED)):
        assert main(analyze_args(ckpt, out, "--data", str(text_file), "--interventions")) == 0
    meta = json.loads((out / "meta.json").read_text())
    bad = meta["nonfinite_activations"]
    assert all(bad[f"{l}:{s}"] == 16 * 64 for l in range(4) for s in ("attn_out", "resid_mid", "mlp_out", "resid_post"))
    assert meta["f_attn_dropped_queries"] == {str(l): 16 for l in range(4)}     # sequence 0's queries
    assert bad["loss_pairs"] == 15
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tokens"] == 32 and np.isfinite(summary["loss"]) and np.isfinite(summary["m_act"])
    assert int(pd.read_csv(out / "massive.csv").query("metric == 'count'").value.min()) == 16 * 64
    frame = pd.read_csv(out / "interventions.csv", keep_default_na=False)
    applied = frame[frame.note == ""]                    # a baseline: gate interventions are marked
    assert np.isfinite(applied.loss.astype(float)).all() and len(applied) < len(frame)


def test_existing_output_directory_needs_force(checkpoint, text_file, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    line = one_error_line(capsys, analyze_args(checkpoint("qwen3"), out, "--data", str(text_file)))
    assert "already exists and is not a folder probe wrote" in line and "--force" not in line
    # --force replaces a probe output folder, nothing else (issue 24): a folder of the user's stays.
    line = one_error_line(capsys, analyze_args(checkpoint("qwen3"), out, "--data", str(text_file), "--force"))
    assert "not a folder probe wrote" in line
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    assert main(analyze_args(checkpoint("qwen3"), out, "--data", str(text_file), "--force")) == 0
    line = one_error_line(capsys, analyze_args(checkpoint("qwen3"), out, "--data", str(text_file)))
    assert "already exists" in line and "--force" in line
    assert main(analyze_args(checkpoint("qwen3"), out, "--data", str(text_file), "--force")) == 0
    assert (out / "summary.json").exists()


@pytest.mark.parametrize("existing", [False, True])
def test_disk_full_mid_write_leaves_no_partial_run(existing, checkpoint, text_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    if existing:
        out.mkdir()
        (out / "summary.json").write_text("{}\n")
    import probe.core.atomic

    calls = {"n": 0}
    real_fsync = os.fsync

    def full_disk(fd):
        calls["n"] += 1
        if calls["n"] == 3:                       # a few tables in: the disk fills up
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(probe.core.atomic.os, "fsync", full_disk)
    args = analyze_args(checkpoint("qwen3"), out, "--data", str(text_file)) + (["--force"] if existing else [])
    line = one_error_line(capsys, args)
    assert "No space left on device" in line and "disk" in line
    assert calls["n"] == 3
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "run"]
    assert leftovers == [], leftovers                               # no .run.partial-* directory
    if existing:
        assert [p.name for p in out.iterdir()] == ["summary.json"]  # the old run is untouched
        assert (out / "summary.json").read_text() == "{}\n"
    else:
        assert not out.exists()


def test_check_command_errors_are_one_line(checkpoint, tmp_path, capsys):
    line = one_error_line(capsys, ["check", str(checkpoint("qwen3_next")), "--gate", "q_proj:sideways:elementwise"])
    assert "unknown gate layout 'sideways'" in line
    line = one_error_line(capsys, ["analyze", str(checkpoint("official_headwise")), "--out", str(tmp_path / "o"),
                                   "--gate", "q_proj:grouped:elementwise", "--quiet", "--seq-len", "16"])
    assert "does not fit q_proj" in line and "probe check" in line
    # A length past the model's positions: refused before the weights load (it ran 8x past them,
    # or for minutes at 100,000 tokens).
    positions = json.loads((checkpoint("official_headwise") / "config.json").read_text())["max_position_embeddings"]
    line = one_error_line(capsys, ["check", str(checkpoint("official_headwise")), "--seq-len", str(positions + 1)])
    assert f"--seq-len {positions + 1} exceeds the model's {positions} positions; lower --seq-len" in line


def test_a_model_object_is_measured_as_it_is(loaded):
    """dtype / device / device_map asked of a model that is already built: one line each, never
    a silent conversion or a meta.json that records a dtype the numbers were not measured in."""
    lm = loaded("qwen3")
    for option, value, says in (("dtype", "bfloat16", "holds float32 weights"),
                                ("device", "cuda", "sits on cpu"),
                                ("device_map", "auto", "places a model while loading"),
                                ("dtype", "float64", "unknown dtype")):
        with pytest.raises(probe.ProbeError, match=says):
            probe.analyze(lm.model, texts=[TEXT], tokenizer=lm.tokenizer, seq_len=32, progress=False,
                          **{option: value})
    a = probe.analyze(lm.model, texts=[TEXT], tokenizer=lm.tokenizer, seq_len=32, progress=False,
                      dtype="float32", device="cpu")
    assert a.meta["dtype"] == "float32"


def test_weights_missing_from_the_checkpoint_are_refused_and_extra_ones_named(checkpoint, tmp_path, capsys):
    """A tensor the model needs but the file lacks would be freshly initialised (random numbers
    measured as if they were the model's): one line. One it does not use: a warning."""
    ckpt = copy(checkpoint("qwen3"), tmp_path / "missing")
    weights = ckpt / "model.safetensors"
    state = load_file(weights)
    dropped = sorted(k for k in state if "k_norm" in k)[0]
    del state[dropped]
    save_file(state, weights, metadata={"format": "pt"})
    line = one_error_line(capsys, analyze_args(ckpt, tmp_path / "o"))
    assert "lacks weights the model needs" in line and dropped in line

    extra = copy(checkpoint("qwen3"), tmp_path / "extra")
    state = load_file(extra / "model.safetensors")
    state["model.layers.0.self_attn.gate_proj.weight"] = torch.zeros(4, 4)
    save_file(state, extra / "model.safetensors", metadata={"format": "pt"})
    with pytest.warns(UserWarning, match="does not use .*gate_proj"):
        probe.load(extra)


# -- issue 24: never unpickle, keep what a run wrote, odd --out names ---------------------------------

TRAIN_ARGS = ["--arm", "none", "--tokens", "512", "--layers", "1", "--width", "32", "--heads", "1",
              "--kv-heads", "1", "--seq-len", "16", "--batch-size", "4", "--vocab-size", "280",
              "--threads", "1", "--quiet", "--save-every", "2"]


class _RunsCode:
    """Unpickling this calls os.mkdir(sentinel): what a crafted trainer_state.pt could do."""

    def __init__(self, sentinel):
        self.sentinel = str(sentinel)

    def __reduce__(self):
        return (os.mkdir, (self.sentinel,))


@pytest.fixture(scope="module")
def stopped_training(text_file, tmp_path_factory):
    """A training run stopped after 2 of 8 steps (its checkpoint holds trainer_state.pt)."""
    out = tmp_path_factory.mktemp("train") / "t"
    old = os.umask(0o022)
    try:
        assert main(["train", "--data", str(text_file), "--out", str(out), *TRAIN_ARGS, "--stop-after", "2"]) == 0
    finally:
        os.umask(old)
    return out


def test_a_trainer_state_that_needs_unpickling_is_refused_and_never_run(stopped_training, text_file, tmp_path,
                                                                         capsys):
    out = shutil.copytree(stopped_training, tmp_path / "t")
    state = out / "checkpoint" / "trainer_state.pt"
    saved = torch.load(state, weights_only=True)
    sentinel = tmp_path / "the-code-ran"
    torch.save({**saved, "sessions": [_RunsCode(sentinel)]}, state)
    line = one_error_line(capsys, ["train", "--data", str(text_file), "--out", str(out), *TRAIN_ARGS, "--resume"])
    assert "holds more than tensors and plain values" in line and "never unpickles" in line, line
    assert not sentinel.exists()


def test_a_moved_training_folder_resumes_with_world_readable_weights(stopped_training, text_file, tmp_path):
    """A training folder moved elsewhere resumes (the folder's place is no setting), and the
    weights it writes get the umask's mode like every other file (safetensors made them 0600)."""
    moved = shutil.copytree(stopped_training, tmp_path / "moved")
    assert oct((moved / "checkpoint" / "model.safetensors").stat().st_mode & 0o777) == "0o644"
    old = os.umask(0o022)
    try:
        assert main(["train", "--data", str(text_file), "--out", str(moved), *TRAIN_ARGS, "--resume"]) == 0
    finally:
        os.umask(old)
    assert oct((moved / "model.safetensors").stat().st_mode & 0o777) == "0o644"
    assert json.loads((moved / "train_config.json").read_text())["result"]["steps"] == 8


def test_a_failed_report_step_keeps_the_run_directory(checkpoint, text_file, tmp_path, capsys, monkeypatch):
    """The pass ran (hours, on a big model); the report then fails on something that is not the
    disk. The run directory is kept, and the line says how to write the report from it."""
    from probe import reports

    def broken(*args, **kwargs):
        raise ValueError("a table the report cannot draw")
    monkeypatch.setattr(reports, "build_report", broken)
    out = tmp_path / "run"
    line = one_error_line(capsys, analyze_args(checkpoint("qwen3"), out, "--data", str(text_file), "--report", "html"))
    assert "a table the report cannot draw" in line and f"probe report {out} --out {out}" in line, line
    assert (out / "summary.json").exists() and not (out / "report.html").exists()
    probe.Analysis.load(out)                                   # whole and readable
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_an_unusable_figures_folder_is_refused_before_the_analysis(checkpoint, text_file, tmp_path, capsys,
                                                                     monkeypatch):
    """compare --figures under a file: one line naming --figures, before any model is analysed
    (it was found after both analyses, and the line blamed --out)."""
    from probe.api import cli

    monkeypatch.setattr(cli, "_run_analysis", lambda *a, **k: pytest.fail("analysed before the check"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = one_error_line(capsys, ["compare", str(checkpoint("qwen3")), str(checkpoint("llama")), "--out",
                                   str(tmp_path / "cmp"), "--data", str(text_file), "--figures", str(blocker / "figs")])
    assert line.startswith(f"probe: error: cannot create --figures {blocker / 'figs'}: ") and "is a file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_figures_asked_for_inside_out_are_kept(checkpoint, text_file, tmp_path, monkeypatch):
    """compare --figures OUT/figs: the figures went into OUT/figs, then the report step renamed
    the new OUT over it ("wrote OUT/figs", an empty folder). Drawing them is stubbed: what is
    tested is where they land."""
    import probe.reports.build
    from probe import reports

    def write_figures(sections, out_dir):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "figure-01-stub.pdf").write_bytes(b"%PDF stub")
        return Path(out_dir)
    monkeypatch.setattr(reports.build, "write_figures", write_figures)
    out = tmp_path / "cmp"
    ck = str(checkpoint("qwen3"))
    assert main(["compare", ck, ck, "--data", str(text_file), "--out", str(out), "--format", "html",
                 "--figures", str(out / "figs"), "--seq-len", "16", "--max-sequences", "2", "--quiet"]) == 0
    assert sorted(p.name for p in (out / "figs").iterdir()) == ["figure-01-stub.pdf"]


@pytest.mark.parametrize("out, says", [(".", "names no folder of its own"), ("..", "names no folder of its own"),
                                       ("/", "names no folder of its own"),
                                       ("x" * 240, "bytes long; probe needs 32 more")])
def test_out_that_names_no_usable_folder_is_one_line(out, says, checkpoint, text_file, tmp_path, capsys,
                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (analyze_args(checkpoint("qwen3"), out, "--data", str(text_file), "--force"),
                 ["compare", str(checkpoint("qwen3")), "--out", out, "--data", str(text_file), "--force"],
                 ["train", "--data", str(text_file), "--out", out, "--force", *TRAIN_ARGS]):
        assert says in one_error_line(capsys, argv)
    assert list(tmp_path.iterdir()) == []


def test_a_killed_report_phase_leaves_nothing_hidden_after_the_next_run(checkpoint, text_file, tmp_path):
    """SIGKILL while the run directory was being written leaves `.run.partial-<pid>-XXXX`; the
    next run on that --out removes it (its process is gone)."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f".run.partial-{dead}-abcd1234"
    stale.mkdir()
    (stale / "summary.json").write_text("{}")
    assert main(analyze_args(checkpoint("qwen3"), tmp_path / "run", "--data", str(text_file))) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


# -- the Python API: wrong types, concurrent passes, the caller's state (issue 24, items 7, 8, 10) ----

@pytest.mark.parametrize("call, says", [
    (lambda ck: probe.analyze(123, texts=[TEXT]), ("model=123 is of type int", "checkpoint directory")),
    (lambda ck: probe.analyze(str(ck), texts=[TEXT], tokenizer=5), ("tokenizer=5 is of type int", "not a tokenizer")),
])
def test_the_api_names_an_argument_of_the_wrong_type(call, says, checkpoint):
    with pytest.raises(probe.ProbeError) as caught:
        call(checkpoint("qwen3"))
    for word in says:
        assert word in str(caught.value), str(caught.value)


def test_a_second_concurrent_pass_on_one_model_is_refused_and_the_first_is_right(checkpoint, monkeypatch):
    """Two threads on one model object: the second is refused while the first runs, and the
    first gives the numbers of a pass run alone."""
    import sys
    import threading

    model = probe.load(checkpoint("qwen3"))
    alone = probe.analyze(model, texts=[TEXT], seq_len=32, progress=False)
    module = sys.modules["probe.api.analyze"]
    real, started, go = module.run_pass, threading.Event(), threading.Event()

    def held(*args, **kwargs):
        started.set()
        assert go.wait(60)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, "run_pass", held)
    results = {}
    first = threading.Thread(target=lambda: results.update(a=probe.analyze(model, texts=[TEXT], seq_len=32,
                                                                           progress=False)))
    first.start()
    assert started.wait(60)
    with pytest.raises(probe.ProbeError, match="being analysed by another call"):
        probe.analyze(model, texts=[TEXT], seq_len=32, progress=False)
    go.set()
    first.join(120)
    pd.testing.assert_frame_equal(results["a"].first_token, alone.first_token)
    pd.testing.assert_frame_equal(results["a"].massive, alone.massive)
    monkeypatch.setattr(module, "run_pass", real)
    probe.analyze(model, texts=[TEXT], seq_len=32, progress=False)        # free again afterwards


def test_analyze_leaves_the_callers_mode_rng_and_warnings_filters_as_they_were(checkpoint):
    import warnings

    loaded = probe.load(checkpoint("qwen3"))
    model = loaded.model
    model.train()
    model.model.layers[0].eval()                     # mixed modes, restored module by module
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    filters = list(warnings.filters)
    probe.analyze(model, texts=[TEXT], seq_len=32, progress=False, tokenizer=loaded.tokenizer)
    assert model.training and not model.model.layers[0].training and model.model.layers[1].training
    assert torch.equal(torch.rand(3), expected)      # the caller's random stream goes on untouched
    assert warnings.filters == filters


def test_a_nan_in_one_kv_heads_values_drops_only_that_heads_queries(checkpoint, text_file, tmp_path):
    """NaN value rows of KV head 0 in layer 1: heads 0 and 1 (its group) have no finite output
    there; heads 2 and 3 do, and their F-Attn is the clean model's (P[t, 0] does not depend on
    the values), counted over every query. Before, the whole layer was dropped."""
    ckpt = _with_weight(checkpoint("qwen3"), tmp_path / "nan", "model.layers.1.self_attn.v_proj.weight",
                        float("nan"), slice(0, 16))                           # KV head 0: rows 0..15
    args = dict(data=str(text_file), seq_len=16, max_sequences=2, progress=False)
    clean = probe.analyze(str(checkpoint("qwen3")), **args).first_token
    # Layer 1's 2 x 16 queries miss heads 0 and 1; every later layer sees NaN in every head.
    with pytest.warns(UserWarning, match=r"F-Attn left out 96 queries .*\(by layer: 1: 32, 2: 32, 3: 32\)"), \
            pytest.warns(UserWarning, match="NaN/Inf activation values were seen .*finite values only"):
        broken = probe.analyze(str(ckpt), **args).first_token

    def cells(frame, metric):
        return frame[(frame.layer == 1) & (frame.metric == metric)].set_index("head").value

    f, n, f_clean, n_clean = cells(broken, "f_attn"), cells(broken, "n_queries"), cells(clean, "f_attn"), \
        cells(clean, "n_queries")
    assert f[[0, 1]].isna().all() and (n[[0, 1]] == 0).all()
    np.testing.assert_allclose(f[[2, 3]], f_clean[[2, 3]], rtol=1e-12)        # the same tensors, summed alike
    assert (n[[2, 3]] == n_clean[[2, 3]]).all() and int(n_clean[2]) == 30
    layer0 = broken[broken.layer == 0].value.to_numpy(), clean[clean.layer == 0].value.to_numpy()
    np.testing.assert_array_equal(*layer0)
