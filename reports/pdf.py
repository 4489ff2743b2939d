"""Render the report sections as a PDF: A4 landscape pages that flow, two figures to a row
where they are narrow, tables drawn cell by cell.

Each figure is rendered on its own at the size of its slot (at least 12 cm wide; its fonts at
their own size, its tick labels thinned on the real extents) and stamped onto the page as
vector PDF, the same file `--figures` writes; titles, captions and tables are drawn on the
page by matplotlib with text measured in the report's font, so a line is known to fit its
cell or column. Sections follow one another on a page when there is room, which keeps a
report of two to four models to about fifteen pages.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from pypdf import PdfReader, PdfWriter, Transformation

from reports.claims import BELOW_THRESHOLD, CONSISTENT, NOT_CONSISTENT, NOT_TESTABLE
from reports.measure import text_width, wrap
from reports.sections import FigureItem, Section, TableItem, left_out_line, shown
from reports.style import freeze_layout, report_style
from reports.tables import numeric_columns

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
SHORT_TABLE_ROWS = 10
CELL_PAD_PT = 3.0
_VERDICT_COLORS = ((CONSISTENT, "#1a7f37"), (NOT_CONSISTENT, "#b42318"),
                   (BELOW_THRESHOLD, "#9a6700"), (NOT_TESTABLE, "#57606a"))
# Saved without dates or producer: the same runs give the same bytes.
_FIGURE_METADATA = {"Creator": None, "Producer": None, "CreationDate": None}


def _line_in(size: float) -> float:
    return size * 1.32 / 72


# --- Figures at their slot's size -------------------------------------------------------

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
    """The figure alone as PDF or SVG bytes, at `size` (default: `figure_size` of its own)."""
    return render_formats(item, size, (fmt,))[fmt]


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
            metadata = _FIGURE_METADATA if fmt == "pdf" else {"Date": None}
            figure.savefig(buffer, format=fmt, metadata=metadata)
            saved[fmt] = buffer.getvalue()
    return saved


# --- Rows: what flows down the pages ----------------------------------------------------

@dataclass
class _Stamp:
    """A rendered figure to merge onto a page, lower-left corner in inches from the page's."""
    pdf: bytes
    x_in: float
    y_in: float


@dataclass
class _Row:
    height: float
    draw: Callable[[Figure, float], list[_Stamp]]  # (page, top in inches from the top)
    section: Section
    heading: bool = False  # a section's title and lead: kept with the row after it
    table: object = None  # rows of one table repeat its header on a new page
    header: "_Row | None" = None
    keep_with_next: bool = False
    # A figure row can be drawn shorter to use the rest of a page: shrink(height) gives it.
    shrink: "Callable[[float], _Row] | None" = None
    min_height: float = 0.0


@dataclass
class _Page:
    title: str
    rows: list[tuple[_Row, float]] = field(default_factory=list)


def _text(page: Figure, x_in: float, top_in: float, text: str, size: float, **kwargs) -> None:
    page.text(x_in / PAGE_SIZE[0], 1 - top_in / PAGE_SIZE[1], text, fontsize=size, va="top",
              linespacing=1.32 / 1.2, parse_math=False, **kwargs)


def _paragraph_rows(text: str, width_in: float, size: float, bold: bool = False) -> list[str]:
    return wrap(text, width_in * 72, size, bold)


def _heading_row(section: Section) -> _Row:
    lead = [section.intro] + [f"Does not apply: {note}" for note in section.notes]
    lines = [line for text in lead if text
             for line in _paragraph_rows(text, TEXT_WIDTH_IN, TEXT_SIZE)]
    title_in = _line_in(HEADING_SIZE) + 0.08
    height = title_in + _line_in(TEXT_SIZE) * len(lines)

    def draw(page: Figure, top: float) -> list[_Stamp]:
        _text(page, MARGIN_IN, top, section.title, HEADING_SIZE, fontweight="bold", zorder=-1)
        if lines:
            _text(page, MARGIN_IN, top + title_in, "\n".join(lines), TEXT_SIZE,
                  color="#333333", zorder=-1)
        return []

    return _Row(height, draw, section, heading=True, keep_with_next=True)


