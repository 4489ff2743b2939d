"""Figures at the size the PDF and --figures save them: no two tick labels overlap, on any axis
of any figure, for the fixture runs and for deep (28- and 48-layer) runs."""

from __future__ import annotations

import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg

import reports
from reports import pdf as report_pdf
from reports.sections import FigureItem, build_sections, shown
from reports.style import freeze_layout, report_style

from conftest import RunSpec, write_run

DEEP = (
    RunSpec("deep28", 28, 16, (), "none", 0.5, 900.0, training=True, patterns=True,
            interventions=True, buckets=True),
    RunSpec("deep48", 48, 16, (), "official_headwise", 0.08, 90.0, training=True,
            patterns=True, token_types=True, interventions=True, buckets=True),
)


@pytest.fixture(scope="module")
def deep_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("deep")
    return reports.load_runs([write_run(root, spec, seed) for seed, spec in enumerate(DEEP)])


def tick_label_boxes(ax: Axes, axis: str, renderer) -> list:
    """Extents of the tick labels a real draw put on one axis (empty and hidden ones left out)."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    labels = target.get_ticklabels(which="both")
    return [label.get_window_extent(renderer) for label in labels
            if label.get_visible() and label.get_text().strip()]


def overlaps(boxes) -> list[tuple[int, int]]:
    return [(i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes)
            if i < j and a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1]


def figures_as_saved(runs):
    """(item, figure) at the PDF's slot size: a column for narrow figures, else their width."""
    for section in shown(build_sections(runs)):
        for item in section.items:
            if isinstance(item, FigureItem):
                with report_style():
                    figure = item.draw()
                    sizes = [report_pdf.figure_size(tuple(figure.get_size_inches()))]
                    if sizes[0][0] > report_pdf.COLUMN_WIDTH_IN:  # may also share a row
                        sizes.append(report_pdf.figure_size(tuple(figure.get_size_inches()),
                                                            column=False))
                    for size in sizes:
                        figure = item.draw()
                        figure.set_size_inches(size)
                        freeze_layout(figure)
                        canvas = FigureCanvasAgg(figure)
                        canvas.draw()
                        yield item, figure, canvas.get_renderer()


@pytest.mark.parametrize("which", ["fixture", "deep"])
def test_no_two_tick_labels_overlap(which, all_runs, deep_runs):
    runs = all_runs if which == "fixture" else deep_runs
    checked = 0
    for item, figure, renderer in figures_as_saved(runs):
        for ax in figure.findobj(Axes):
            for axis in ("x", "y"):
                boxes = tick_label_boxes(ax, axis, renderer)
                checked += len(boxes)
                assert not overlaps(boxes), (item.id, ax.get_title(), axis,
                                             [l.get_text() for l in getattr(
                                                 ax, f"get_{axis}ticklabels")()])
    assert checked > 200  # the check saw the labels


def test_deep_heatmaps_still_label_first_and_some_layers(deep_runs):
    figure = reports.plot_first_token_heatmap(deep_runs)
    figure.set_size_inches(report_pdf.figure_size(tuple(figure.get_size_inches())))
    with report_style():
        freeze_layout(figure)
    ax = figure.axes[0]
    labels = [label.get_text() for label in ax.get_yticklabels() if label.get_text()]
    assert labels[0] == "0" and len(labels) >= 6
