"""reports.runs: reading run directories and in-memory analyses into one Runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from probe import reports
from probe.reports.runs import Runs
from probe.reports.labels import TABLES


def analysis_from(run_dir: Path, **overrides) -> SimpleNamespace:
    """An object shaped like probe.Analysis, built from a run directory."""
    tables = {name: pd.read_csv(run_dir / f"{name}.csv") if (run_dir / f"{name}.csv").exists()
              else pd.DataFrame() for name in TABLES}
    return SimpleNamespace(
        meta=json.loads((run_dir / "meta.json").read_text()),
        summary=json.loads((run_dir / "summary.json").read_text()),
        **{**tables, **overrides},
    )


def test_reads_every_table_with_a_model_column(all_runs, run_dirs):
    assert all_runs.models == ("baseline", "headwise", "hybrid")
    for name in TABLES:
        frame = all_runs.table(name)
        assert "model" in frame.columns, name
        assert set(frame["model"]) <= set(all_runs.models), name
    assert set(all_runs.first_token["model"]) == set(all_runs.models)
    assert all_runs.sources["hybrid"] == str(run_dirs["hybrid"])


def test_layers_depths_and_layer_types(all_runs, specs):
    for model, spec in specs.items():
        assert all_runs.layers(model) == list(range(spec.num_layers))
        assert all_runs.num_heads(model) == spec.num_heads
        assert all_runs.layers_of_type(model, "linear_attention") == list(spec.linear_layers)
    assert all_runs.gated_models == ["headwise", "hybrid"]
    assert all_runs.ungated_models == ["baseline"]


def test_optional_tables_and_gateless_baseline(all_runs):
    assert set(all_runs.training["model"]) == {"baseline", "hybrid"}
    assert set(all_runs.attention_patterns["model"]) == {"baseline", "hybrid"}
    assert all_runs.rows("gates", "baseline").empty
    assert all_runs.rows("gate_hist", "baseline").empty
    assert "mean_gate" not in set(all_runs.rows("sparsity", "baseline")["variant"])
    assert all_runs.training["spike"].dtype == bool
    assert all_runs.training["spike"].sum() == 4  # two spikes in each of two logs
    assert set(all_runs.gates_by_token_type["model"]) == {"headwise", "hybrid"}
    assert set(all_runs.interventions["model"]) == {"baseline", "hybrid"}
    assert set(all_runs.first_token_buckets["model"]) == {"baseline", "headwise"}
    assert set(all_runs.inference["model"]) == {"baseline"}


def test_new_tables_are_typed(all_runs):
    interventions = all_runs.interventions
    assert interventions["layer"].dtype == "int64"
    assert -1 in set(interventions["layer"])
    assert interventions["setting"].isna().any()  # empty cells read as NaN, not as text
    assert np.isinf(all_runs.first_token_buckets["bucket_hi"]).any()  # "inf" in the CSV
    assert "dollar $" in set(all_runs.gates_by_token_type["token_type"])


def test_columns_are_typed_and_tokens_kept_verbatim(all_runs):
    assert all_runs.first_token["layer"].dtype == "int64"
    assert all_runs.first_token["value"].dtype == float
    frame = all_runs.first_token
    linear = (frame["layer_type"] == "linear_attention") & (frame["metric"] == "f_attn")
    assert linear.any() and frame.loc[linear, "value"].isna().all()
    tokens = set(all_runs.massive_top["token"])
    assert {"NA", "\n", " $5", "<b>"} <= tokens  # "NA" would be NaN with pandas defaults


def test_a_folder_of_run_directories_reads_as_all_of_them(run_dirs):
    parent = run_dirs["baseline"].parent
    assert reports.load_runs(parent).models == ("baseline", "headwise", "hybrid")
    assert reports.load_runs(str(run_dirs["hybrid"])).models == ("hybrid",)


def test_accepts_analysis_objects_and_mixed_lists(run_dirs, all_runs):
    analysis = analysis_from(run_dirs["hybrid"])
    runs = reports.load_runs([run_dirs["baseline"], analysis])
    assert runs.models == ("baseline", "hybrid")
    assert runs.sources["hybrid"].startswith("in-memory")
    pd.testing.assert_frame_equal(
        runs.rows("gates", "hybrid").reset_index(drop=True),
        all_runs.rows("gates", "hybrid").reset_index(drop=True))
    assert reports.load_runs(analysis).layers_of_type("hybrid", "attention") == [3, 5]


def test_analysis_with_empty_frames_and_meta_name(run_dirs):
    # probe.Analysis keeps absent tables as column-less DataFrames and its name in meta.
    analysis = analysis_from(run_dirs["baseline"], gates=pd.DataFrame(),
                             attention_patterns=pd.DataFrame())
    analysis.summary.pop("model")
    analysis.meta["name"] = analysis.meta.pop("model")
    runs = reports.load_runs([analysis])
    assert runs.models == ("baseline",)
    assert list(runs.gates.columns) == list(TABLES["gates"])
    assert runs.gates.empty


def test_layer_types_fall_back_to_meta_when_summary_has_no_layers(run_dirs):
    analysis = analysis_from(run_dirs["hybrid"], first_token=pd.DataFrame())
    analysis.summary.pop("layers")
    analysis.summary.pop("attention_layers")
    analysis.meta["layer_types"] = ["linear_attention"] * 3 + ["attention", "linear_attention",
                                                               "attention"]
    runs = reports.load_runs(analysis)
    assert runs.layers_of_type("hybrid", "attention") == [3, 5]


def test_two_runs_with_one_name_stay_apart(run_dirs):
    with pytest.warns(UserWarning, match="two runs are named 'hybrid'"):
        runs = reports.load_runs([run_dirs["hybrid"], run_dirs["hybrid"]])
    assert runs.models == ("hybrid", "hybrid (2)")
    assert set(runs.gates["model"]) == {"hybrid", "hybrid (2)"}


def test_a_runs_object_passes_through(all_runs):
    assert reports.load_runs(all_runs) is all_runs
    assert isinstance(all_runs, Runs)


def test_clear_errors_for_what_is_not_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        reports.load_runs(tmp_path)
    with pytest.raises(TypeError, match="cannot read runs"):
        reports.load_runs(42)
    with pytest.raises(ValueError, match="at least one"):
        reports.load_runs([])


def test_importing_reports_loads_no_model_library():
    """reports reads the run-directory schema from probe/results/schema.py, which imports only the
    metrics' declarations: no torch (a second of `probe report`), no reducers, nothing that
    loads or hooks a model."""
    code = ("import sys, probe.reports, probe.reports.html, probe.reports.pdf; "
            "print(sorted(m for m in sys.modules if m in ('torch', 'transformers', 'transformer_lens', "
            "'probe.metrics.reducers', 'probe.load.loader', 'probe.capture.hf', 'probe.capture.attention', 'probe.api.analyze', "
            "'probe.capture.bridge') or m.startswith('probe.metrics.') and m.endswith('.reduce')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(reports.__file__).parents[1])
    assert result.stdout.strip() == "[]"


# -- a run directory that does not fit the schema is refused, naming the file -----------------------

def _damaged_copy(run_dirs, tmp_path, damage: str) -> tuple[Path, str]:
    """A copy of the headwise run with one kind of damage; returns (folder, file it names)."""
    import shutil

    run = tmp_path / "headwise"
    shutil.copytree(run_dirs["headwise"], run)
    first = run / "first_token.csv"
    text = first.read_text()
    lines = text.splitlines(keepends=True)
    if damage == "no_value_column":
        pd.read_csv(first).drop(columns="value").to_csv(first, index=False)
    elif damage == "bad_cell":
        first.write_text(text.replace(lines[3].split(",")[-1], "0.5x\n", 1))
    elif damage == "bad_layer_cell":
        first.write_text(lines[0] + lines[1].replace(",0,", ",zero,", 1) + "".join(lines[2:]))
    elif damage == "cut_mid_line":
        first.write_text(text[: len(text) // 2])
    elif damage == "cut_at_a_line_end":          # found by meta.json's list of tables
        meta = json.loads((run / "meta.json").read_text())
        meta["tables"] = {"first_token": len(lines) - 1}
        (run / "meta.json").write_text(json.dumps(meta))
        first.write_text("".join(lines[: len(lines) // 2]))
    elif damage == "deleted":
        meta = json.loads((run / "meta.json").read_text())
        meta["tables"] = {"first_token": len(lines) - 1}
        (run / "meta.json").write_text(json.dumps(meta))
        first.unlink()
    elif damage == "empty":
        first.write_text("")
    elif damage == "short_row":
        first.write_text(lines[0] + lines[1].rsplit(",", 2)[0] + "\n" + "".join(lines[2:]))
    elif damage == "invalid_summary":
        (run / "summary.json").write_text('{"model": "headwise", "f_attn": 0.')
        return run, "summary.json"
    elif damage == "list_meta":
        (run / "meta.json").write_text("[1, 2, 3]")
        return run, "meta.json"
    elif damage == "string_number_in_summary":
        summary = json.loads((run / "summary.json").read_text())
        summary["m_act"] = "big"
        (run / "summary.json").write_text(json.dumps(summary))
        return run, "summary.json"
    return run, "first_token.csv"


DAMAGES = {"no_value_column": "lacks the column value", "bad_cell": "'0.5x' is not a number",
           "bad_layer_cell": "'zero' is not an integer", "cut_mid_line": "cut short",
           "cut_at_a_line_end": "rows but meta.json lists", "deleted": "is missing",
           "empty": "is empty", "short_row": "has 4 fields, the header 6",
           "invalid_summary": "not valid JSON", "list_meta": "not an object",
           "string_number_in_summary": "m_act is 'big'"}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_run_directory_is_refused_naming_the_file(damage, run_dirs, tmp_path):
    from probe.reports.runs import RunDirectoryError

    run, file = _damaged_copy(run_dirs, tmp_path, damage)
    with pytest.raises(RunDirectoryError) as caught:
        reports.load_runs(run)
    message = str(caught.value)
    assert str(run / file) in message and DAMAGES[damage] in message, message
    assert "\n" not in message


def test_an_in_memory_table_without_a_column_is_refused(run_dirs):
    from probe.reports.runs import RunDirectoryError

    analysis = analysis_from(run_dirs["headwise"])
    analysis.first_token = analysis.first_token.drop(columns="value")
    with pytest.raises(RunDirectoryError, match="first_token table of .* lacks the column value"):
        reports.load_runs(analysis)


def test_a_run_without_a_column_of_the_schema_is_refused_naming_file_and_column(run_dirs, tmp_path):
    """No column is filled in with NaN or "": a run that lacks one (an older run, an edited
    file) is refused in one line naming the file and the column."""
    import shutil

    run = tmp_path / "baseline"
    shutil.copytree(run_dirs["baseline"], run)
    file = run / "interventions.csv"
    frame = pd.read_csv(file, dtype=str, keep_default_na=False).drop(columns="note")
    file.write_text(frame.to_csv(index=False))
    with pytest.raises(ValueError) as err:
        reports.load_runs(run)
    message = str(err.value)
    assert str(file) in message and "lacks the column note" in message and "\n" not in message


def test_the_schema_is_the_metrics():
    import probe.metrics
    import probe.results.schema

    assert TABLES is probe.results.schema.TABLES
    for declaration in probe.metrics.DECLARATIONS:
        assert set(declaration.tables) <= set(TABLES)
