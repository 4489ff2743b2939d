"""Same inputs, same numbers: two `probe analyze` runs write identical tables."""
from __future__ import annotations

import contextlib
import json
import re

import pytest

from probe.api.cli import main
from probe.run.interventions import NOTHING_ZEROED
from probe.results.analysis import TABLES


@pytest.mark.parametrize("kind,interventions", [("qwen3_next", "all"), ("official_elementwise", "gate_zero")])
def test_two_runs_write_identical_tables(kind, interventions, checkpoint, text_file, tmp_path):
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"gate": [" gate"], "ids": [3, 4, 5]}))
    runs = []
    # "all" includes massive_zero, which on a tiny random model finds no massive activation and says so.
    for n in range(2):
        out = tmp_path / f"run{n}"
        with (pytest.warns(UserWarning, match=re.escape(NOTHING_ZEROED)) if interventions == "all"
              else contextlib.nullcontext()):
            assert main(["analyze", str(checkpoint(kind)), "--data", str(text_file), "--out", str(out), "--quiet",
                         "--seq-len", "16", "--max-sequences", "3", "--batch-size", "2", "--name", "m",
                         "--interventions", interventions, "--token-groups", str(groups)]) == 0
        runs.append(out)
    a, b = runs
    written = sorted(p.name for p in a.iterdir())
    assert written == sorted(p.name for p in b.iterdir())
    for table in ("gates", "first_token", "massive", "massive_top", "sparsity", "gates_by_token_type",
                  "interventions", "attention_patterns"):
        assert f"{table}.csv" in written, table
    for name in written:
        if name == "meta.json":
            continue
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    meta = [json.loads((r / "meta.json").read_text()) for r in runs]
    for m in meta:
        m.pop("timestamp"), m.pop("command")             # when, and the --out it was given
    assert meta[0] == meta[1]
    assert set(TABLES) >= {"gates_by_token_type", "interventions"}
