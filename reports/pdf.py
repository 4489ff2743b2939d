"""Render the report sections as a PDF: a cover, then one page per figure or table.

Every page is an A4-landscape matplotlib figure with a title at the top. A figure page is the
plot's own figure grown to the page (so it stays vector), its content fitted into a centred
rectangle with the caption below. Tables are drawn with matplotlib's table artist and split
over pages when they are long.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure
from matplotlib.table import Table

from reports.sections import FigureItem, Section, TableItem
from reports.style import freeze_layout, report_style
from reports.tables import numeric_columns
from reports.text import plain

PAGE_SIZE = (11.69, 8.27)  # A4 landscape, inches
TITLE_SIZE = 15
TEXT_SIZE = 9
TABLE_SIZE = 8
_MARGIN_IN = 0.5
_TEXT_WIDTH_IN = PAGE_SIZE[0] - 2 * _MARGIN_IN
_LINE_IN = TEXT_SIZE * 1.45 / 72
_TABLE_LINE_IN = TABLE_SIZE * 1.45 / 72
_CHAR_IN = TABLE_SIZE * 0.6 / 72  # average DejaVu Sans advance, generous
_MAX_UPSCALE = 1.4


def write_pdf(sections: Sequence[Section], path: Path, *, title: str, subtitle: str,
              generated_at: str) -> list[str]:
    """Write the PDF to `path`; return the page titles in page order."""
    titles: list[str] = []
    # Fixed metadata without dates: the same runs give the same bytes.
    metadata = {"Title": title, "Creator": "probe reports", "Author": None,
                "CreationDate": None, "ModDate": None}
    with report_style(), PdfPages(path, metadata=metadata) as pdf:
        for page_title, figure in _pages(sections, title, subtitle, generated_at):
            titles.append(page_title)
            pdf.savefig(figure)
    return titles


def _pages(sections: Sequence[Section], title: str, subtitle: str, generated_at: str):
    yield title, _cover(sections, title, subtitle, generated_at)
    for section in sections:
        lead = [section.intro] + [f"Does not apply: {note}" for note in section.notes]
        for index, item in enumerate(section.items):
            page_lead = lead if index == 0 else []
            heading = (section.title if item.title == section.title
                       else f"{section.title} — {item.title}")
            if isinstance(item, FigureItem):
                yield heading, _figure_page(heading, page_lead, item)
            else:
                yield from _table_pages(heading, page_lead, item)


def _cover(sections: Sequence[Section], title: str, subtitle: str, generated_at: str) -> Figure:
    figure = Figure(figsize=PAGE_SIZE)
    figure.text(0.06, 0.86, plain(title), fontsize=24, fontweight="bold", va="top")
    figure.text(0.06, 0.78, plain(_wrap(subtitle, 12)), fontsize=12, va="top",
                color="#444444")
    contents = "\n".join(f"{number}.  {section.title}"
                         for number, section in enumerate(sections, start=1))
    figure.text(0.06, 0.66, "Contents", fontsize=13, fontweight="bold", va="top")
    figure.text(0.06, 0.61, plain(contents), fontsize=11, va="top", linespacing=1.7)
    figure.text(0.06, 0.08, f"Report generated {generated_at} by probe reports from saved runs.",
                fontsize=9, color="#666666")
    return figure


def _lead_text(lead: Sequence[str]) -> str:
    return "\n".join(_wrap(line, TEXT_SIZE) for line in lead)


def _body_height(lead: Sequence[str]) -> float:
    """Inches left for the body of a page under its title and this lead text."""
    lead_text = _lead_text(lead)
    top_in = 0.75 + _LINE_IN * (lead_text.count("\n") + 1 if lead_text else 0)
    return PAGE_SIZE[1] - top_in - _MARGIN_IN


def _page(figure: Figure, title: str, lead: Sequence[str]) -> float:
    """Write the title and lead text (intro, notes) at the top of a page-sized figure;
    return the height in inches of the body left below them (it ends one margin above the
    page's foot)."""
    lead_text = _lead_text(lead)
    x = _MARGIN_IN / PAGE_SIZE[0]
    # zorder below the axes: drawn first, so the title also comes first in the PDF's text
    # (what a screen reader or a text search sees).
    figure.text(x, 1 - 0.3 / PAGE_SIZE[1], plain(title), fontsize=TITLE_SIZE,
                fontweight="bold", va="top", zorder=-1)
    if lead_text:
        figure.text(x, 1 - 0.72 / PAGE_SIZE[1], plain(lead_text), fontsize=TEXT_SIZE,
                    va="top", color="#333333", linespacing=1.3, zorder=-1)
    return _body_height(lead)


def _figure_page(title: str, lead: Sequence[str], item: FigureItem) -> Figure:
    """The figure, grown to the page, its content kept at its own aspect ratio in a centred
    rectangle with the caption right below it.

    A line plot stretched over a whole landscape page reads badly; scaling the natural size
    (up to a point) keeps its proportions and its text size. The plot's own constrained layout
    fills that rectangle (its `rect`), so no subfigures are needed: nested subfigures make
    the layout solver's last digits vary from run to run, and the PDF bytes with them.
    """
    figure = item.draw()
    natural = figure.get_size_inches()
    figure.set_size_inches(PAGE_SIZE)
    height_in = _page(figure, title, lead)
    caption = _wrap(f"Figure. {item.caption}", TEXT_SIZE)
    caption_in = 0.2 + _LINE_IN * (caption.count("\n") + 1)
    scale = min(PAGE_SIZE[0] / natural[0], (height_in - caption_in) / natural[1],
                _MAX_UPSCALE)
    plot_w, plot_h = natural[0] * scale, natural[1] * scale
    left_in = (PAGE_SIZE[0] - plot_w) / 2
    bottom_in = _MARGIN_IN + height_in - plot_h  # the body's top edge minus the plot
    figure.get_layout_engine().set(rect=(left_in / PAGE_SIZE[0], bottom_in / PAGE_SIZE[1],
                                         plot_w / PAGE_SIZE[0], plot_h / PAGE_SIZE[1]))
    figure.text(_MARGIN_IN / PAGE_SIZE[0], (bottom_in - 0.15) / PAGE_SIZE[1], plain(caption),
                va="top", fontsize=TEXT_SIZE, color="#444444", linespacing=1.3)
    return freeze_layout(figure)


def _table_pages(title: str, lead: Sequence[str], item: TableItem):
    """One page per chunk of rows that fits; later pages are titled "(continued)"."""
    cells = _wrapped_cells(item.frame, item.index_label)
    right_aligned = [False, *numeric_columns(item.frame)]  # numbers align right
    caption = _wrap(f"Table. {item.caption}", TEXT_SIZE)
    caption_in = 0.3 + _LINE_IN * (caption.count("\n") + 1)
    first_in = _body_height(lead) - caption_in
    chunks = _row_chunks(cells, first_in, _body_height([]) - caption_in)
    for number, rows in enumerate(chunks):
        page_title = title if number == 0 else f"{title} (continued)"
        last = number == len(chunks) - 1
        figure = Figure(figsize=PAGE_SIZE)  # no layout engine: the table is placed by hand
        body_in = _page(figure, page_title, lead if number == 0 else [])
        _draw_table(figure, cells[0], rows, caption if last else "", body_in, right_aligned)
        yield page_title, figure


def _wrapped_cells(frame: pd.DataFrame, index_label: str) -> list[list[str]]:
    """Header row and body rows as wrapped strings, columns sized to share the page width."""
    columns = [index_label, *map(str, frame.columns)]
    rows = [[str(label), *map(str, values)]
            for label, values in zip(frame.index, frame.itertuples(index=False))]
    chars = int(_TEXT_WIDTH_IN / _CHAR_IN) - 2 * len(columns)
    natural = [max(len(row[i]) for row in [columns, *rows]) for i in range(len(columns))]
    widths = _share_width(natural, chars)

    def wrap(text: str, width: int) -> str:
        return plain("\n".join(textwrap.wrap(text, width) or [""]))

    return [[wrap(cell, width) for cell, width in zip(row, widths)] for row in [columns, *rows]]


def _share_width(natural: list[int], total: int) -> list[int]:
    """Column widths in characters: natural widths if they fit, else shrink the widest ones."""
    widths = [max(4, n) for n in natural]
    while sum(widths) > total and max(widths) > 12:
        widest = widths.index(max(widths))
        widths[widest] -= 1
    return widths


def _row_chunks(cells: list[list[str]], first_in: float,
                later_in: float) -> list[list[list[str]]]:
    """Split the body rows into pages of the given heights; each page repeats the header."""
    chunks: list[list[list[str]]] = [[]]
    used, available = 0.0, first_in - _row_height(cells[0])
    for row in cells[1:]:
        if chunks[-1] and used + _row_height(row) > available:
            chunks.append([])
            used, available = 0.0, later_in - _row_height(cells[0])
        chunks[-1].append(row)
        used += _row_height(row)
    return chunks


def _row_height(row: list[str]) -> float:
    return _TABLE_LINE_IN * (_lines(row) + 0.4)


def _lines(row: list[str]) -> int:
    return max(cell.count("\n") + 1 for cell in row)


def _draw_table(figure: Figure, header: list[str], rows: list[list[str]], caption: str,
                height_in: float, right_aligned: list[bool]) -> None:
    """Draw the rows as a table at the top of the body, with the caption right below it."""
    ax = figure.add_axes((_MARGIN_IN / PAGE_SIZE[0], _MARGIN_IN / PAGE_SIZE[1],
                          _TEXT_WIDTH_IN / PAGE_SIZE[0], height_in / PAGE_SIZE[1]))
    ax.set_axis_off()
    all_rows = [header, *rows]
    chars = [max(len(line) for row in all_rows for line in row[i].split("\n")) + 2
             for i in range(len(header))]
    scale = 1.0 / max(sum(chars) * _CHAR_IN / _TEXT_WIDTH_IN, 1.0)
    widths = [c * _CHAR_IN / _TEXT_WIDTH_IN * scale for c in chars]
    table = Table(ax, loc="upper left")
    for r, row in enumerate(all_rows):
        height = _row_height(row) / height_in
        for c, text in enumerate(row):
            align = "right" if right_aligned[c] else "left"
            cell = table.add_cell(r, c, widths[c], height, text=text, loc=align,
                                  edgecolor="#cccccc",
                                  facecolor="#f0f0f0" if r == 0 else "white")
            cell.set_linewidth(0.5)
            if r == 0 or c == 0:
                cell.set_text_props(fontweight="bold")
    table.auto_set_font_size(False)
    table.set_fontsize(TABLE_SIZE)
    ax.add_table(table)
    if caption:
        used = sum(_row_height(row) for row in all_rows) / height_in
        ax.text(0, 1 - used - 0.3 / height_in, plain(caption), va="top", fontsize=TEXT_SIZE,
                color="#444444", linespacing=1.3, transform=ax.transAxes)


def _wrap(text: str, fontsize: float) -> str:
    width = int(_TEXT_WIDTH_IN * 72 / (fontsize * 0.5))
    return "\n".join(textwrap.wrap(text, width))
