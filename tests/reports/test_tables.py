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
                weights={"format": "gguf", "quantization": "Q4_K_M"})
    (run / "meta.json").write_text(json.dumps(meta))
    table = provenance_table([run])["baseline"]
    assert "layout note" not in table.index  # null: no row, not "None"
    assert table["processes"] == "1"
    assert table["sparsity control"] == "one pass"
    assert table["weights file"] == "format=gguf, quantization=Q4_K_M"
    assert not {"layout_note", "sparsity_control", "weights"} & set(table.index)  # raw keys


def test_provenance_writes_the_home_folder_as_a_tilde(run_dirs, tmp_path):
    run = shutil.copytree(run_dirs["baseline"], tmp_path / "baseline")
    meta = json.loads((run / "meta.json").read_text())
    meta["checkpoint"] = str(Path.home() / ".cache" / "probe-models" / "model.gguf")
    (run / "meta.json").write_text(json.dumps(meta))
    assert provenance_table([run])["baseline"]["checkpoint"] == "~/.cache/probe-models/model.gguf"
