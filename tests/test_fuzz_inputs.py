"""Bad inputs of every kind, through `probe.api.cli.main`: each gets exit 2, exactly one line
`probe: error: ...` (nothing else on stderr: no traceback, no usage block, no transformers
log lines) that names what is wrong, and leaves nothing in --out or OUT.partial/. Odd but
valid inputs exit 0 with statistics over exactly the tokens the run reports.

The table is the contract: one row per kind of mistake (options, data files, checkpoints,
each command), with the words the message must contain.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from tests import tiny
from probe.api.cli import main

ROOT = Path(__file__).resolve().parents[1]


def assert_one_error_line(capsys, argv, *, says: str | tuple = ()) -> str:
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err and "usage:" not in err, err
    assert len(lines) == 1 and lines[0].startswith("probe: error: "), err
    for word in (says,) if isinstance(says, str) else says:
        assert word in lines[0], lines[0]
    return lines[0]


def assert_nothing_left(tmp_path: Path, inputs: set[str]) -> None:
    """Only the files the case made: no run directory, no OUT.partial/, no hidden temp folder."""
    left = sorted(p.name for p in tmp_path.iterdir() if p.name not in inputs)
    assert left == [], left


# ------------------------------------------------------------------------------ data files

def _npy(arr, **kw):
    def write(path):
        np.save(path, arr, **kw)
    return write


def _bytes(raw: bytes):
    return lambda path: path.write_bytes(raw)


def _text(raw: str):
    return lambda path: path.write_text(raw, encoding="utf-8")


def _pt(obj):
    return lambda path: torch.save(obj, path)


def _int8_wrapped(path):
    np.save(path, np.array([[3, 100, 200, 7]]).astype(np.int8))     # 200 wraps to -56


DATA = {  # case: (file name, writer, words the message must hold)
    "negative_ids": ("ids.npy", _npy(np.array([[3, -1, 4, 5]])), ("negative token id -1", "(0, 1)")),
    "nan_ids": ("ids.npy", _npy(np.array([1.0, np.nan, 3.0])), ("float64", "integers")),
    "float_ids": ("ids.npy", _npy(np.array([1.7, 2.0, 3.0])), ("float64", "integers")),
    "bool_ids": ("ids.npy", _npy(np.array([True, False, True])), "booleans"),
    "int8_wrapped_ids": ("ids.npy", _int8_wrapped, ("negative token id -56", "int8")),
    "zero_d_npy": ("ids.npy", _npy(np.array(5)), "0-D"),
    "three_d_npy": ("ids.npy", _npy(np.zeros((2, 2, 2), dtype=np.int64)), "3-D"),
    "object_npy": ("ids.npy", _npy(np.array([[1, 2], [3]], dtype=object), allow_pickle=True), "Python objects"),
    "corrupt_npy": ("ids.npy", _bytes(b"\x93NUMPY garbage" + os.urandom(64)), "not a readable .npy"),
    "pt_dict": ("ids.pt", _pt({"input_ids": torch.arange(8)}), ("holds a dict", "input_ids", "torch.save(ids")),
    "pt_garbage": ("ids.pt", _bytes(os.urandom(200)), "not a readable .pt"),
    "pt_float": ("ids.pt", _pt(torch.rand(8)), ("float32", "integers")),
    "jsonl_string_ids": ("d.jsonl", _text('{"input_ids": [1, 2]}\n{"input_ids": [1, "a"]}\n'),
                         ("line 2", "'a' at position 1")),
    "jsonl_nested_ids": ("d.jsonl", _text('{"input_ids": [[1, 2], [3]]}\n'), ("line 1", "position 0")),
    "jsonl_float_ids": ("d.jsonl", _text('{"input_ids": [1.7, 2]}\n'), "1.7 at position 0"),
    "jsonl_huge_id": ("d.jsonl", _text('[1, 100000000000000000000000]\n'), "token ids are 0 or more"),
    "json_scalar": ("d.json", _text("5"), "JSON int"),
    "jsonl_scalar_record": ("d.jsonl", _text('{"text": "a"}\n7\n'), "line 2 of"),
    "json_bool_in_ids": ("d.json", _text("[1, true]"), "True at position 1; token ids are integers"),
    "jsonl_not_utf8": ("d.jsonl", _bytes(b'{"text": "caf\xe9"}\n'), ("not UTF-8", "byte 13")),
    "jsonl_text_null": ("d.jsonl", _text('{"text": "fine"}\n{"text": null}\n'), ("'text' of line 2", "None")),
    "jsonl_text_list": ("d.jsonl", _text('{"text": ["a", "b"]}\n'), "a list, not a string"),
    "jsonl_bad_line_2": ("d.jsonl", _text('{"text": "a"}\n{"text": \n{"text": "c"}\n'),
                         "line 2 of"),
    "jsonl_no_field": ("d.jsonl", _text('{"body": "a"}\n'), ("no 'text'", "--text-field")),
    "text_not_utf8": ("d.txt", _bytes(b"\xff\xfe\x00bad"), "not UTF-8"),
    "empty_rows": ("d.json", _text("[[], []]"), "no tokens"),
    # issue 24: nesting 200,000 deep was a RecursionError traceback
    "json_nested_200000_deep": ("d.json", _text("[" * 200_000 + "]" * 200_000), ("levels deep", "flatten it")),
    "jsonl_text_nested_200000_deep": ("d.jsonl", _text('{"text": ' + "[" * 200_000 + "]" * 200_000 + "}\n"),
                                      ("line 1 of", "levels deep")),
}


def analyze_argv(ckpt, out, *extra):
    return ["analyze", str(ckpt), "--out", str(out), "--quiet", "--seq-len", "16", "--max-sequences", "2", *extra]


@pytest.mark.parametrize("case", sorted(DATA))
def test_bad_data_file(case, checkpoint, tmp_path, capsys):
    name, write, says = DATA[case]
    write(tmp_path / name)
    assert_one_error_line(capsys, analyze_argv(checkpoint("qwen3"), tmp_path / "run", "--data", str(tmp_path / name)),
                          says=says)
    assert_nothing_left(tmp_path, {name})


@pytest.mark.parametrize("name", ["d.txt", "d.jsonl", "ids.npy", "ids.pt"])
def test_unreadable_data_file(name, checkpoint, tmp_path, capsys, monkeypatch):
    """(Tests may run as root, where permissions cannot make a file unreadable: opening it fails
    instead.)"""
    data = tmp_path / name
    data.write_text("some text")
    real = Path.open

    def denied(self, *a, **k):
        if self == data:
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "open", denied)
    assert_one_error_line(capsys, analyze_argv(checkpoint("qwen3"), tmp_path / "run", "--data", str(data)),
                          says=("cannot read data", "Permission denied"))
    assert_nothing_left(tmp_path, {name})


@pytest.mark.parametrize("length", [3, 40])
def test_token_id_outside_the_vocabulary(length, checkpoint, tmp_path, capsys):
    """One line, also for a row longer than --seq-len 16, whose truncation warning printed first."""
    import warnings

    np.save(tmp_path / "ids.npy", np.array([[999] + [1, 2] * (length // 2)]))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert_one_error_line(capsys, analyze_argv(checkpoint("qwen3"), tmp_path / "run", "--data",
                                                   str(tmp_path / "ids.npy")), says="outside the model's vocabulary")
    assert [str(w.message) for w in said] == []              # no remark on data that is refused
    assert_nothing_left(tmp_path, {"ids.npy"})


# --------------------------------------------------------------------------------- options

def _groups(text):
    def make(tmp):
        (tmp / "groups.json").write_text(text)
        return ["--token-groups", str(tmp / "groups.json")]
    return make


def _empty_dir(tmp):
    (tmp / "tok").mkdir()
    return ["--tokenizer", str(tmp / "tok")]


OPTIONS = {  # case: (extra argv, or a function of tmp_path making it; words the message must hold)
    "batch_size_negative": (["--batch-size", "-2"], "--batch-size must be an integer of at least 1"),
    "batch_size_zero": (["--batch-size", "0"], "--batch-size"),
    "max_sequences_negative": (["--max-sequences", "-2"], "--max-sequences"),
    "max_sequences_zero": (["--max-sequences", "0"], ("--max-sequences", "leave it out")),
    "seq_len_one": (["--seq-len", "1"], "--seq-len must be an integer of at least 2"),
    "seq_len_empty_in_list": (["--seq-len", "64,,128"], "an empty length in the list"),
    "max_length_one": (["--max-length", "1"], "--max-length"),
    "stride_zero": (["--stride", "0"], "--stride"),
    "save_every_negative": (["--save-every", "-1"], "--save-every must be 0 or more"),
    "save_every_nan": (["--save-every", "nan"], "--save-every"),
    "interventions_typo": (["--interventions", "mean_gates"], ("unknown intervention mean_gates", "mean_gate")),
    "token_groups_not_object": (_groups("[1, 2]"), "JSON object"),
    "token_groups_not_json": (_groups("{oops"), "not valid JSON"),
    "token_groups_bad_member": (_groups('{"g": [1.5]}'), "token group 'g'"),
    "token_groups_missing": (["--token-groups", "/nonexistent/groups.json"], "does not exist"),
    "gate_unreadable": (["--gate", "q_proj:plain"], "cannot read gate spec"),
    "text_field_empty": (["--text-field", ""], "--text-field"),
    "tokenizer_missing": (["--tokenizer", "/nonexistent/tok"], ("--tokenizer /nonexistent/tok", "does not exist")),
    "tokenizer_empty_dir": (_empty_dir, ("holds no tokenizer files", "tokenizer.json")),
    "argparse_bad_int": (["--batch-size", "two"], ("invalid int value: 'two'", "probe analyze --help")),
    "argparse_unknown_option": (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    "argparse_bad_choice": (["--on-long", "sideways"], "invalid choice: 'sideways'"),
    "report_format": (["--report", "docx"], "unknown report format docx"),
    "token_groups_nested_200000_deep": (_groups('{"g": ' + "[" * 200_000 + "]" * 200_000 + "}"), "levels deep"),
}


@pytest.mark.parametrize("case", sorted(OPTIONS))
def test_bad_option(case, checkpoint, text_file, tmp_path, capsys):
    extra, says = OPTIONS[case]
    inputs = set(p.name for p in tmp_path.iterdir())
    extra = extra(tmp_path) if callable(extra) else extra
    inputs |= set(p.name for p in tmp_path.iterdir())
    assert_one_error_line(capsys, analyze_argv(checkpoint("qwen3"), tmp_path / "run", "--data", str(text_file),
                                               *extra), says=says)
    assert_nothing_left(tmp_path, inputs)


def test_a_mistake_found_late_used_to_leave_a_partial_folder(checkpoint, text_file, tmp_path, capsys):
    """A wrong --interventions name was noticed after the whole pass, leaving RUN.partial/ that
    then blocked the corrected command. Now nothing is left and the corrected command runs."""
    args = analyze_argv(checkpoint("official_headwise"), tmp_path / "run", "--data", str(text_file))
    assert_one_error_line(capsys, args + ["--interventions", "gate_on"], says="unknown intervention")
    assert_nothing_left(tmp_path, set())
    assert main(args + ["--interventions", "gate_one"]) == 0


@pytest.mark.parametrize("command, extra, says", [
    ("compare", ["--batch-size", "0"], "--batch-size"),
    ("compare", ["--max-sequences", "-1"], "--max-sequences"),
    ("check", ["--batch-size", "0"], "--batch-size"),
    ("check", ["--seq-len", "1"], "--seq-len"),
    ("check", ["--batch-size", "x"], "invalid int value"),
])
def test_bad_option_in_compare_and_check(command, extra, says, checkpoint, text_file, tmp_path, capsys):
    ckpt = str(checkpoint("qwen3"))
    argv = ([command, ckpt, ckpt, "--out", str(tmp_path / "cmp"), "--data", str(text_file), "--quiet"]
            if command == "compare" else [command, ckpt])
    assert_one_error_line(capsys, argv + extra, says=says)
    assert_nothing_left(tmp_path, set())


TRAIN = {  # case: (extra argv, words)
    "lr_inf": (["--lr", "inf"], "--lr must be a finite number above 0"),
    "lr_nan": (["--lr", "nan"], "--lr"),
    "grad_clip_zero": (["--grad-clip", "0"], ("--grad-clip must be above 0", "inf for no clipping")),
    "kv_heads_zero": (["--kv-heads", "0"], "--kv-heads must be at least 1"),
    "heads_zero": (["--heads", "0"], "--heads must be at least 1"),
    "warmup_negative": (["--warmup", "-5"], "--warmup must be 0 or more"),
    "eval_rows_zero": (["--eval-rows", "0"], "--eval-rows must be at least 1"),
    "eval_every_zero": (["--eval-every", "0"], "--eval-every"),
    "save_every_zero": (["--save-every", "0"], "--save-every"),
    "tokens_unreadable": (["--tokens", "lots"], "is not a token count"),
    # --steps derives the token count from --seq-len: the option at fault is --seq-len
    "steps_with_seq_len_zero": (["--steps", "2", "--seq-len", "0"], "--seq-len must be positive"),
}


@pytest.mark.parametrize("case", sorted(TRAIN))
def test_bad_train_option(case, text_file, tmp_path, capsys):
    extra, says = TRAIN[case]
    argv = ["train", "--arm", "none", "--data", str(text_file), "--out", str(tmp_path / "arm"),
            "--tokens", "512", "--layers", "1", "--width", "32", "--seq-len", "16", "--quiet"]
    assert_one_error_line(capsys, argv + extra, says=says)
    assert_nothing_left(tmp_path, set())


def test_diverged_training_does_not_say_done(text_file, tmp_path, capsys):
    """--lr 1e30: the first update makes every weight non-finite. Not "done": one line, and
    nothing in --out for the corrected command to trip over."""
    argv = ["train", "--arm", "none", "--data", str(text_file), "--out", str(tmp_path / "arm"),
            "--tokens", "1024", "--layers", "1", "--width", "32", "--seq-len", "16", "--batch-size", "4",
            "--vocab-size", "300", "--quiet", "--lr", "1e30"]
    assert_one_error_line(capsys, argv, says=("training diverged at step", "lower --lr"))
    assert_nothing_left(tmp_path, set())


# ----------------------------------------------------------------------------- checkpoints

def _edit_config(**changes):
    def edit(ckpt: Path):
        cfg = json.loads((ckpt / "config.json").read_text())
        cfg.update(changes)
        (ckpt / "config.json").write_text(json.dumps(cfg))
    return edit


def _config_text(text):
    return lambda ckpt: (ckpt / "config.json").write_text(text)


def _int32_weight(ckpt: Path):
    state = load_file(ckpt / "model.safetensors")
    key = "model.layers.0.mlp.down_proj.weight"
    state[key] = (state[key] * 1e4).to(torch.int32)
    save_file(state, ckpt / "model.safetensors", metadata={"format": "pt"})


def _wrong_o_proj(ckpt: Path):
    state = load_file(ckpt / "model.safetensors")
    state["model.layers.1.self_attn.o_proj.weight"] = torch.zeros(64, 32)
    save_file(state, ckpt / "model.safetensors", metadata={"format": "pt"})


CHECKPOINTS = {  # case: (kind, damage, words)
    "config_is_a_list": ("qwen3", _config_text("[1, 2]"), ("config.json holds a JSON list", "not an object")),
    "config_is_a_number": ("qwen3", _config_text("5"), "JSON int"),
    "int32_weights": ("qwen3", _int32_weight, ("model.layers.0.mlp.down_proj.weight as I32", "not floating point")),
    "vocab_smaller_than_embedding": ("qwen3", _edit_config(vocab_size=200),
                                     ("with shape [256, 64]", "implies [200, 64]")),
    "heads_do_not_fit": ("qwen3", _edit_config(num_attention_heads=5),     # 5 heads x 16 dims
                         ("self_attn.o_proj.weight with shape [64, 64]", "implies [64, 80]")),
    "wrong_o_proj": ("qwen3", _wrong_o_proj, ("layers.1.self_attn.o_proj.weight with shape [64, 32]", "[64, 64]")),
    "layers_beyond_the_weights": ("qwen3", _edit_config(num_hidden_layers=100_000),       # was 108 s
                                  ("says num_hidden_layers 100000", "the weights hold 4 layers")),
    "gate_flag_does_not_fit_q_proj": ("official_headwise",
                                      _edit_config(headwise_attn_output_gate=False, elementwise_attn_output_gate=True),
                                      ("q_proj.weight with shape", "config.json implies")),
}


@pytest.mark.parametrize("case", sorted(CHECKPOINTS))
def test_bad_checkpoint(case, checkpoint, text_file, tmp_path, capsys):
    kind, damage, says = CHECKPOINTS[case]
    ckpt = shutil.copytree(checkpoint(kind), tmp_path / "ckpt")
    damage(ckpt)
    assert_one_error_line(capsys, analyze_argv(ckpt, tmp_path / "run", "--data", str(text_file)), says=says)
    assert_nothing_left(tmp_path, {"ckpt"})


@pytest.mark.parametrize("what", ["config.json", "model.safetensors"])
def test_unreadable_checkpoint_file(what, checkpoint, text_file, tmp_path, capsys, monkeypatch):
    ckpt = shutil.copytree(checkpoint("qwen3"), tmp_path / "ckpt")
    target = ckpt / what
    real_open = Path.open

    def denied(self, *a, **k):
        if self == target:
            raise PermissionError(13, "Permission denied")
        return real_open(self, *a, **k)

    monkeypatch.setattr(Path, "open", denied)     # read_text goes through Path.open too
    line = assert_one_error_line(capsys, analyze_argv(ckpt, tmp_path / "run", "--data", str(text_file)),
                                 says=(f"cannot read {target}", "Permission denied"))
    assert "corrupt" not in line and "re-download" not in line


# ------------------------------------------------- valid but odd: statistics match the count

def _massive_count(run: Path, layer: int = 0) -> int:
    m = pd.read_csv(run / "massive.csv")
    return int(m[(m.layer == layer) & (m.site == "resid_post") & (m.metric == "count")].value.iloc[0])


@pytest.mark.parametrize("rows, seq_len, expect", [
    ((3, 20), 16, [16, 16, 16]),          # longer rows truncated (with a warning), never re-cut
    ((2, 10), 16, [10, 10]),              # shorter rows kept as given, never joined
    ((1, 5), 16, [5]),
    ((33,), 16, [16, 16]),                # a 1-D stream is cut; its lone last token is left out
])
def test_token_id_rows_are_the_sequences_and_every_statistic_counts_them(rows, seq_len, expect, checkpoint,
                                                                         tmp_path, capsys):
    ids = np.random.default_rng(0).integers(3, 200, size=rows)
    np.save(tmp_path / "ids.npy", ids)
    run = tmp_path / "run"
    argv = ["analyze", str(checkpoint("qwen3")), "--data", str(tmp_path / "ids.npy"), "--out", str(run),
            "--quiet", "--seq-len", str(seq_len), "--batch-size", "2"]
    if len(rows) == 2 and rows[1] > seq_len:
        with pytest.warns(UserWarning, match=f"3 of 3 documents longer than {seq_len} tokens were truncated"):
            assert main(argv) == 0
    else:
        assert main(argv) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tokens"] == sum(expect) and summary["sequences"] == len(expect)
    assert _massive_count(run) == sum(expect) * 64              # hidden 64: every token, once


# ----------------------------------------------------------------------------- subprocesses

def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_console_errors_are_one_line(checkpoint, text_file, tmp_path):
    for extra in (["--batch-size", "0"], ["--frobnicate"]):
        done = subprocess.run([sys.executable, "-m", "probe", "analyze", str(checkpoint("qwen3")), "--out",
                               str(tmp_path / "run"), "--data", str(text_file), *extra],
                              capture_output=True, text=True, env=_env(), timeout=120)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("probe: error: "), done.stderr
    assert_nothing_left(tmp_path, set())


def _wait_until_torch_loads(pid: int, timeout: float = 60.0) -> None:
    """Until torch's shared library is mapped into the process: it is importing torch."""
    maps = Path(f"/proc/{pid}/maps")
    if not maps.exists():
        pytest.skip("needs /proc to see when the child imports torch")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if "libtorch" in maps.read_text():
                return
        except OSError:
            return                                 # it has already exited: the asserts say how
        time.sleep(0.005)