def _caption_lines(label: str, caption: str, width_in: float) -> list[str]:
    """Caption lines; the first starts with the bold label, drawn separately."""
    indent = text_width(label + ". ", CAPTION_SIZE, bold=True)
    first = wrap(caption, width_in * 72 - indent, CAPTION_SIZE)
    rest = wrap(" ".join(first[1:]), width_in * 72, CAPTION_SIZE) if len(first) > 1 else []
    return [first[0], *rest]


def _draw_caption(page: Figure, x_in: float, top: float, label: str, lines: list[str]) -> None:
    _text(page, x_in, top, label + ".", CAPTION_SIZE, fontweight="bold", color="#222222")
    indent_in = text_width(label + ". ", CAPTION_SIZE, bold=True) / 72
    _text(page, x_in + indent_in, top, lines[0], CAPTION_SIZE, color="#444444")
    if len(lines) > 1:
        _text(page, x_in, top + _line_in(CAPTION_SIZE), "\n".join(lines[1:]), CAPTION_SIZE,
              color="#444444")


# A figure drawn shorter than its own aspect, to fill a page, keeps at least this share of
# its height: wide figures (one row of panels) can give more than tall, stacked ones, whose
# panels and labels would run into each other.
MIN_SHRINK = {"wide": 0.6, "tall": 0.85}
WIDE_ASPECT = 1.5


def _min_shrink(naturals: Sequence[tuple[float, float]]) -> float:
    wide = all(width / height >= WIDE_ASPECT for width, height in naturals)
    return MIN_SHRINK["wide" if wide else "tall"]


def _figure_row(items: list[tuple[FigureItem, tuple[float, float]]], section: Section,
                scale: float = 1.0) -> _Row:
    """One figure (centred) or two narrow ones side by side, each with its caption below;
    `scale` < 1 draws the figures that much shorter (the same width)."""
    slots = []
    for item, natural in items:
        width, tall = figure_size(natural, column=len(items) > 1 or None)
        size = (width, tall * scale)
        caption_width = size[0] if len(items) > 1 else max(size[0], COLUMN_WIDTH_IN)
        slots.append((item, size, _caption_lines(item.label, item.caption, caption_width),
                      caption_width))
    height = max(size[1] + 0.1 + _line_in(CAPTION_SIZE) * len(lines)
                 for _, size, lines, _ in slots)
    if len(slots) == 1:
        lefts = [MARGIN_IN + (TEXT_WIDTH_IN - max(slots[0][1][0], slots[0][3])) / 2]
    else:
        lefts = [MARGIN_IN, MARGIN_IN + COLUMN_WIDTH_IN + COLUMN_GAP_IN]

    def draw(page: Figure, top: float) -> list[_Stamp]:
        stamps = []
        for left, (item, size, lines, caption_width) in zip(lefts, slots):
            figure_left = left + (caption_width - size[0]) / 2
            stamps.append(_Stamp(render_figure(item, size), figure_left,
                                 PAGE_SIZE[1] - top - size[1]))
            _draw_caption(page, left, top + size[1] + 0.1, item.label, lines)
        return stamps

    plots = max(size[1] for _, size, _, _ in slots)
    least = _min_shrink([natural for _, natural in items])

    def shrink(available: float) -> _Row:
        factor = max(least, min(1.0, 1 - (height - available) / plots))
        return _figure_row(items, section, scale * factor)

    return _Row(height, draw, section, shrink=shrink if scale == 1.0 else None,
                min_height=height - plots * (1 - least))


def _table_rows(item: TableItem, section: Section) -> list[_Row]:
    """A header row, one row per body row, and the caption; the header repeats on new pages."""
    columns = [item.index_label, *map(str, item.frame.columns)]
    body = [[str(label), *map(str, values)]
            for label, values in zip(item.frame.index, item.frame.itertuples(index=False))]
    size = TABLE_SIZE - (1.0 if item.free_text else 0.0)
    widths = _column_widths([columns, *body], size)
    right = [False, *numeric_columns(item.frame)]
    header = _cells_row(columns, widths, right, size, section, item, header=True)
    rows = [_cells_row(cells, widths, right, size, section, item) for cells in body]
    for row in rows:
        row.header = header
    lines = _caption_lines(item.label, item.caption, TEXT_WIDTH_IN)

    def draw_caption(page: Figure, top: float) -> list[_Stamp]:
        _draw_caption(page, MARGIN_IN, top + 0.06, item.label, lines)
        return []

    # A short table stays in one piece; a long one keeps at least its last row with the
    # caption.
    for row in rows if len(rows) <= SHORT_TABLE_ROWS else rows[-1:]:
        row.keep_with_next = True
    caption = _Row(0.06 + _line_in(CAPTION_SIZE) * len(lines), draw_caption, section)
    return [*rows, caption] if rows else [header, caption]


