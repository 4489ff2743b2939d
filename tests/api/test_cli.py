"""`probe analyze` end to end into a temporary directory, and its one-line errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from probe.api.cli import main
from tests.api.cli_errors import _error

ROOT = Path(__file__).resolve().parents[2]


def test_analyze_writes_a_run_directory(checkpoint, text_file, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["analyze", str(checkpoint("official_headwise")), "--data", str(text_file),
                 "--seq-len", "32", "--out", str(out), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "f_attn" in printed and "m_act" in printed and f"wrote {out}" in printed
    for name in ("meta.json", "summary.json", "gates.csv", "first_token.csv", "massive.csv",
                 "massive_top.csv", "sparsity.csv", "gate_hist.csv"):
        assert (out / name).exists(), name
    meta = json.loads((out / "meta.json").read_text())
    assert meta["gate_layout"] == "grouped_headwise" and meta["seq_len"] == 32
    assert meta["command"].startswith("probe analyze")


def test_analyze_without_data_uses_the_builtin_corpus(checkpoint, tmp_path):
    out = tmp_path / "run"
    assert main(["analyze", str(checkpoint("qwen3")), "--out", str(out), "--seq-len", "64",
                 "--max-sequences", "2", "--quiet"]) == 0
    assert json.loads((out / "summary.json").read_text())["tokens"] == 128


def test_bad_inputs_get_one_clear_line(checkpoint, text_file, tmp_path, capsys):
    assert "does not exist" in _error(capsys, ["analyze", str(tmp_path / "nope"), "--out", str(tmp_path / "o1")])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "no tokens" in _error(capsys, ["analyze", str(checkpoint("qwen3")), "--data", str(empty),
                                          "--out", str(tmp_path / "o2"), "--quiet"])
    existing = tmp_path / "exists"
    existing.mkdir()
    assert "--force" in _error(capsys, ["analyze", str(checkpoint("qwen3")), "--data", str(text_file),
                                        "--out", str(existing), "--quiet"])
    assert not (tmp_path / "o2").exists()


def test_console_script_runs_as_a_module(checkpoint, text_file, tmp_path):
    """`python -m probe` is the same entry point as the `probe` console script."""
    out = subprocess.run([sys.executable, "-m", "probe", "analyze", str(tmp_path / "missing")],
                         capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [out.stderr.strip()]


def test_compare_prints_the_claims_table(checkpoint, text_file, tmp_path, capsys):
    from probe import reports

    out = tmp_path / "cmp"
    assert main(["compare", str(checkpoint("qwen3")), str(checkpoint("official_headwise")),
                 "--data", str(text_file), "--seq-len", "32", "--out", str(out),
                 "--format", "", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "Claims of the paper" in printed
    assert printed.index("f_attn") < printed.index("Claims of the paper")  # after the summary
    saved = reports.claims_table(out)  # the same verdicts from the saved run directories
    for row in saved.to_dict("records"):
        assert f"[{row['claim']}] {row['statement']} ({row['models']}): {row['verdict']}" \
            in printed
        if not row["verdict"].startswith("not comparable"):       # a pair not judged has no rule
            assert f"rule:       {row['rule']}" in printed


def test_report_prints_the_claims_table_of_its_runs(checkpoint, text_file, tmp_path, capsys):
    from probe import reports

    runs = []
    for kind in ("qwen3", "official_elementwise"):
        runs.append(tmp_path / kind)
        assert main(["analyze", str(checkpoint(kind)), "--data", str(text_file), "--seq-len", "32",
                     "--out", str(runs[-1]), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["report", *map(str, runs), "--out", str(tmp_path / "rep"), "--format", "html"]) == 0
    printed = capsys.readouterr().out
    for row in reports.claims_table(runs).to_dict("records"):
        assert f"[{row['claim']}] {row['statement']} ({row['models']}): {row['verdict']}" in printed


def test_summary_prints_a_missing_gate_as_a_dash_and_large_values_whole(capsys):
    from probe.api.cli import print_summary
    from probe.results.analysis import Analysis

    base = {"model": "base", "mean_gate": None, "f_attn": 0.36, "m_act": 14461.2, "tokens": 1024}
    gated = {**base, "model": "gated", "mean_gate": 0.25, "m_act": 98.5}
    print_summary([Analysis({}, base), Analysis({}, gated)])
    lines = capsys.readouterr().out.splitlines()
    base_row = next(line.split() for line in lines if line.startswith("base"))
    assert base_row[1] == "-" and "14,461" in base_row and "None" not in lines[1]
    assert next(line for line in lines if line.startswith("gated")).split()[1] == "0.25"


def test_compare_on_token_ids_names_the_bos_as_the_difference(checkpoint, tmp_path, capsys):
    """Token ids as data, and --bos auto prepending a BOS for one tokenizer only: the warning
    says that, and --bos none, not 'pass token ids' (given already)."""
    import numpy as np

    ids = tmp_path / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(5, 200, size=(2, 24)))
    assert main(["compare", str(checkpoint("llama")), str(checkpoint("qwen3")), "--data", str(ids),
                 "--out", str(tmp_path / "cmp"), "--format", "", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert ("did not see the same token ids: a BOS token was prepended for llama and not for qwen3 "
            "(--bos auto follows each tokenizer)") in err and "pass --bos none" in err
    assert "pass token ids" not in err


def test_compare_says_when_the_models_saw_different_tokens(checkpoint, text_file, tmp_path, capsys):
    """Different tokenizers turn the same text into different token ids: compare says so (and
    the report's summary carries a note); the same tokenizer family says nothing."""
    from probe import reports
    from probe.reports.sections import notes

    out = tmp_path / "cmp"
    assert main(["compare", str(checkpoint("qwen3")), str(checkpoint("gpt2")), "--data", str(text_file),
                 "--seq-len", "32", "--out", str(out), "--format", "", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "did not see the same token ids" in err
    runs = reports.load_runs(out)
    assert notes.token_stream_notes(runs) and "did not see the same token ids" in notes.token_stream_notes(runs)[0]

    same = tmp_path / "same"
    assert main(["compare", str(checkpoint("qwen3")), str(checkpoint("official_headwise")), "--data",
                 str(text_file), "--seq-len", "32", "--out", str(same), "--format", "", "--quiet"]) == 0
    assert "token ids" not in capsys.readouterr().err
    assert notes.token_stream_notes(reports.load_runs(same)) == []


@pytest.mark.parametrize("kind,shows", [("official_headwise", "headwise gate in q_proj"),
                                        ("qwen3_next", "elementwise gate in q_proj"), ("qwen3", None)])
def test_gate_none_on_a_gated_checkpoint_warns(kind, shows, checkpoint, text_file, tmp_path):
    """--gate none where the layout shows a gate: a warning (its gate goes unmeasured); none on
    a baseline. Both through analyze and check."""
    import warnings

    path = checkpoint(kind)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["analyze", str(path), "--data", str(text_file), "--seq-len", "16", "--max-sequences", "1",
                     "--out", str(tmp_path / "run"), "--quiet", "--gate", "none"]) == 0
        assert main(["check", str(path), "--gate", "none"]) == 0
    said = [str(w.message) for w in seen if "--gate none" in str(w.message)]
    if shows is None:
        assert not said
    else:
        assert len(said) == 2 and all("but this checkpoint shows a gate" in m and shows in m for m in said)


def test_version_and_help_answer_without_importing_torch():
    """`probe --version` / `probe --help` print at once: torch is imported only by a command."""
    code = ("import sys\nfrom probe.api.cli import main\n"
            "for argv in (['--version'], ['--help'], ['analyze', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit as e:\n        assert e.code == 0, (argv, e.code)\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    import probe

    assert done.stdout.startswith(f"probe {probe.__version__}\n") and "usage: probe" in done.stdout


@pytest.mark.parametrize("argv", [["analyze", "{missing}"], ["check", "{missing}"],
                                  ["compare", "{ckpt}", "{missing}", "--out", "{out}"]])
def test_a_missing_checkpoint_is_answered_before_torch_imports(argv, tmp_path):
    """A mistyped checkpoint path is one line within a fraction of a second, not after the
    seconds that torch and transformers take to import; the loader says the same later."""
    argv = [a.format(missing=tmp_path / "missing", ckpt=tmp_path, out=tmp_path / "out") for a in argv]
    code = ("import sys\nfrom probe.api.cli import main\n"
            f"assert main({argv!r}) == 2\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == (f"probe: error: checkpoint {tmp_path / 'missing'} does not exist; pass a "
                                   "local checkpoint directory (config.json + *.safetensors) or a .gguf file")
    assert not (tmp_path / "out").exists()


def test_analyze_takes_format_like_compare_and_report():
    from probe.api.cli import build_parser

    args = build_parser().parse_args(["analyze", "ckpt", "--format", "html"])
    assert args.report == "html"


def test_compare_names_the_models(checkpoint, text_file, tmp_path, capsys):
    out = tmp_path / "cmp"
    base = ["compare", str(checkpoint("qwen3")), str(checkpoint("official_headwise")), "--data", str(text_file),
            "--seq-len", "16", "--max-sequences", "1", "--quiet", "--format", ""]
    assert main(base + ["--out", str(out), "--name", "base", "gated"]) == 0
    assert (out / "base" / "summary.json").exists() and (out / "gated" / "summary.json").exists()
    assert json.loads((out / "gated" / "summary.json").read_text())["model"] == "gated"
    assert main(base + ["--out", str(tmp_path / "x"), "--name", "only-one"]) == 2
    assert "gives 1 names for 2 checkpoints" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_resume_on_a_finished_run_says_it_is_finished(checkpoint, text_file, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["analyze", str(checkpoint("qwen3")), "--data", str(text_file), "--seq-len", "16",
            "--max-sequences", "1", "--quiet", "--out", str(out)]
    assert main(args) == 0
    before = (out / "summary.json").read_text()
    capsys.readouterr()
    assert main(args + ["--resume"]) == 0
    assert "is a finished run; there is nothing to resume" in capsys.readouterr().err
    assert (out / "summary.json").read_text() == before


def test_resume_with_nothing_saved_says_it_starts_over(checkpoint, text_file, tmp_path, capsys):
    out = tmp_path / "never-run"
    assert main(["analyze", str(checkpoint("qwen3")), "--data", str(text_file), "--seq-len", "16",
                 "--max-sequences", "1", "--quiet", "--out", str(out), "--resume"]) == 0
    assert f"no saved state in {out}.partial/; --resume starts from the beginning" in capsys.readouterr().err
    assert (out / "summary.json").exists()


def test_main_leaves_no_process_wide_setting_behind(checkpoint, text_file, tmp_path, capsys, monkeypatch):
    """The warning format, the warning filters, transformers' verbosity and its environment
    variable are probe's only while a command runs (main may run in a notebook or a test)."""
    import warnings

    from transformers.utils import logging as hf_logging

    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    hf_logging.set_verbosity_warning()
    # Built first: building it imports libraries that add warning filters of their own.
    path = checkpoint("official_headwise")
    before = (warnings.formatwarning, list(warnings.filters), hf_logging.get_verbosity())
    assert main(["analyze", str(path), "--data", str(text_file),
                 "--seq-len", "16", "--max-sequences", "1", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert main(["analyze", str(tmp_path / "missing")]) == 2
    capsys.readouterr()
    assert (warnings.formatwarning, list(warnings.filters), hf_logging.get_verbosity()) == before
    assert "TRANSFORMERS_VERBOSITY" not in os.environ


ANATOMY_TABLES = ("received_by_position", "received_by_token", "secondary_sinks", "value_drains", "gate_sink")


def test_anatomy_is_off_by_default_and_on_with_the_flag(checkpoint, text_file, tmp_path, capsys):
    """--anatomy writes the sink-anatomy tables (gate_sink for the gated model only) and records
    itself in meta.json; without it none of them is written and meta.json does not mention it.
    probe compare --anatomy passes it to every arm."""
    common = ["--data", str(text_file), "--seq-len", "32", "--max-sequences", "2", "--quiet"]
    assert main(["analyze", str(checkpoint("official_headwise")), "--out", str(tmp_path / "off"), *common]) == 0
    assert not any((tmp_path / "off" / f"{t}.csv").exists() for t in ANATOMY_TABLES)
    assert "anatomy" not in json.loads((tmp_path / "off" / "meta.json").read_text())
    out = tmp_path / "compare"
    assert main(["compare", str(checkpoint("qwen3")), str(checkpoint("official_headwise")), "--out", str(out),
                 "--format", "", "--anatomy", *common]) == 0
    for arm, gated in (("qwen3", False), ("official_headwise", True)):
        run = out / arm
        meta = json.loads((run / "meta.json").read_text())
        assert meta["anatomy"] is True and meta["anatomy_min_queries"] == 16, arm
        assert "--anatomy" in meta["command"]
        # secondary_sinks.csv only when a cell away from position 0 exceeds epsilon (an empty
        # table is not written, as any other): not in these random tiny models.
        for table in ("received_by_position", "received_by_token", "value_drains"):
            assert (run / f"{table}.csv").exists(), (arm, table)
        assert (run / "gate_sink.csv").exists() == gated, arm
        assert meta["tables"].keys() >= {"received_by_position", "received_by_token", "value_drains"}
        summary = json.loads((run / "summary.json").read_text())["anatomy"]
        assert summary["secondary_sinks"] == meta["tables"].get("secondary_sinks", 0) == 0


def test_compare_says_when_one_checkpoint_is_given_twice(checkpoint, text_file, tmp_path, capsys):
    path = checkpoint("qwen3")
    assert main(["compare", str(path), str(path.parent / ".." / path.parent.name / path.name),
                 "--data", str(text_file), "--seq-len", "16", "--out", str(tmp_path / "cmp"),
                 "--format", "", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"probe: warning: {path} is given 2 times; each is analysed on the same data" in err


def test_a_seed_torch_cannot_take_is_one_line(checkpoint, text_file, tmp_path, capsys):
    """Issue 37: --seed 2**70 on analyze and check is refused in one line, before any work."""
    ckpt = str(checkpoint("qwen3"))
    capsys.readouterr()
    for args in (["analyze", ckpt, "--data", str(text_file), "--out", str(tmp_path / "o"), "--quiet"],
                 ["check", ckpt]):
        assert "--seed" in _error(capsys, args + ["--seed", str(2 ** 70)])
    assert not (tmp_path / "o").exists()
