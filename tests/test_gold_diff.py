"""tests/gold_diff.py: which cells may differ from the gold and by how much, and what a difference
says. Text only (a gold folder edited in memory): no model runs here."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.gold_diff import (COUNT_COLUMNS, EXACT, FLOAT, Tolerance, diff_files, main, read_folder,
                       write_gold)
from probe.results.schema import TABLES

CASE = Path(__file__).parent / "gold_runs" / "official_headwise_interventions"


@pytest.fixture(scope="module")
def gold() -> dict[str, str]:
    return read_folder(CASE)


def edit(text: str, row: int, column: str, change) -> str:
    """`text` (a CSV) with the cell at data row `row` (1-based) of `column` replaced by
    change(old cell)."""
    lines = text.splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[row].rstrip("\n").split(",")
    cells[header.index(column)] = change(cells[header.index(column)])
    lines[row] = ",".join(cells) + "\n"
    return "".join(lines)


def scaled(factor: float):
    return lambda cell: repr(float(cell) * factor)


def row_of(text: str, **values) -> int:
    """The first data row whose cells hold `values`."""
    lines = text.splitlines()
    header = lines[0].split(",")
    for number, line in enumerate(lines[1:], start=1):
        cells = dict(zip(header, line.split(",")))
        if all(cells[k] == v for k, v in values.items()):
            return number
    raise AssertionError(values)


def test_the_float_tolerance_against_its_formula():
    # |a - b| <= 1e-4 * max(|a|, |b|) + 1e-6, written out for each side of the bound.
    assert FLOAT.allows(1.0, 1.0 + 0.99e-4) and not FLOAT.allows(1.0, 1.0 + 1.02e-4 + 1e-6)
    assert FLOAT.allows(-250.0, -250.0 * (1 + 0.99e-4)) and not FLOAT.allows(-250.0, -250.0 * (1 + 1.1e-4))
    assert FLOAT.allows(0.0, 0.99e-6) and not FLOAT.allows(0.0, 1.01e-6)
    assert FLOAT.allows(math.nan, math.nan) and not FLOAT.allows(math.nan, 0.0)
    assert FLOAT.allows(math.inf, math.inf) and not FLOAT.allows(math.inf, 1e308)
    assert not FLOAT.allows(math.inf, -math.inf)
    assert EXACT.allows(3.0, 3.0) and not EXACT.allows(3.0, 3.0 + 1e-15)
    assert str(EXACT) == "exact" and str(Tolerance(1e-4, 1e-6)) == "0.0001 relative + 1e-06"


def test_a_gold_folder_equals_itself(gold):
    assert diff_files(gold, dict(gold)) == []


def test_a_float_within_the_tolerance_passes_one_beyond_it_is_named(gold):
    text = gold["first_token.csv"]
    row = row_of(text, layer="1", head="1", metric="f_attn")
    assert diff_files(gold, {**gold, "first_token.csv": edit(text, row, "value", scaled(1 + 5e-5))}) == []
    changed = edit(text, row, "value", scaled(1 + 3e-4))
    [found] = diff_files(gold, {**gold, "first_token.csv": changed})
    assert (found.file, found.where, found.row, found.tolerance) == ("first_token.csv", "value", row, FLOAT)
    assert found.key == "layer 1, head 1, layer_type attention, metric f_attn"
    assert str(found).startswith(f"first_token.csv, column value, row {row} (layer 1, head 1, "
                                 "layer_type attention, metric f_attn): gold 0.")
    assert "0.0003 relative; tolerance 0.0001 relative + 1e-06)" in str(found)


def test_counts_integers_and_strings_are_exact(gold):
    hist = gold["gate_hist.csv"]
    assert diff_files(gold, {**gold, "gate_hist.csv": edit(hist, 1, "count", lambda c: c + ".0")}) == []
    [count] = diff_files(gold, {**gold, "gate_hist.csv": edit(hist, 1, "count", lambda c: str(int(c) + 1))})
    assert (count.where, count.tolerance) == ("count", EXACT)
    # The long tables: a `count` row's value is exact, a `mean` row's within the tolerance.
    gates = gold["gates.csv"]
    count_row, mean_row = row_of(gates, metric="count"), row_of(gates, metric="mean")
    assert [d.row for d in diff_files(gold, {**gold, "gates.csv": edit(gates, count_row, "value", scaled(1 + 1e-9))})] == [count_row]
    assert diff_files(gold, {**gold, "gates.csv": edit(gates, mean_row, "value", scaled(1 + 1e-9))}) == []
    [layer] = diff_files(gold, {**gold, "gates.csv": edit(gates, 1, "layer", lambda c: "7")})
    assert (layer.where, layer.gold, layer.now) == ("layer", "0", "7")
    [note] = diff_files(gold, {**gold, "interventions.csv": edit(gold["interventions.csv"], 1, "intervention",
                                                                   lambda c: "gate_one")})
    assert str(note).endswith("gold none, now gate_one")        # text: no distance, no tolerance


def test_count_columns_are_float_columns_of_the_schema():
    for table, columns in COUNT_COLUMNS.items():
        for column in columns:
            assert TABLES[table][column] == "float", (table, column)


def test_columns_rows_and_files_that_differ(gold):
    text = gold["sparsity.csv"]
    renamed = text.replace("threshold", "thresh", 1)
    assert [(d.where, d.row) for d in diff_files(gold, {**gold, "sparsity.csv": renamed})] == [("columns", None)]
    shorter = "".join(text.splitlines(keepends=True)[:-1])
    [rows] = diff_files(gold, {**gold, "sparsity.csv": shorter})
    assert (rows.where, int(rows.gold) - int(rows.now)) == ("rows", 1)
    without = {name: t for name, t in gold.items() if name != "massive.csv"}
    assert [(d.file, d.gold, d.now) for d in diff_files(gold, without)] == [("massive.csv", "present", "absent")]


def test_json_numbers_keys_and_lengths(gold):
    summary = json.loads(gold["summary.json"])

    def with_summary(change) -> list:
        data = json.loads(gold["summary.json"])
        change(data)
        return diff_files(gold, {**gold, "summary.json": json.dumps(data)})

    assert with_summary(lambda d: d.update(f_attn=d["f_attn"] * (1 + 5e-5))) == []
    [f_attn] = with_summary(lambda d: d["layers"][1].update(f_attn=d["layers"][1]["f_attn"] * 1.01))
    assert (f_attn.where, f_attn.tolerance) == ("layers[1].f_attn", FLOAT)
    [tokens] = with_summary(lambda d: d.update(tokens=d["tokens"] + 1))
    assert (tokens.where, tokens.gold, tokens.tolerance) == ("tokens", str(summary["tokens"]), EXACT)
    [gone] = with_summary(lambda d: d.pop("sink_rate"))
    assert (gone.where, gone.now) == ("sink_rate", "absent")
    [short] = with_summary(lambda d: d["layers"].pop())
    assert (short.where, short.gold, short.now) == ("layers (length)", str(len(summary["layers"])),
                                                    str(len(summary["layers"]) - 1))
    [null] = with_summary(lambda d: d.update(mean_gate=None))
    assert null.now == "null"


def test_read_folder_writes_the_root_and_drops_varying_meta(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    meta = {"timestamp": "now", "versions": {}, "command": "x", "config_hash": "h",
            "checkpoint": str(tmp_path / "checkpoints" / "m"), "tables": {"gates": 2}}
    (run / "meta.json").write_text(json.dumps(meta))
    (run / "report.html").write_text("<html>")
    files = read_folder(run, tmp_path)
    assert json.loads(files["meta.json"]) == {"checkpoint": "ROOT/checkpoints/m", "tables": {"gates": 2}}
    assert files["report.html"] == "(not compared)"


def test_write_gold_rewrites_only_what_differs_beyond_the_tolerances(tmp_path, gold):
    folder = tmp_path / "case"
    shutil.copytree(CASE, folder)
    near = edit(gold["first_token.csv"], 1, "value", scaled(1 + 1e-6))
    far = edit(gold["massive.csv"], 1, "value", scaled(2.0))
    now = {**gold, "first_token.csv": near, "massive.csv": far, "new.csv": "a\n1\n"}
    del now["sparsity.csv"]
    write_gold(folder, now, diff_files(read_folder(folder), now))
    assert (folder / "first_token.csv").read_text() == gold["first_token.csv"]      # within: kept
    assert (folder / "massive.csv").read_text() == far
    assert (folder / "new.csv").read_text() == "a\n1\n" and not (folder / "sparsity.csv").exists()
    assert diff_files(read_folder(folder), now) == []


def test_the_tool(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(CASE, run)
    assert main([str(CASE), str(run)]) == 0
    assert capsys.readouterr().out == "no differences beyond the tolerances\n"
    (run / "massive.csv").write_text(edit((CASE / "massive.csv").read_text(), 2, "value", scaled(2.0)))
    assert main([str(CASE), str(run)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("  massive.csv, column value, row 2 (layer 0, site attn_out, metric ") and out.count("\n") == 1
    assert main([str(CASE), str(tmp_path / "nothing")]) == 2
    assert "is not a folder" in capsys.readouterr().err


WINDOWS = Path(__file__).parent / "gold_runs" / "gemma3_windows"


def test_a_histogram_median_may_move_within_a_bin_no_further():
    """massive.csv median_abs is a quantile of bins 2**-7 wide (relative): a value crossing a
    bin edge on another CPU moves it within that, and a move beyond one bin is named."""
    text = (WINDOWS / "massive.csv").read_text()
    row = row_of(text, metric="median_abs")
    assert diff_files({"massive.csv": text}, {"massive.csv": edit(text, row, "value", scaled(1 + 2**-8))}) == []
    found = diff_files({"massive.csv": text}, {"massive.csv": edit(text, row, "value", scaled(1 + 2**-6))})
    assert [(d.where, d.row) for d in found] == [("value", row)]
    # max_abs keeps the arithmetic's tolerance
    row = row_of(text, metric="max_abs")
    assert diff_files({"massive.csv": text}, {"massive.csv": edit(text, row, "value", scaled(1 + 2**-8))})


def _swap_ranks(text: str, first: int) -> str:
    """The CSV with data rows first and first + 1 exchanged, their `rank` cells kept in place."""
    lines = text.splitlines(keepends=True)
    rank = lines[0].split(",").index("rank")
    a, b = (lines[first].split(","), lines[first + 1].split(","))
    a[rank], b[rank] = b[rank], a[rank]
    lines[first], lines[first + 1] = ",".join(b), ",".join(a)
    return "".join(lines)


def test_near_tied_entries_of_a_ranking_may_come_in_either_order():
    """Ranks 1 and 2 of layer 0 resid_mid hold values one float32 ulp apart (the same window of
    text at two positions): another CPU's rounding may swap them. Entries that differ by more
    than FLOAT keep their order."""
    text = (WINDOWS / "massive_top.csv").read_text()
    tied = row_of(text, layer="0", site="resid_mid", rank="1")
    assert diff_files({"massive_top.csv": text}, {"massive_top.csv": _swap_ranks(text, tied)}) == []
    apart = row_of(text, layer="0", site="resid_mid", rank="2")          # ranks 2 and 3: 2% apart
    found = diff_files({"massive_top.csv": text}, {"massive_top.csv": _swap_ranks(text, apart)})
    assert {d.where for d in found} >= {"sequence", "position", "abs_value"}


def test_the_last_entry_of_a_ranking_may_be_another_of_the_same_value_no_other():
    """At the cut a near-tie with an entry the table does not show may let that entry in: the
    last rank may sit elsewhere if its value agrees within FLOAT; rank 1 may not."""
    text = (WINDOWS / "massive_top.csv").read_text()
    last = row_of(text, layer="0", site="resid_mid", rank="3")
    moved = edit(edit(text, last, "sequence", lambda c: str(int(c) + 5)), last, "position", lambda c: "7")
    assert diff_files({"massive_top.csv": text}, {"massive_top.csv": moved}) == []
    further = edit(moved, last, "abs_value", scaled(1.001))
    assert diff_files({"massive_top.csv": text}, {"massive_top.csv": further})
    first = row_of(text, layer="0", site="resid_mid", rank="1")
    assert diff_files({"massive_top.csv": text},
                      {"massive_top.csv": edit(text, first, "position", lambda c: "7")})
