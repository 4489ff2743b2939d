"""Gold files for what the report says: every table (display strings) and every caption,
numbered, for the fixture runs, compared line by line with tests/reports/gold/.

A change to a table or a caption shows up as a diff of a text file, which a reviewer reads
like prose. After an intended change, regenerate and review the diff:

    PROBE_REGENERATE_GOLD=1 python -m pytest tests/reports/test_gold.py
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pandas as pd
import pytest

from probe.reports.sections import FigureItem, TableItem, build_sections, left_out_line, shown

GOLD = Path(__file__).parent / "gold"
REGENERATE = os.environ.get("PROBE_REGENERATE_GOLD") == "1"


def table_text(item: TableItem, root: str) -> str:
    """A table as aligned text: header, then one line per row, cells separated by " | "; the
    temporary folder of the runs (`root`) written RUNS."""
    rows = [[item.index_label, *map(str, item.frame.columns)],
            *[[str(label), *map(str, values)]
              for label, values in zip(item.frame.index, item.frame.itertuples(index=False))]]
    rows = [[cell.replace(root, "RUNS") for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in rows)


def report_outline(runs, root: str) -> dict[str, str]:
    """{gold file name: its text}: the captions and left-out lines, and each table."""
    sections = build_sections(runs)
    captions = []
    files = {}
    for section in sections:
        if section.omitted is not None:
            captions.append(left_out_line(section))
            continue
        captions.append(f"## {section.title}")
        captions += [f"note: {note}" for note in section.notes]
        for item in section.items:
            captions.append(f"{item.label} ({item.id}): {item.title}. {item.caption}")
            if isinstance(item, TableItem):
                files[f"table-{item.number:02d}-{item.id}.txt"] = table_text(item, root) + "\n"
    files["captions.txt"] = "\n".join(captions) + "\n"
    return files


def _compare(name: str, text: str) -> None:
    path = GOLD / name
    if REGENERATE:
        GOLD.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing; PROBE_REGENERATE_GOLD=1 writes it"
    gold = path.read_text(encoding="utf-8")
    if gold != text:
        diff = "".join(difflib.unified_diff(gold.splitlines(True), text.splitlines(True),
                                            f"gold/{name}", "now"))
        pytest.fail(f"{name} differs from its gold file (PROBE_REGENERATE_GOLD=1 to accept):\n"
                    f"{diff}")


@pytest.fixture(scope="module")
def outline(all_runs, run_dirs) -> dict[str, str]:
    # The fixture runs live in a fresh temporary folder: name it the same every time.
    root = str(next(iter(run_dirs.values())).parent)
    return report_outline(all_runs, root)


def test_captions_match_gold(outline):
    _compare("captions.txt", outline["captions.txt"])


def test_tables_match_gold(outline):
    tables = sorted(name for name in outline if name.startswith("table-"))
    if not REGENERATE:
        assert tables == sorted(path.name for path in GOLD.glob("table-*.txt"))
    for name in tables:
        _compare(name, outline[name])


def test_every_figure_and_table_has_a_numbered_caption(all_runs):
    for section in shown(build_sections(all_runs)):
        for item in section.items:
            assert item.number >= 1 and len(item.caption) > 60, item.id
            assert item.label == f"{'Figure' if isinstance(item, FigureItem) else 'Table'} " \
                                 f"{item.number}"


def test_largest_activations_are_grouped_with_a_direct_count(run_dirs, all_runs):
    """Each row of the grouped table against massive_top.csv counted with plain pandas."""
    from probe import reports

    table = reports.massive_top_table(all_runs, per_model=100)
    for model, run in run_dirs.items():
        top = pd.read_csv(run / "massive_top.csv", keep_default_na=False, na_values=[""])
        counts = top.groupby(["layer", "site", "position", "dim"]).size()
        largest = top.groupby(["layer", "site", "position", "dim"])["abs_value"].max()
        mine = table[table["model"] == model]
        assert len(mine) == len(counts)  # one row per place, every place once
        for row in mine.to_dict("records"):
            key = (row["layer"], row["site"], row["position"], row["dim"])
            assert row["count"] == counts[key]
            assert abs(row["value"]) == pytest.approx(largest[key])
        assert list(mine["value"].abs()) == sorted(mine["value"].abs(), reverse=True)
