"""probe/core/progress.py: a finished bar leaves nothing in a saved notebook (tqdm's widget left
its first state, "0%|", as the notebook's text), and a terminal gets tqdm's own bar."""
from __future__ import annotations

import json

import pytest

from probe.core import progress


def test_a_terminal_gets_tqdms_text_bar():
    bar = progress.bar(total=2, desc="x", disable=True)
    assert type(bar).__name__ != "ClearedOnClose" and bar.leave is False
    bar.close()


def test_a_saved_notebook_keeps_no_bar(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipywidgets")
    pytest.importorskip("ipykernel")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(
        "from probe.core.progress import bar\n"
        "b = bar(total=4, desc='analyse arm', unit='tok')\n"
        "b.update(4)\n"
        "b.close()\n"
        "print(type(b).__name__)")]
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = notebook.cells[0].outputs
    saved = json.dumps([dict(output) for output in outputs])
    assert "analyse arm" not in saved and "%|" not in saved, saved      # tqdm's "  0%|" text
    assert [o.get("text") for o in outputs if o.output_type == "stream"] == ["ClearedOnClose\n"]
