"""Figures in the PDF (and in --figures): each rendered alone at the size of its slot, one to a
row or two narrow ones side by side, drawn shorter when that fills a page."""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from matplotlib.figure import Figure

from probe.reports.sections.items import FigureItem, Section
from probe.reports.pdf.page import (CAPTION_SIZE, COLUMN_GAP_IN, COLUMN_WIDTH_IN, MARGIN_IN,
                                    MIN_FIGURE_WIDTH_IN, NARROW_IN, PAGE_SIZE, TEXT_WIDTH_IN, Row, Stamp,
                                    caption_lines, draw_caption_text, line_in)
from probe.reports.parallel import map_forked
from probe.reports.style import freeze_layout, report_style

# Saved without dates or producer: the same runs give the same bytes.
FIGURE_METADATA = {"Creator": None, "Producer": None, "CreationDate": None}


def figure_size(natural: tuple[float, float], *, column: bool | None = None) -> tuple[float, float]:
    """The size in inches a figure of `natural` size gets in the PDF (and in --figures): a
    column (13 cm) for narrow figures, else its own width, at least 12 cm and at most the
    text width; its aspect kept, its height capped so that it fits a page with its caption."""
    width, height = natural
    if column is None:
        column = width <= NARROW_IN
    target = COLUMN_WIDTH_IN if column else min(TEXT_WIDTH_IN, max(width, MIN_FIGURE_WIDTH_IN))
    max_height = PAGE_SIZE[1] - 2 * MARGIN_IN - 1.6
    return target, min(height * target / width, max_height)


def natural_size(item: FigureItem) -> tuple[float, float]:
    """The size the plot function gives its figure."""
    with report_style():
        return tuple(item.draw().get_size_inches())


def render_figure(item: FigureItem, size: tuple[float, float] | None = None,
                  fmt: str = "pdf") -> bytes:
    """The figure alone as PDF or SVG bytes, at `size` (default: `figure_size` of its own);
    inside `prerendered`, the bytes it made."""
    done = _PRERENDERED.get().get((id(item), size, fmt))
    return done if done is not None else render_formats(item, size, (fmt,))[fmt]


# (id(item), size, format) -> bytes, inside `prerendered`.
_PRERENDERED: ContextVar[dict] = ContextVar("probe_prerendered_figures", default={})


@contextmanager
def prerendered(figures: Iterable[tuple[FigureItem, tuple[float, float]]]):
    """Render these (item, size) figures as PDF all at once, in parallel (reports/parallel.py),
    for the `render_figure` calls inside the block."""
    jobs = list({(id(item), size): (item, size) for item, size in figures}.values())
    rendered = map_forked(lambda job: render_formats(*job, ("pdf",))["pdf"], jobs)
    token = _PRERENDERED.set({(id(item), size, "pdf"): pdf for (item, size), pdf in zip(jobs, rendered)})
    try:
        yield
    finally:
        _PRERENDERED.reset(token)


def render_formats(item: FigureItem, size: tuple[float, float] | None = None,
                   formats: Sequence[str] = ("pdf", "svg")) -> dict[str, bytes]:
    """The figure drawn and laid out once, saved in each of `formats`."""
    with report_style():
        figure = item.draw()
        figure.set_size_inches(size or figure_size(tuple(figure.get_size_inches())))
        freeze_layout(figure)
        saved = {}
        for fmt in formats:
            buffer = io.BytesIO()
            metadata = FIGURE_METADATA if fmt == "pdf" else {"Date": None}
            figure.savefig(buffer, format=fmt, metadata=metadata)
            saved[fmt] = buffer.getvalue()
    return saved


# A figure drawn shorter than its own aspect, to fill a page, keeps at least this share of
# its height: wide figures (one row of panels) can give more than tall, stacked ones, whose
# panels and labels would run into each other. A figure taller than WIDE_MAX_IN as drawn is
# stacked panels whatever its aspect (three models' sparsity bars, two panels to a row).
MIN_SHRINK = {"wide": 0.6, "tall": 0.85}
WIDE_ASPECT = 1.5
WIDE_MAX_IN = 4.0
# A figure that keeps its aspect is drawn at least this share of its size (width and height).
WHOLE_MIN_SHRINK = 0.9
# Nor is any figure drawn shorter than this: an axes label needs the height (style.py wraps
# one that is longer than its axes onto two lines).
MIN_FIGURE_IN = 2.2


def _min_shrink(naturals: Sequence[tuple[float, float]], drawn: float) -> float:
    wide = drawn <= WIDE_MAX_IN and all(width / height >= WIDE_ASPECT for width, height in naturals)
    return max(MIN_SHRINK["wide" if wide else "tall"], min(1.0, MIN_FIGURE_IN / drawn))


def figure_row(items: list[tuple[FigureItem, tuple[float, float]]], section: Section,
                scale: float = 1.0, column_left: float | None = None) -> Row:
    """One figure (centred) or two narrow ones side by side, each with its caption below;
    `scale` < 1 draws the figures that much shorter (the same width). `column_left`: one
    narrow figure in the column that starts there (beside a table, pdf.beside_row)."""
    slots = []
    in_columns = len(items) > 1 or column_left is not None
    # A figure that must keep its aspect (tokens on an axis, rows of labels) is drawn smaller
    # whole, not shorter: a little, so that it fits under its section's heading.
    whole = not all(item.shrinkable for item, _ in items)
    for item, natural in items:
        width, tall = figure_size(natural, column=in_columns or None)
        size = (width * scale, tall * scale) if whole else (width, tall * scale)
        caption_width = size[0] if in_columns else max(size[0], COLUMN_WIDTH_IN)
        slots.append((item, size, caption_lines(item.label, item.caption, caption_width),
                      caption_width))
    height = max(size[1] + 0.1 + line_in(CAPTION_SIZE) * len(lines)
                 for _, size, lines, _ in slots)
    if column_left is not None:
        lefts = [column_left]
    elif len(slots) == 1:
        lefts = [MARGIN_IN + (TEXT_WIDTH_IN - max(slots[0][1][0], slots[0][3])) / 2]
    else:
        lefts = [MARGIN_IN, MARGIN_IN + COLUMN_WIDTH_IN + COLUMN_GAP_IN]

    def draw(page: Figure, top: float) -> list[Stamp]:
        stamps = []
        for left, (item, size, lines, caption_width) in zip(lefts, slots):
            figure_left = left + (caption_width - size[0]) / 2
            stamps.append(Stamp(render_figure(item, size), figure_left,
                                 PAGE_SIZE[1] - top - size[1]))
            draw_caption_text(page, left, top + size[1] + 0.1, item.label, lines)
        return stamps

    plots = max(size[1] for _, size, _, _ in slots)
    least = WHOLE_MIN_SHRINK if whole else _min_shrink([natural for _, natural in items], plots / scale)

    def shrink(available: float) -> Row:
        factor = max(least, min(1.0, 1 - (height - available) / plots))
        return figure_row(items, section, scale * factor, column_left)

    return Row(height, draw, section, shrink=shrink if scale == 1.0 and least < 1.0 else None,
               min_height=height - plots * (1 - least),
               figures=tuple((item, size) for item, size, _, _ in slots))