@pytest.mark.parametrize("after", [0.0, 0.4, 0.8])
def test_ctrl_c_while_importing_is_one_line(after, checkpoint, text_file, tmp_path):
    """SIGINT while torch (after=0) and then transformers load: one line, exit 130, also when
    transformers' lazy import turns the interrupt into a ModuleNotFoundError."""
    proc = subprocess.Popen([sys.executable, "-m", "probe", "analyze", str(checkpoint("qwen3")), "--out",
                             str(tmp_path / "run"), "--data", str(text_file), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            # as from a terminal, even if this test runs with SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_until_torch_loads(proc.pid)
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    # 130, or death by SIGINT (-2; a shell shows it as 130 too): Python re-raises the signal at
    # exit when an extension module saw the interrupt first.
    assert proc.returncode in (130, -signal.SIGINT) and err.strip().count("\n") == 0, err
    assert err.startswith("probe: interrupted")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------- memory bombs and endless inputs (issue 24)

@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_data_that_reads_without_end_is_refused(kind, checkpoint, tmp_path, capsys):
    """--data /dev/zero read until memory ran out; a FIFO would wait for a writer forever."""
    if kind == "device":
        data = Path("/dev/zero")
    else:
        data = tmp_path / "pipe.txt"
        os.mkfifo(data)
    says = "is a device" if kind == "device" else "is a FIFO"
    assert_one_error_line(capsys, analyze_argv(checkpoint("qwen3"), tmp_path / "run", "--data", str(data)),
                          says=(says, "read without end"))
    assert_nothing_left(tmp_path, {"pipe.txt"})


def test_a_tokenizer_that_panics_is_one_line_without_a_rust_backtrace(checkpoint, tmp_path, capfd):
    """A pre-tokenizer regex that backtracks catastrophically: the Rust library panics
    (PanicException derives from BaseException) and prints a backtrace on file descriptor 2."""
    ckpt = shutil.copytree(checkpoint("qwen3"), tmp_path / "ckpt")
    spec = json.loads((ckpt / "tokenizer.json").read_text())
    spec["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated",
                             "invert": False}
    (ckpt / "tokenizer.json").write_text(json.dumps(spec))
    (tmp_path / "a.txt").write_text("a" * 40 + "b")
    capfd.readouterr()
    code = main(analyze_argv(ckpt, tmp_path / "run", "--data", str(tmp_path / "a.txt")))
    err = capfd.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("probe: error: tokenizing the data"), err
    assert "Rust code" in err and "--tokenizer DIR" in err
    assert_nothing_left(tmp_path, {"ckpt", "a.txt"})


def test_a_gguf_claiming_100000_blocks_is_refused_before_anything_is_built(tmp_path, capsys):
    """llama.block_count 100,000 beside the tensors of 4 blocks: transformers built 100,000
    layers first (143 s and all the memory)."""
    pytest.importorskip("gguf")
    import struct
    import time

    from gguf import GGUFReader

    path, _ = tiny.make_gguf(tmp_path / "tiny.gguf", quant="F32")
    field = GGUFReader(str(path)).fields["llama.block_count"]
    raw = bytearray(path.read_bytes())
    struct.pack_into("<I", raw, int(field.offset) + 8 + len("llama.block_count") + 4, 100_000)
    bomb = tmp_path / "bomb.gguf"
    bomb.write_bytes(bytes(raw))
    start = time.monotonic()
    assert_one_error_line(capsys, ["analyze", str(bomb), "--out", str(tmp_path / "run")],
                          says=("llama.block_count 100000", "the weights hold 4 layers"))
    assert time.monotonic() - start < 30
    assert_nothing_left(tmp_path, {"tiny.gguf", "bomb.gguf"})
