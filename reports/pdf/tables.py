"""Tables in the PDF, drawn cell by cell: column widths from the measured text, verdicts in
colour, a header that repeats on a new page, the caption kept with the last rows."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from probe.reports.claims import VERDICT_KINDS
from probe.reports.sections.items import Section, TableItem
from probe.reports.measure import text_width, wrap
from probe.reports.pdf.page import (CAPTION_SIZE, CELL_PAD_PT, MARGIN_IN, PAGE_SIZE, TABLE_SIZE,
                                    TEXT_WIDTH_IN, Row, Stamp, caption_lines, draw_caption_text, line_in,
                                    page_text)
from probe.reports.tables import numeric_columns

_KIND_COLORS = {"consistent": "#1a7f37", "inconsistent": "#b42318", "below": "#9a6700",
                "untestable": "#57606a"}
_VERDICT_COLORS = tuple((text, _KIND_COLORS[kind]) for text, kind in VERDICT_KINDS)


def table_rows(item: TableItem, section: Section) -> list[Row]:
    """A header row, one row per body row, and the caption; the header repeats on new pages."""
    columns = [item.index_label, *map(str, item.frame.columns)]
    body = [[str(label), *map(str, values)]
            for label, values in zip(item.frame.index, item.frame.itertuples(index=False))]
    size = TABLE_SIZE - (1.0 if item.free_text else 0.0)
    widths = column_widths([columns, *body], size)
    right = [False, *numeric_columns(item.frame)]
    header = _cells_row(columns, widths, right, size, section, item, header=True)
    rows = [_cells_row(cells, widths, right, size, section, item) for cells in body]
    for row in rows:
        row.header = header
    lines = caption_lines(item.label, item.caption, TEXT_WIDTH_IN)

    def draw_caption(page: Figure, top: float) -> list[Stamp]:
        draw_caption_text(page, MARGIN_IN, top + 0.06, item.label, lines)
        return []

    # A table that fits on a page stays in one piece with its caption (pdf._paginate breaks
    # one only where it cannot: taller than a page, or too tall to follow its heading).
    for row in rows:
        row.keep_with_next = True
    caption = Row(0.06 + line_in(CAPTION_SIZE) * len(lines), draw_caption, section)
    return [*rows, caption] if rows else [header, caption]


def column_widths(rows: list[list[str]], size: float) -> list[float]:
    """Column widths in points: natural widths where they fit, else the widest columns share
    what the narrower ones leave (each at least 48 pt)."""
    available = TEXT_WIDTH_IN * 72
    natural = []
    for index in range(len(rows[0])):
        natural.append(max(text_width(line, size, bold=(r == 0 or index == 0))
                           for r, row in enumerate(rows) for line in row[index].split("\n"))
                       + 2 * CELL_PAD_PT + 1)
    if sum(natural) <= available:
        return natural
    widths = [0.0] * len(natural)
    open_columns = list(range(len(natural)))
    left = available
    while open_columns:  # water-filling: columns narrower than a fair share keep their width
        share = left / len(open_columns)
        small = [i for i in open_columns if natural[i] <= share]
        if not small:
            for i in open_columns:
                widths[i] = max(share, 48.0)
            break
        for i in small:
            widths[i] = natural[i]
            left -= natural[i]
        open_columns = [i for i in open_columns if i not in small]
    return widths


def _verdict_color(text: str) -> str | None:
    return next((color for prefix, color in _VERDICT_COLORS if text.startswith(prefix)), None)


def _cells_row(cells: list[str], widths: list[float], right: list[bool], size: float,
               section: Section, table: TableItem, header: bool = False) -> Row:
    wrapped = [wrap(cell, width - 2 * CELL_PAD_PT, size, bold=header or index == 0)
               for index, (cell, width) in enumerate(zip(cells, widths))]
    height = (max(len(lines) for lines in wrapped) * line_in(size)
              + 2 * CELL_PAD_PT / 72)

    def draw(page: Figure, top: float) -> list[Stamp]:
        x = MARGIN_IN
        for index, (lines, width) in enumerate(zip(wrapped, widths)):
            width_in = width / 72
            page.add_artist(Rectangle(
                (x / PAGE_SIZE[0], 1 - (top + height) / PAGE_SIZE[1]),
                width_in / PAGE_SIZE[0], height / PAGE_SIZE[1], transform=page.transFigure,
                facecolor="#f0f0f0" if header else "white", edgecolor="#cccccc",
                linewidth=0.5, zorder=-2))
            align_right = right[index] and not header
            text_x = x + (width_in - CELL_PAD_PT / 72 if align_right else CELL_PAD_PT / 72)
            color = None if header else _verdict_color(cells[index])
            page_text(page, text_x, top + CELL_PAD_PT / 72, "\n".join(lines), size,
                  ha="right" if align_right else "left",
                  fontweight="bold" if header or index == 0 else "normal",
                  color=color or "#1f2328")
            x += width_in
        return []

    return Row(height, draw, section, table=table, heading=False)
