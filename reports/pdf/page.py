"""The PDF's page: its geometry and type sizes, the rows that flow down the pages (and the figures
stamped onto them), text drawn at a position in inches, and captions wrapped to a width."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from matplotlib.figure import Figure

from probe.reports.sections.items import Section
from probe.reports.measure import text_width, wrap

PAGE_SIZE = (11.69, 8.27)  # A4 landscape, inches
MARGIN_IN = 0.5
TEXT_WIDTH_IN = PAGE_SIZE[0] - 2 * MARGIN_IN
COLUMN_GAP_IN = 0.35
COLUMN_WIDTH_IN = (TEXT_WIDTH_IN - COLUMN_GAP_IN) / 2  # 13.0 cm
MIN_FIGURE_WIDTH_IN = 12 / 2.54
NARROW_IN = 7.2  # figures whose natural width is at most this share a row with another
COVER_TITLE_SIZE = 22
HEADING_SIZE = 13
TEXT_SIZE = 8.5
CAPTION_SIZE = 8
TABLE_SIZE = 7.5
ROW_GAP_IN = 0.16
# A table that breaks over pages carries at least this many of its last rows to the caption's
# page (a page holding one row of a table reads as a mistake).
WIDOW_ROWS = 3
CELL_PAD_PT = 3.0


def line_in(size: float) -> float:
    return size * 1.32 / 72


@dataclass
class Stamp:
    """A rendered figure to merge onto a page, lower-left corner in inches from the page's."""
    pdf: bytes
    x_in: float
    y_in: float


@dataclass
class Row:
    height: float
    draw: Callable[[Figure, float], list[Stamp]]  # (page, top in inches from the top)
    section: Section
    heading: bool = False  # a section's title and lead: kept with the row after it
    table: object = None  # rows of one table repeat its header on a new page
    header: "Row | None" = None
    keep_with_next: bool = False
    # A figure row can be drawn shorter to use the rest of a page: shrink(height) gives it.
    shrink: "Callable[[float], Row] | None" = None
    min_height: float = 0.0
    # The figures draw() stamps, as (FigureItem, size in inches): rendered before the pages are
    # (all of them at once, in parallel: figures.prerendered).
    figures: tuple = ()


@dataclass
class Page:
    title: str
    rows: list[tuple[Row, float]] = field(default_factory=list)


def page_text(page: Figure, x_in: float, top_in: float, text: str, size: float, **kwargs) -> None:
    page.text(x_in / PAGE_SIZE[0], 1 - top_in / PAGE_SIZE[1], text, fontsize=size, va="top",
              linespacing=1.32 / 1.2, parse_math=False, **kwargs)


def caption_lines(label: str, caption: str, width_in: float) -> list[str]:
    """Caption lines; the first starts with the bold label, drawn separately."""
    indent = text_width(label + ". ", CAPTION_SIZE, bold=True)
    first = wrap(caption, width_in * 72 - indent, CAPTION_SIZE)
    rest = wrap(" ".join(first[1:]), width_in * 72, CAPTION_SIZE) if len(first) > 1 else []
    return [first[0], *rest]


def draw_caption_text(page: Figure, x_in: float, top: float, label: str, lines: list[str]) -> None:
    page_text(page, x_in, top, label + ".", CAPTION_SIZE, fontweight="bold", color="#222222")
    indent_in = text_width(label + ". ", CAPTION_SIZE, bold=True) / 72
    page_text(page, x_in + indent_in, top, lines[0], CAPTION_SIZE, color="#444444")
    if len(lines) > 1:
        page_text(page, x_in, top + line_in(CAPTION_SIZE), "\n".join(lines[1:]), CAPTION_SIZE,
              color="#444444")