def _column_widths(rows: list[list[str]], size: float) -> list[float]:
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
               section: Section, table: TableItem, header: bool = False) -> _Row:
    wrapped = [wrap(cell, width - 2 * CELL_PAD_PT, size, bold=header or index == 0)
               for index, (cell, width) in enumerate(zip(cells, widths))]
    height = (max(len(lines) for lines in wrapped) * _line_in(size)
              + 2 * CELL_PAD_PT / 72)

    def draw(page: Figure, top: float) -> list[_Stamp]:
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
            _text(page, text_x, top + CELL_PAD_PT / 72, "\n".join(lines), size,
                  ha="right" if align_right else "left",
                  fontweight="bold" if header or index == 0 else "normal",
                  color=color or "#1f2328")
            x += width_in
        return []

    return _Row(height, draw, section, table=table, heading=False)


def _section_rows(section: Section) -> list[_Row]:
    rows = [_heading_row(section)]
    pending: list[tuple[FigureItem, tuple[float, float]]] = []

    def flush() -> None:
        while pending:
            pair = pending[:2] if len(pending) >= 2 else pending[:1]
            del pending[:len(pair)]
            rows.append(_figure_row(pair, section))

    for item in section.items:
        if isinstance(item, FigureItem):
            natural = natural_size(item)
            if natural[0] <= NARROW_IN:
                pending.append((item, natural))
                continue
            flush()
            rows.append(_figure_row([(item, natural)], section))
        else:
            flush()
            rows.extend(_table_rows(item, section))
    flush()
    return rows


# --- Pages ------------------------------------------------------------------------------

_CONTINUED_IN = _line_in(HEADING_SIZE) + 0.12
_BODY_BOTTOM_IN = PAGE_SIZE[1] - MARGIN_IN


