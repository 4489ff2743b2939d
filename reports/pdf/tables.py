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
FREE_TEXT_PAD_PT = 1.5     # above and below the text of a free-text table's cell
_VERDICT_COLORS = tuple((text, _KIND_COLORS[kind]) for text, kind in VERDICT_KINDS)


def table_rows(item: TableItem, section: Section, left_in: float = MARGIN_IN,
               width_in: float = TEXT_WIDTH_IN, part: slice = slice(None)) -> list[Row]:
    """A header row, one row per body row, and the caption; the header repeats on new pages.
    `left_in`, `width_in`: where the table and its caption go (a column, for `table_block`);
    `part`: only these body rows, in the columns of the whole table (`split_table_rows`)."""
    columns = [item.index_label, *map(str, item.frame.columns)]
    body = [[str(label), *map(str, values)]
            for label, values in zip(item.frame.index, item.frame.itertuples(index=False))]
    size = _size(item)
    merged = [item.merge_equal and len(cells) > 2 and len(set(cells[1:])) == 1 for cells in body]
    # A merged row's value spans the columns: it does not widen any one of them.
    widths = column_widths([columns, *[cells[:1] + [""] * (len(cells) - 1) if merge else cells
                                       for cells, merge in zip(body, merged)]], size)
    widths = _room_for_merged(widths, [cells[1] for cells, merge in zip(body, merged) if merge], size)
    right = [False, *numeric_columns(item.frame)]
    header = _cells_row(columns, widths, right, size, section, item, header=True, left_in=left_in)
    spanned = [widths[0], sum(widths[1:])]
    rows = [_cells_row(cells[:2], spanned, right[:2], size, section, item, left_in=left_in) if merge
            else _cells_row(cells, widths, right, size, section, item, left_in=left_in)
            for cells, merge in list(zip(body, merged))[part]]
    for row in rows:
        row.header = header
    lines = caption_lines(item.label, item.caption, width_in)

    def draw_caption(page: Figure, top: float) -> list[Stamp]:
        draw_caption_text(page, left_in, top + 0.06, item.label, lines)
        return []

    # A table that fits on a page stays in one piece with its caption (pdf._paginate breaks
    # one only where it cannot: taller than a page, or too tall to follow its heading).
    for row in rows:
        row.keep_with_next = True
    caption = Row(0.06 + line_in(CAPTION_SIZE) * len(lines), draw_caption, section)
    return [*rows, caption] if rows else [header, caption]


def _size(item: TableItem) -> float:
    return TABLE_SIZE - (1.0 if item.free_text else 0.0)


def natural_width(item: TableItem) -> float:
    """The table's width in inches where nothing needs to wrap (its cells' text, measured)."""
    rows = [[item.index_label, *map(str, item.frame.columns)],
            *[[str(label), *map(str, values)]
              for label, values in zip(item.frame.index, item.frame.itertuples(index=False))]]
    return sum(column_widths(rows, _size(item), available=float("inf"))) / 72


def table_block(item: TableItem, section: Section, left_in: float, width_in: float,
                part: slice = slice(None), caption: bool = True) -> Row:
    """The whole table (header, rows, caption wrapped to `width_in`) as one row of the page, its
    left edge at `left_in`: a narrow table beside a figure or another narrow table. `part`,
    `caption`: only those body rows, with or without the caption."""
    parts = table_rows(item, section, left_in, width_in, part)
    if parts[0].header is not None:
        parts = [parts[0].header, *parts]
    if not caption:
        parts = parts[:-1]
    tops, height = [], 0.0
    for part in parts:
        tops.append(height)
        height += part.height

    def draw(page: Figure, top: float) -> list[Stamp]:
        return [stamp for part, offset in zip(parts, tops) for stamp in part.draw(page, top + offset)]

    return Row(height, draw, section)


def column_widths(rows: list[list[str]], size: float, available: float = TEXT_WIDTH_IN * 72) -> list[float]:
    """Column widths in points: natural widths where they fit in `available` (default: the text
    width), else the widest columns share what the narrower ones leave (each at least 48 pt)."""
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


def _room_for_merged(widths: list[float], merged: list[str], size: float) -> list[float]:
    """Widths with the value columns widened evenly, up to the text width, where a merged
    cell's text is wider than the columns it spans."""
    if not merged or len(widths) < 2:
        return widths
    need = max(text_width(line, size) for cell in merged for line in cell.split("\n")) + 2 * CELL_PAD_PT + 1
    extra = min(need - sum(widths[1:]), TEXT_WIDTH_IN * 72 - sum(widths))
    if extra <= 0:
        return widths
    return [widths[0], *(width + extra / (len(widths) - 1) for width in widths[1:])]


def _verdict_color(text: str) -> str | None:
    return next((color for prefix, color in _VERDICT_COLORS if text.startswith(prefix)), None)


def _cells_row(cells: list[str], widths: list[float], right: list[bool], size: float,
               section: Section, table: TableItem, header: bool = False,
               left_in: float = MARGIN_IN) -> Row:
    # Free text (provenance: forty rows of paths and settings) sits closer to its cell's lines.
    pad = FREE_TEXT_PAD_PT if table.free_text else CELL_PAD_PT
    wrapped = [wrap(cell, width - 2 * CELL_PAD_PT, size, bold=header or index == 0)
               for index, (cell, width) in enumerate(zip(cells, widths))]
    height = (max(len(lines) for lines in wrapped) * line_in(size)
              + 2 * pad / 72)

    def draw(page: Figure, top: float) -> list[Stamp]:
        x = left_in
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
            page_text(page, text_x, top + pad / 72, "\n".join(lines), size,
                  ha="right" if align_right else "left",
                  fontweight="bold" if header or index == 0 else "normal",
                  color=color or "#1f2328")
            x += width_in
        return []

    return Row(height, draw, section, table=table, heading=False)


# A narrow table with no partner beside it and at least this many rows is set in two columns
# (first half left, second half right, the header over each, the caption under both) instead
# of filling half the width of a page.
SPLIT_ROWS = 12


def split_table_rows(item: TableItem, section: Section, lefts: tuple[float, float],
                     column_in: float, beside) -> list[Row] | None:
    """The table in two columns and its caption across the page, kept together; None where it
    has fewer than SPLIT_ROWS rows. `beside` puts blocks side by side (pdf.beside_row)."""
    count = len(item.frame)
    if count < SPLIT_ROWS:
        return None
    half = -(-count // 2)
    columns = beside([table_block(item, section, lefts[0], column_in, slice(0, half), caption=False),
                      table_block(item, section, lefts[1], column_in, slice(half, None), caption=False)])
    columns.keep_with_next = True
    return [columns, table_rows(item, section, part=slice(0, 0))[-1]]
