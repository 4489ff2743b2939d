"""Render the report sections as a PDF: A4 landscape pages that flow, two figures to a row
where they are narrow, tables drawn cell by cell.

Each figure is rendered on its own at the size of its slot (at least 12 cm wide; its fonts at
their own size, its tick labels thinned on the real extents) and stamped onto the page as
vector PDF, the same file `--figures` writes; titles, captions and tables are drawn on the
page by matplotlib with text measured in the report's font, so a line is known to fit its
cell or column. Sections follow one another on a page when there is room, which keeps a
report of two to four models to about fifteen pages: narrow items (a figure, a table that fits a
column) go two to a row, a long narrow table with no partner is set in two columns, and the
figures of a page are drawn shorter (within figures.MIN_SHRINK) where that lets the next row
join them rather than start a page a third full.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure
from pypdf import PdfReader, PdfWriter, Transformation

from probe.core.errors import printable
from probe.reports.sections.items import (FigureItem, Section, left_out_line, printable_texts, shown,
                                          shown_figures)
from probe.reports.measure import wrap
from probe.reports.parallel import map_forked
# The page, figures and tables live in this package's page.py, figures.py and tables.py;
# build.py and the tests import these names from here.
from probe.reports.pdf.figures import (FIGURE_METADATA, figure_row, figure_size, natural_size, prerendered,
                                       render_figure, render_formats)
from probe.reports.pdf.page import (CELL_PAD_PT, COLUMN_GAP_IN, COLUMN_WIDTH_IN, COVER_TITLE_SIZE,
                                    HEADING_SIZE, MARGIN_IN, NARROW_IN, PAGE_SIZE, ROW_GAP_IN, TABLE_SIZE,
                                    TEXT_SIZE, TEXT_WIDTH_IN, WIDOW_ROWS, Page, Row, Stamp, line_in,
                                    page_text)
from probe.reports.pdf.tables import (column_widths, natural_width, split_table_rows,  # noqa: F401
                                      table_block, table_rows)
from probe.reports.style import report_style


def _paragraph_rows(text: str, width_in: float, size: float, bold: bool = False) -> list[str]:
    return wrap(text, width_in * 72, size, bold)


def _heading_row(section: Section) -> Row:
    lead = [section.intro] + [f"Does not apply: {note}" for note in section.notes]
    lines = [line for text in lead if text
             for line in _paragraph_rows(text, TEXT_WIDTH_IN, TEXT_SIZE)]
    title_in = line_in(HEADING_SIZE) + 0.08
    height = title_in + line_in(TEXT_SIZE) * len(lines)

    def draw(page: Figure, top: float) -> list[Stamp]:
        page_text(page, MARGIN_IN, top, section.title, HEADING_SIZE, fontweight="bold", zorder=-1)
        if lines:
            page_text(page, MARGIN_IN, top + title_in, "\n".join(lines), TEXT_SIZE,
                  color="#333333", zorder=-1)
        return []

    return Row(height, draw, section, heading=True, keep_with_next=True)


def _section_rows(section: Section, naturals: dict[int, tuple[float, float]] | None = None) -> list[Row]:
    """The heading, then the items: one wide figure or table to a row; narrow ones (a figure of
    at most NARROW_IN, a table that fits a column whole) two to a row, side by side.
    naturals: id(figure item) -> its natural size (figures.natural_size), measured here if absent."""
    rows = [_heading_row(section)]
    run: list[tuple] = []     # consecutive narrow items: (item, natural size, column block)

    def flush() -> None:
        for group in _pairs([block for _, _, block in run]):
            items = [run[i] for i in group]
            if all(isinstance(item, FigureItem) for item, _, _ in items):
                rows.append(figure_row([(item, natural) for item, natural, _ in items], section))
            elif len(items) == 1:       # a narrow table alone: in two columns where it is long
                rows.extend(split_table_rows(items[0][0], section, _COLUMN_LEFTS, COLUMN_WIDTH_IN, beside_row)
                            or table_rows(items[0][0], section))
            else:
                rows.append(beside_row([_block(item, natural, section, left) for (item, natural, _), left
                                        in zip(items, _COLUMN_LEFTS)]))
        run.clear()

    for item in section.items:
        natural = None
        if isinstance(item, FigureItem):
            natural = (naturals or {}).get(id(item)) or natural_size(item)
        block = _block(item, natural, section, MARGIN_IN)
        if block is not None:
            run.append((item, natural, block))
            continue
        flush()
        if isinstance(item, FigureItem):
            rows.append(figure_row([(item, natural)], section))
        else:
            rows.extend(table_rows(item, section))
    flush()
    return rows


_COLUMN_LEFTS = (MARGIN_IN, MARGIN_IN + COLUMN_WIDTH_IN + COLUMN_GAP_IN)


def _block(item, natural, section: Section, left: float) -> Row | None:
    """The item drawn in a column starting at `left`, or None where it is too wide or tall for one."""
    if isinstance(item, FigureItem):
        return figure_row([(item, natural)], section, column_left=left) if natural[0] <= NARROW_IN else None
    if not len(item.frame) or natural_width(item) > COLUMN_WIDTH_IN:
        return None
    block = table_block(item, section, left, COLUMN_WIDTH_IN)
    return block if block.height <= _MAX_BLOCK_IN else None


def _pairs(blocks: list[Row]) -> list[tuple[int, ...]]:
    """Consecutive blocks grouped in ones and twos, in order, so that the pairs save the most
    height: a pair saves its shorter block's height (two short tables, not a short table and a
    long one that could go beside another long one)."""
    best: list[tuple[float, list[tuple[int, ...]]]] = [(0.0, [])]
    for i in range(len(blocks)):
        alone = (best[i][0], best[i][1] + [(i,)])
        if i >= 1:
            paired = (best[i - 1][0] + min(blocks[i - 1].height, blocks[i].height),
                      best[i - 1][1] + [(i - 1, i)])
            alone = max(alone, paired, key=lambda option: option[0])
        best.append(alone)
    return best[-1][1]


def beside_row(parts: list[Row]) -> Row:
    """Column blocks side by side, tops aligned: a figure beside a table, or two tables. A figure
    among them can be drawn shorter down to the height of the tallest table."""
    height = max(part.height for part in parts)
    least = max(part.min_height if part.shrink else part.height for part in parts)

    def draw(page: Figure, top: float) -> list[Stamp]:
        return [stamp for part in parts for stamp in part.draw(page, top)]

    def shrink(available: float) -> Row:
        return beside_row([part.shrink(max(available, least)) if part.shrink and part.height > available
                           else part for part in parts])

    can_shrink = any(part.shrink for part in parts) and least < height
    return Row(height, draw, parts[0].section, shrink=shrink if can_shrink else None,
               min_height=least if can_shrink else 0.0,
               figures=tuple(figure for part in parts for figure in part.figures))


# --- Pages ------------------------------------------------------------------------------

_CONTINUED_IN = line_in(HEADING_SIZE) + 0.12
_BODY_BOTTOM_IN = PAGE_SIZE[1] - MARGIN_IN
# A narrow table goes beside another item only where it fits a page under the continued-title.
_MAX_BLOCK_IN = PAGE_SIZE[1] - 2 * MARGIN_IN - _CONTINUED_IN - 0.1


def _cover_rows(sections: Sequence[Section], title: str, subtitle: str,
                generated_at: str) -> Row:
    title_lines = wrap(title, TEXT_WIDTH_IN * 72, COVER_TITLE_SIZE, bold=True)
    subtitle_lines = wrap(subtitle, TEXT_WIDTH_IN * 72, 11)
    contents = [f"{number}.  {section.title}"
                for number, section in enumerate(shown(sections), start=1)]
    left_out = [line for section in sections if section.omitted is not None
                for line in wrap(left_out_line(section), TEXT_WIDTH_IN * 72, TEXT_SIZE)]
    stamp = f"Report generated {generated_at} by probe reports from saved runs."
    columns = 2 if len(contents) > 6 else 1
    per_column = -(-len(contents) // columns)
    heights = [line_in(COVER_TITLE_SIZE) * len(title_lines) + 0.12,
               line_in(11) * len(subtitle_lines) + 0.15,
               line_in(12) + 0.05, line_in(10.5) * per_column + 0.08,
               line_in(TEXT_SIZE) * len(left_out) + (0.08 if left_out else 0),
               line_in(8.5) + 0.1]

    def draw(page: Figure, top: float) -> list[Stamp]:
        y = top
        page_text(page, MARGIN_IN, y, "\n".join(title_lines), COVER_TITLE_SIZE, fontweight="bold",
              zorder=-1)
        y += heights[0]
        page_text(page, MARGIN_IN, y, "\n".join(subtitle_lines), 11, color="#444444")
        y += heights[1]
        page_text(page, MARGIN_IN, y, "Contents", 12, fontweight="bold")
        y += heights[2]
        for column in range(columns):
            chunk = contents[column * per_column:(column + 1) * per_column]
            page_text(page, MARGIN_IN + column * (COLUMN_WIDTH_IN + COLUMN_GAP_IN), y,
                  "\n".join(chunk), 10.5)
        y += heights[3]
        if left_out:
            page_text(page, MARGIN_IN, y, "\n".join(left_out), TEXT_SIZE, color="#57606a")
            y += heights[4]
        page_text(page, MARGIN_IN, y, stamp, 8.5, color="#666666")
        return []

    return Row(sum(heights), draw, sections[0], heading=True)


def _chain_height(rows: list[Row], index: int) -> float:
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


def _rows_after_in_table(rows: list[Row], index: int) -> int:
    """How many body rows of the same table follow rows[index]."""
    count, table = 0, rows[index].table
    while index + 1 < len(rows) and rows[index + 1].table is table and table is not None:
        index, count = index + 1, count + 1
    return count


def _only_the_cover(pages: list[Page]) -> bool:
    return len(pages) == 1 and len(pages[0].rows) == 1


def _paginate(rows: list[Row], first_title: str) -> list[Page]:
    """Rows onto pages. A table stays whole where it fits on a page; it breaks (header repeated,
    at least WIDOW_ROWS rows carried to the caption's page) only when it is taller than a page,
    or when its heading and it together are: then it starts under its heading instead of leaving
    the heading alone at the foot of a half-empty page; and after the cover, which it does not
    leave alone on page 1."""
    pages: list[Page] = []
    y = _BODY_BOTTOM_IN  # forces a first page
    last_table = None
    rows = list(rows)
    capacity = _BODY_BOTTOM_IN - MARGIN_IN - _CONTINUED_IN - 0.5
    breaking: set[int] = set()         # id() of the tables that break where the page ends
    for index in range(len(rows)):
        row = rows[index]
        extra = _chain_height(rows, index)
        following = rows[index + 1] if index + 1 < len(rows) else None
        if row.height + extra > capacity:
            extra = 0.0  # too tall to keep together on any page: let it break here
            if following is not None and following.table is not None and (
                    row.heading or row.table is following.table):
                breaking.add(id(following.table))
                if row.heading:    # a heading goes with the header and the first rows at least
                    start = rows[index + 1:index + 1 + WIDOW_ROWS]
                    extra = sum(r.height for r in start) + (following.header.height if following.header else 0)
            elif row.heading and following is not None:
                # A heading before a figure too tall to share the page: it starts a page, with
                # the figure drawn under it, rather than stay alone at the foot of this one.
                extra = max(0.0, capacity - row.height - 0.01)
        elif (_only_the_cover(pages) and row.heading and following is not None
              and following.table is not None and row.height + extra > _BODY_BOTTOM_IN - y):
            # The first section after the cover: its table starts under the cover and breaks
            # where the page ends (a page of contents alone was half empty).
            breaking.add(id(following.table))
            start = rows[index + 1:index + 1 + WIDOW_ROWS]
            extra = sum(r.height for r in start) + (following.header.height if following.header else 0)
        if (row.table is not None and id(row.table) in breaking
                and _rows_after_in_table(rows, index) >= WIDOW_ROWS):
            extra = 0.0  # a breaking table: rows go where there is room, the last ones together
        needs_header = row.table is not None and row.header is not None and (
            row.table is not last_table)
        header_in = row.header.height if needs_header else 0.0
        room = _BODY_BOTTOM_IN - y - header_in - extra
        need = row.min_height if row.shrink is not None else row.height
        if (need > room and pages and pages[-1].rows
                and (row.table is None or (row.table is not last_table and id(row.table) not in breaking))):
            # The figures above drawn shorter, where that makes room for this row (and its chain).
            freed = _shrink_page(pages[-1], need - room + _SLACK_IN)
            y, room = y - freed, room + freed
        whole = row
        if row.height > room and row.shrink is not None and row.min_height <= room:
            row = row.shrink(room)
        if row.height > room and (not pages or pages[-1].rows):
            row = whole
            title = (first_title if not pages else row.section.title if row.heading
                     else f"{row.section.title} (continued)")
            pages.append(Page(title))
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


_SLACK_IN = 0.01     # freed beyond the exact need, so that rounding cannot undo the fit


def _shrink_page(page: Page, deficit: float) -> float:
    """Draw the page's shrinkable figure rows shorter (the last first, none below its least
    height) to free `deficit` inches for the row that comes next; the rows below move up. Return
    the height freed: `deficit`, or 0 where the figures cannot give that much (nothing changes)."""
    slack = [(index, row.height - row.min_height) for index, (row, _) in enumerate(page.rows)
             if row.shrink is not None and not row.heading]
    if sum(give for _, give in slack) < deficit:
        return 0.0
    freed = 0.0
    for index, give in reversed(slack):
        if freed >= deficit:
            break
        row, top = page.rows[index]
        shorter = row.shrink(row.height - min(give, deficit - freed))
        moved = row.height - shorter.height
        page.rows[index] = (shorter, top)
        page.rows[index + 1:] = [(later, later_top - moved) for later, later_top in page.rows[index + 1:]]
        freed += moved
    return freed


def write_pdf(sections: Sequence[Section], path: Path, *, title: str, subtitle: str,
              generated_at: str) -> list[str]:
    """Write the PDF to `path`; return the page titles in page order."""
    title, subtitle = printable(title), printable(subtitle)       # a model name's ESC, drawn as \x1b
    with report_style():
        rows = [_cover_rows(sections, title, subtitle, generated_at)]
        # Every figure is drawn twice, for its size and then at the size of its slot: both
        # rounds in parallel (reports/parallel.py), the pages then stamped in order.
        figures = shown_figures(sections)
        naturals = dict(zip(map(id, figures), map_forked(natural_size, figures)))
        for section in shown(sections):
            rows.extend(_section_rows(section, naturals))
        pages = _paginate(rows, title)
        base = io.BytesIO()
        stamps: list[list[Stamp]] = []
        placed = [figure for page in pages for row, _ in page.rows for figure in row.figures]
        with prerendered(placed), PdfPages(base, metadata=FIGURE_METADATA) as pdf:
            for page in pages:
                figure = Figure(figsize=PAGE_SIZE)
                first_row, first_top = page.rows[0]
                if not first_row.heading:
                    page_text(figure, MARGIN_IN, MARGIN_IN, page.title, HEADING_SIZE,
                          fontweight="bold", zorder=-1)
                page_stamps = []
                for row, top in page.rows:
                    page_stamps.extend(row.draw(figure, top))
                stamps.append(page_stamps)
                pdf.savefig(printable_texts(figure))
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
