"""reports.tables: the provenance table names every meta.json field a run writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from probe.reports.tables import provenance_table


def test_provenance_labels_run_fields_and_leaves_out_nulls(run_dirs, tmp_path):
    run = shutil.copytree(run_dirs["baseline"], tmp_path / "baseline")
    meta = json.loads((run / "meta.json").read_text())
    meta.update(layout_note=None, processes=1, sparsity_control="one pass",
                weights={"format": "gguf", "quantization": "Q4_K_M"},
                graft={"gate": "headwise", "seed": None, "gate_weights": {"seed": 0, "steps": 60}})
    (run / "meta.json").write_text(json.dumps(meta))
    table = provenance_table([run])["baseline"]
    assert "layout note" not in table.index  # null: no row, not "None"
    assert table["processes"] == "1"
    assert table["sparsity control"] == "one pass"
    assert table["weights file"] == "format=gguf, quantization=Q4_K_M"
    # A null inside a dict is left out too; a dict inside a dict keeps its keys apart.
    assert table["graft"] == "gate=headwise, gate_weights=(seed=0, steps=60)"
    assert not {"layout_note", "sparsity_control", "weights"} & set(table.index)  # raw keys


def test_provenance_writes_the_home_folder_as_a_tilde(run_dirs, tmp_path):
    run = shutil.copytree(run_dirs["baseline"], tmp_path / "baseline")
    meta = json.loads((run / "meta.json").read_text())
    meta["checkpoint"] = str(Path.home() / ".cache" / "probe-models" / "model.gguf")
    (run / "meta.json").write_text(json.dumps(meta))
    assert provenance_table([run])["baseline"]["checkpoint"] == "~/.cache/probe-models/model.gguf"


def test_the_summary_table_counts_tokens_in_integers(run_dirs):
    """tokens read 2048.0 in a notebook: a count is an integer column, <NA> where a run has none."""
    import pandas as pd

    from probe.reports.runs import load_runs
    from probe.reports.tables import summary_display, summary_table

    runs = load_runs(list(run_dirs.values()))
    table = summary_table(runs)
    assert str(table["tokens"].dtype) == "Int64"
    assert table["tokens"].tolist() == [runs.summary[m]["tokens"] for m in runs.models]
    assert summary_display(runs)["tokens"].tolist() == [f"{runs.summary[m]['tokens']:,}" for m in runs.models]
    runs.summary[runs.models[0]].pop("tokens")
    assert summary_table(runs)["tokens"].iloc[0] is pd.NA
    assert summary_display(runs)["tokens"].iloc[0] == "n/a"


def test_the_provenance_caption_names_the_command_line_only_where_a_run_has_one(run_dirs, tmp_path):
    """Runs made from Python (probe.analyze, the real-model demo) record no command: the caption
    said the table held "the command line" all the same."""
    from probe.reports.runs import load_runs
    from probe.reports.sections import build_sections

    def caption(run) -> str:
        section = next(s for s in build_sections(load_runs([run])) if s.id == "provenance")
        return next(i for i in section.items if i.id == "provenance-table").caption

    run = shutil.copytree(run_dirs["baseline"], tmp_path / "baseline")
    meta = json.loads((run / "meta.json").read_text())
    meta.update(command=["probe", "analyze", "ckpt"])
    (run / "meta.json").write_text(json.dumps(meta))
    assert caption(run).endswith("package versions and the command line.")
    for key in ("command", "command_line", "argv"):
        meta.pop(key, None)
    (run / "meta.json").write_text(json.dumps(meta))
    assert caption(run).endswith("package versions.")


def test_provenance_names_every_field_the_analysis_writes_and_in_memory_data(run_dirs, tmp_path):
    """Fields written since the labels were listed read as raw keys (anatomy_min_queries,
    embedding_fingerprint); texts given in Python read "<texts>"."""
    run = shutil.copytree(run_dirs["baseline"], tmp_path / "baseline")
    meta = json.loads((run / "meta.json").read_text())
    meta.update(data="<texts>", anatomy=True, anatomy_min_queries=16, anatomy_sink_min_queries=128,
                embedding_fingerprint="xxh3:0123", data_files=["a.txt"])
    (run / "meta.json").write_text(json.dumps(meta))
    table = provenance_table([run])["baseline"]
    assert table["data"] == "<texts>: texts given to probe.analyze(texts=...)"
    assert table["anatomy: least queries per key"] == "16" and table["embedding fingerprint"] == "xxh3:0123"
    assert not any("_" in label for label in table.index if label != "token ids sha256"), list(table.index)