def _cover_rows(sections: Sequence[Section], title: str, subtitle: str,
                generated_at: str) -> _Row:
    title_lines = wrap(title, TEXT_WIDTH_IN * 72, COVER_TITLE_SIZE, bold=True)
    subtitle_lines = wrap(subtitle, TEXT_WIDTH_IN * 72, 11)
    contents = [f"{number}.  {section.title}"
                for number, section in enumerate(shown(sections), start=1)]
    left_out = [line for section in sections if section.omitted is not None
                for line in wrap(left_out_line(section), TEXT_WIDTH_IN * 72, TEXT_SIZE)]
    stamp = f"Report generated {generated_at} by probe reports from saved runs."
    columns = 2 if len(contents) > 6 else 1
    per_column = -(-len(contents) // columns)
    heights = [_line_in(COVER_TITLE_SIZE) * len(title_lines) + 0.12,
               _line_in(11) * len(subtitle_lines) + 0.15,
               _line_in(12) + 0.05, _line_in(10.5) * per_column + 0.08,
               _line_in(TEXT_SIZE) * len(left_out) + (0.08 if left_out else 0),
               _line_in(8.5) + 0.1]

    def draw(page: Figure, top: float) -> list[_Stamp]:
        y = top
        _text(page, MARGIN_IN, y, "\n".join(title_lines), COVER_TITLE_SIZE, fontweight="bold",
              zorder=-1)
        y += heights[0]
        _text(page, MARGIN_IN, y, "\n".join(subtitle_lines), 11, color="#444444")
        y += heights[1]
        _text(page, MARGIN_IN, y, "Contents", 12, fontweight="bold")
        y += heights[2]
        for column in range(columns):
            chunk = contents[column * per_column:(column + 1) * per_column]
            _text(page, MARGIN_IN + column * (COLUMN_WIDTH_IN + COLUMN_GAP_IN), y,
                  "\n".join(chunk), 10.5)
        y += heights[3]
        if left_out:
            _text(page, MARGIN_IN, y, "\n".join(left_out), TEXT_SIZE, color="#57606a")
            y += heights[4]
        _text(page, MARGIN_IN, y, stamp, 8.5, color="#666666")
        return []

    return _Row(sum(heights), draw, sections[0], heading=True)


def _chain_height(rows: list[_Row], index: int) -> float:
    """Height of the rows after `index` that must stay on its page (keep_with_next), the
    shortest a shrinkable figure can be drawn."""
    total = 0.0
    while rows[index].keep_with_next and index + 1 < len(rows):
        same_table = rows[index].table is not None and rows[index + 1].table is rows[index].table
        index += 1
        following = rows[index]
        total += ((following.min_height if following.shrink else following.height)
                  + (0.0 if same_table else ROW_GAP_IN))
    return total


def _paginate(rows: list[_Row], first_title: str) -> list[_Page]:
    pages: list[_Page] = []
    y = _BODY_BOTTOM_IN  # forces a first page
    last_table = None
    rows = list(rows)
    for index in range(len(rows)):
        row = rows[index]
        extra = _chain_height(rows, index)
        if row.height + extra > _BODY_BOTTOM_IN - MARGIN_IN - _CONTINUED_IN - 0.5:
            extra = 0.0  # too tall to keep together on any page: let it break here
        needs_header = row.table is not None and row.header is not None and (
            row.table is not last_table)
        header_in = row.header.height if needs_header else 0.0
        room = _BODY_BOTTOM_IN - y - header_in - extra
        whole = row
        if row.height > room and row.shrink is not None and row.min_height <= room:
            row = row.shrink(room)
        if row.height > room and (not pages or pages[-1].rows):
            row = whole
            title = (first_title if not pages else row.section.title if row.heading
                     else f"{row.section.title} (continued)")
            pages.append(_Page(title))
            y = MARGIN_IN if row.heading else MARGIN_IN + _CONTINUED_IN
            last_table = None
            needs_header = row.table is not None and row.header is not None
        if needs_header:
            pages[-1].rows.append((row.header, y))
            y += row.header.height
        pages[-1].rows.append((row, y))
        y += row.height
        last_table = row.table
        next_row = rows[index + 1] if index + 1 < len(rows) else None
        if not (row.table is not None and next_row is not None and next_row.table is row.table):
            y += ROW_GAP_IN
    return pages


def write_pdf(sections: Sequence[Section], path: Path, *, title: str, subtitle: str,
              generated_at: str) -> list[str]:
    """Write the PDF to `path`; return the page titles in page order."""
    with report_style():
        rows = [_cover_rows(sections, title, subtitle, generated_at)]
        for section in shown(sections):
            rows.extend(_section_rows(section))
        pages = _paginate(rows, title)
        base = io.BytesIO()
        stamps: list[list[_Stamp]] = []
        with PdfPages(base, metadata=_FIGURE_METADATA) as pdf:
            for page in pages:
                figure = Figure(figsize=PAGE_SIZE)
                first_row, first_top = page.rows[0]
                if not first_row.heading:
                    _text(figure, MARGIN_IN, MARGIN_IN, page.title, HEADING_SIZE,
                          fontweight="bold", zorder=-1)
                page_stamps = []
                for row, top in page.rows:
                    page_stamps.extend(row.draw(figure, top))
                stamps.append(page_stamps)
                pdf.savefig(figure)
    writer = PdfWriter()
    for page, page_stamps in zip(PdfReader(base).pages, stamps):
        added = writer.add_page(page)
        for stamp in page_stamps:
            added.merge_transformed_page(PdfReader(io.BytesIO(stamp.pdf)).pages[0],
                                         Transformation().translate(stamp.x_in * 72,
                                                                    stamp.y_in * 72))
    writer.add_metadata({"/Title": title, "/Creator": "probe reports",
                         "/Producer": "probe reports"})
    with open(path, "wb") as handle:
        writer.write(handle)
    return [page.title for page in pages]
