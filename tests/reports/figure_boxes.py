"""Figures as the report saves them, and the boxes of their tick labels: what the layout tests measure overlaps with."""
from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from probe.reports import pdf as report_pdf
from probe.reports.sections import FigureItem, build_sections, shown
from probe.reports.style import freeze_layout, report_style


def tick_label_boxes(ax: Axes, axis: str, renderer) -> list:
    """Extents of the tick labels a real draw put on one axis (empty and hidden ones left out)."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    labels = target.get_ticklabels(which="both")
    return [label.get_window_extent(renderer) for label in labels
            if label.get_visible() and label.get_text().strip()]


def overlaps(boxes) -> list[tuple[int, int]]:
    return [(i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes)
            if i < j and a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1]


def figures_as_saved(runs, only=None):
    """(item, figure) at the PDF's slot size: a column for narrow figures, else their width;
    only: the item ids to draw (None: every figure)."""
    for section in shown(build_sections(runs)):
        for item in section.items:
            if isinstance(item, FigureItem) and (only is None or item.id in only):
                with report_style():
                    figure = item.draw()
                    natural = tuple(figure.get_size_inches())
                    sizes = [report_pdf.figure_size(natural)]
                    if sizes[0][0] > report_pdf.COLUMN_WIDTH_IN:  # may also share a row
                        sizes.append(report_pdf.figure_size(natural, column=False))
                    for n, size in enumerate(sizes):
                        figure = figure if n == 0 else item.draw()     # the first drawing serves once
                        figure.set_size_inches(size)
                        freeze_layout(figure)
                        canvas = FigureCanvasAgg(figure)
                        canvas.draw()
                        yield item, figure, canvas.get_renderer()
