"""Issue 31: the demo reports had grown to 17 and 18 pages, with pages that show nothing (an
all-1 heatmap for ungated models) or are a third full. What fills or removes such pages:
sections left out where they have nothing to show, narrow items two to a row, figures above drawn
shorter to take the next row, and the provenance written once where every run agrees."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd

from probe import reports
from probe.reports.pdf import _pairs, _paginate, _section_rows
from probe.reports.pdf.page import Row
from probe.reports.pdf.tables import SPLIT_ROWS, table_rows
from probe.reports.sections import FigureItem, Section, TableItem, build_sections


def _section(sections, section_id):
    return next(section for section in sections if section.id == section_id)


def _with_head_norms(run_dirs, tmp_path, names):
    """Copies of the fixture runs `names`, each with a head_norms.csv (post / pre = 1 where
    ungated, 0.5 where gated)."""
    copies = []
    for name in names:
        run = shutil.copytree(run_dirs[name], tmp_path / name)
        gated = name != "baseline"
        rows = [{"model": name, "layer": layer, "head": head, "token_type": kind, "tokens": 64,
                 "pre": 2.0, "post": 1.0 if gated else 2.0, "ratio_of_means": 0.5 if gated else 1.0,
                 "mean_ratio": 0.5 if gated else 1.0}
                for layer in range(4) for head in range(4) for kind in ("all", "first")]
        pd.DataFrame(rows).to_csv(run / "head_norms.csv", index=False)
        copies.append(run)
    return copies


def test_head_norms_are_left_out_with_one_line_when_no_model_is_gated(run_dirs, tmp_path):
    runs = reports.load_runs(_with_head_norms(run_dirs, tmp_path, ["baseline"]))
    section = _section(build_sections(runs), "head-norms")
    assert section.items == [] and "no model in this report has an output gate" in section.omitted


def test_head_norms_show_the_gated_models_and_name_the_ungated_one(run_dirs, tmp_path):
    runs = reports.load_runs(_with_head_norms(run_dirs, tmp_path, ["baseline", "headwise"]))
    section = _section(build_sections(runs), "head-norms")
    assert section.omitted is None
    table = next(item for item in section.items if isinstance(item, TableItem))
    assert set(table.frame.index) == {"headwise"}
    assert any(note.startswith("baseline has no output gate") for note in section.notes)
    figure = next(item for item in section.items if isinstance(item, FigureItem)).draw()
    assert [ax.get_title() for ax in figure.axes if ax.get_title()] == ["headwise"]


def test_claims_are_left_out_with_one_line_without_a_gated_model(run_dirs):
    claims = _section(build_sections(reports.load_runs([run_dirs["baseline"]])), "claims")
    assert claims.omitted is not None and claims.items == []


def _row(height, least=None):
    """A figure-like row of `height` that can be drawn down to `least`."""
    section = SimpleNamespace(title="S")
    if least is None:
        return Row(height, lambda page, top: [], section)
    return Row(height, lambda page, top: [], section, min_height=least,
               shrink=lambda available: _row(max(available, least)))


def test_the_figures_above_are_drawn_shorter_to_take_the_next_row():
    """A figure of 4 in (down to 3 in) and one of 3 in: 7.5 in with the gaps, on a 7.27 in page.
    The first is drawn shorter and both stay on the page; where that cannot free enough, nothing
    is shrunk and the row moves on."""
    pages = _paginate([_row(4.0, 3.0), _row(3.0)], "T")
    assert len(pages) == 1 and pages[0].rows[0][0].height < 4.0
    pages = _paginate([_row(4.0, 3.9), _row(3.3)], "T")
    assert len(pages) == 2 and pages[0].rows[0][0].height == 4.0


def test_narrow_items_pair_where_that_saves_the_most_height():
    """The sink-anatomy tables: key 0 (1 in), sink tokens (4.6 in), secondary sinks (3.9 in). The
    two long ones go side by side; the short one stays alone."""
    heights = [_row(h) for h in (1.0, 4.6, 3.9)]
    assert _pairs(heights) == [(0,), (1, 2)]
    assert _pairs([_row(h) for h in (2.0, 2.0, 2.0, 2.0)]) == [(0, 1), (2, 3)]


def _narrow_table(n, label="t"):
    frame = pd.DataFrame({"value": [f"{i / 7:.3f}" for i in range(n)]},
                         index=[f"row {i}" for i in range(n)])
    return TableItem(label, "T", frame, "A caption.", number=1)


def test_a_long_narrow_table_alone_is_set_in_two_columns():
    table = _narrow_table(SPLIT_ROWS + 6)
    section = Section(id="s", title="S", intro="", items=[table])
    rows = _section_rows(section)[1:]            # after the heading
    flowing = table_rows(table, section)
    assert len(rows) == 2 and rows[0].keep_with_next          # the two columns, then the caption
    assert rows[0].height < 0.6 * sum(row.height for row in flowing[:-1])
    short = Section(id="s", title="S", intro="", items=[_narrow_table(SPLIT_ROWS - 1)])
    assert len(_section_rows(short)[1:]) == SPLIT_ROWS            # rows and caption, as before


def test_a_narrow_table_goes_beside_a_narrow_figure(all_runs):
    from functools import partial

    from probe.reports import plots

    figure = FigureItem("f", "F", partial(plots.plot_gate_saturation, all_runs), "Caption.")
    section = Section(id="s", title="S", intro="", items=[figure, _narrow_table(4)])
    assert len(_section_rows(section)[1:]) == 1


def test_provenance_fields_every_run_shares_are_written_once():
    """A row whose cells are equal is one cell across the model columns: a long shared value
    wraps in the full width, not in a third of it."""
    shared = "sink=0.3, sparsity=1e-06, 3.16e-06, 1e-05, 3.16e-05, 0.0001, 0.000316, 0.001"
    frame = pd.DataFrame({m: [shared, f"runs/{m}"] for m in ("a", "b", "c")},
                         index=["thresholds", "source"])
    section = SimpleNamespace(title="Provenance")
    merged, apart = (table_rows(TableItem("p", "P", frame, "C.", index_label="field", free_text=True,
                                          merge_equal=merge, number=1), section)
                     for merge in (True, False))
    assert merged[0].height < apart[0].height                  # thresholds: one line, not several
    assert np.isclose(merged[1].height, apart[1].height)       # source differs: as before
