"""reports.pdf (with reports/pdf/page.py, reports/pdf/figures.py, reports/pdf/tables.py): numbered figures and tables
that fit their slots, few pages, stable bytes."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pypdf import PdfReader

from probe import reports
from probe.reports import pdf as report_pdf
from probe.reports.sections import FigureItem, Section, TableItem, build_sections, shown

FIRST_PAGE_TITLE = "Gated attention report: baseline vs headwise vs hybrid"
CM = 72 / 2.54  # points per centimetre


@pytest.fixture(scope="module")
def pdf(built_report) -> PdfReader:
    return PdfReader(built_report["pdf"])


@pytest.fixture(scope="module")
def page_texts(pdf) -> list[str]:
    return [page.extract_text() for page in pdf.pages]


@pytest.fixture(scope="module")
def sections(all_runs) -> list[Section]:
    return build_sections(all_runs)


def items_of(sections, kind):
    return [item for section in shown(sections) for item in section.items
            if isinstance(item, kind)]


def test_every_page_opens_with_its_title(page_texts, sections):
    titles = [text.splitlines()[0] for text in page_texts]
    assert titles[0] == FIRST_PAGE_TITLE
    allowed = {s.title for s in shown(sections)} | {f"{s.title} (continued)"
                                                     for s in shown(sections)}
    assert set(titles[1:]) <= allowed, titles
    # Every shown section's heading is somewhere, in order.
    text = "\n".join(page_texts)
    positions = [text.index(section.title) for section in shown(sections)]
    assert positions == sorted(positions)


def test_three_models_fit_in_sixteen_pages(pdf):
    # 16 since tables that fit on a page are no longer split to fill the one before (issue 25).
    assert len(pdf.pages) <= 16


def test_pages_are_a4_landscape(pdf):
    for page in pdf.pages:
        width, height = float(page.mediabox.width), float(page.mediabox.height)
        assert (round(width), round(height)) == (842, 595)


def test_metadata_is_fixed_and_dateless(pdf):
    metadata = pdf.metadata
    assert metadata["/Title"] == FIRST_PAGE_TITLE
    assert metadata["/Creator"] == "probe reports"
    assert "/CreationDate" not in metadata and "/ModDate" not in metadata


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_figures_and_tables_are_numbered_with_their_captions(page_texts, sections):
    """Figure 1..n and Table 1..m in reading order, each followed by its caption, in the PDF
    as in the HTML (the same numbers: both come from build_sections)."""
    text = _squash("\n".join(page_texts))
    for kind, word in ((FigureItem, "Figure"), (TableItem, "Table")):
        items = items_of(sections, kind)
        assert [item.number for item in items] == list(range(1, len(items) + 1))
        where = []
        for item in items:
            needle = _squash(f"{word} {item.number}. {item.caption[:60]}")
            assert needle in text, needle
            where.append(text.index(needle))
        assert where == sorted(where)


def test_html_numbers_match(built_report, sections):
    html = built_report["html"].read_text(encoding="utf-8")
    for item in items_of(sections, FigureItem) + items_of(sections, TableItem):
        assert f"<strong>{item.label}.</strong>" in html


def test_pages_carry_captions_notes_and_tables(page_texts):
    assert "2026-11-02T08:30:00Z" in page_texts[0]
    text = "\n".join(page_texts)
    assert "no gate" in text and "1053" in text and "0.467" in text
    assert "Does not apply: baseline has no attention-output gate" in text
    assert "hatched: linear attention" in text
    assert "Does not apply: headwise has no training log" in text
    assert "Δ gate = 0" in text and "+2.500" in text
    assert "headwise has no intervention results" in text
    assert "dollar $" in text
    for field in ("checkpoint", "BOS policy", "position 0 holds", "versions", "command line"):
        assert field in text, field


def test_same_runs_give_the_same_bytes(run_dirs, built_report, generated_at, tmp_path):
    again = reports.build_report(list(run_dirs.values()), tmp_path, formats=["pdf"],
                                 generated_at=generated_at)
    assert again["pdf"].read_bytes() == built_report["pdf"].read_bytes()


def _table_section(rows: int) -> Section:
    frame = pd.DataFrame({"value": [f"row {i} " + "text " * 30 for i in range(rows)]},
                         index=[f"field {i}" for i in range(rows)])
    item = TableItem("long", "Long", frame, "A long table.", index_label="field", number=1)
    return Section("long", "Long table", "Rows that need several pages.", [item])


def test_long_tables_continue_on_the_next_page(tmp_path):
    path = tmp_path / "long.pdf"
    titles = report_pdf.write_pdf([_table_section(60)], path, title="Long", subtitle="",
                                  generated_at="now")
    assert len(titles) > 2 and titles[-1] == "Long table (continued)"
    texts = [page.extract_text() for page in PdfReader(path).pages]
    seen = [int(n) for text in texts for n in re.findall(r"field (\d+)", text)]
    assert seen == list(range(60))  # every row once, in order
    assert all("field" in text.splitlines()[1] or i == 0 for i, text in enumerate(texts[1:]))


def _rendered_width_pt(text: str, size: float, bold: bool) -> float:
    """The width matplotlib draws, independently of reports.measure."""
    figure = Figure(dpi=288)  # fine pixels: hinting and rounding well below a point
    canvas = FigureCanvasAgg(figure)
    artist = figure.text(0, 0, text, fontsize=size, parse_math=False,
                         fontweight="bold" if bold else "normal", family="DejaVu Sans")
    return artist.get_window_extent(canvas.get_renderer()).width * 72 / 288


def test_cell_text_stays_inside_its_cell(sections):
    """Every wrapped line of the provenance table (paths, hashes, command lines) is narrower
    than its column, measured by drawing it."""
    table = next(item for item in items_of(sections, TableItem) if item.id == "provenance-table")
    rows = [[table.index_label, *table.frame.columns],
            *[[label, *values] for label, values in zip(table.frame.index,
                                                          table.frame.itertuples(index=False))]]
    rows = [[str(cell) for cell in row] for row in rows]
    size = report_pdf.TABLE_SIZE - 1.0
    widths = report_pdf.column_widths(rows, size)
    assert sum(widths) <= report_pdf.TEXT_WIDTH_IN * 72 + 1e-6
    for r, row in enumerate(rows):
        for c, (cell, width) in enumerate(zip(row, widths)):
            bold = r == 0 or c == 0
            for line in reports.measure.wrap(cell, width - 2 * report_pdf.CELL_PAD_PT, size, bold):
                assert _rendered_width_pt(line, size, bold) <= width - 2 * report_pdf.CELL_PAD_PT + 0.5


def test_a_long_title_is_wrapped_not_clipped(run_dirs, tmp_path):
    title = "Gated attention report: " + " vs ".join(f"a-model-with-a-long-name-{i}"
                                                     for i in range(6))
    path = tmp_path / "report.pdf"
    report_pdf.write_pdf(build_sections(reports.load_runs(run_dirs["headwise"])), path,
                         title=title, subtitle="", generated_at="now")
    first = PdfReader(path).pages[0].extract_text()
    assert _squash(title) in _squash(first)
    for line in reports.measure.wrap(title, report_pdf.TEXT_WIDTH_IN * 72,
                                     report_pdf.COVER_TITLE_SIZE, bold=True):
        assert _rendered_width_pt(line, report_pdf.COVER_TITLE_SIZE, True) \
            <= report_pdf.TEXT_WIDTH_IN * 72 + 0.5


def test_every_figure_is_at_least_12_cm_wide(sections):
    for item in items_of(sections, FigureItem):
        rendered = PdfReader(__import__("io").BytesIO(report_pdf.render_figure(item))).pages[0]
        assert float(rendered.mediabox.width) >= 12 * CM - 0.5, item.id


@pytest.mark.skipif(shutil.which("pdftoppm") is None, reason="pdftoppm (poppler-utils) missing")
def test_the_page_of_every_section_has_content(built_report, page_texts, sections, tmp_path):
    """Rendered, the page where each section starts has ink well beyond its heading."""
    subprocess.run(["pdftoppm", "-r", "30", "-gray", str(built_report["pdf"]),
                    str(tmp_path / "page")], check=True)
    pages = sorted(tmp_path.glob("page-*.pgm"))
    assert len(pages) == len(page_texts)
    for section in shown(sections):
        index = next(i for i, text in enumerate(page_texts) if section.title in text)
        image = _read_pgm(pages[index])
        ink = (image < 200).mean()
        assert ink > 0.01, (section.title, ink)


def _read_pgm(path) -> np.ndarray:
    data = path.read_bytes()
    header = data.split(maxsplit=4)
    width, height = int(header[1]), int(header[2])
    return np.frombuffer(data[-width * height:], dtype=np.uint8).reshape(height, width)


def _table(n: int, lines: int, section):
    """The PDF rows (header, n body rows of `lines` text lines each, caption) of an n-row table,
    as pdf_tables lays them out."""
    import pandas as pd

    from probe.reports.sections.items import TableItem
    from probe.reports.pdf.tables import table_rows

    cell = "\n".join(["x"] * lines)
    frame = pd.DataFrame({"a": [cell] * n}, index=[f"row {i}" for i in range(n)])
    return table_rows(TableItem("t", "T", frame, "A caption.", number=1), section)


def _rows_per_page(pages, kind):
    return [sum(1 for row, _ in page.rows if kind(row)) for page in pages]


def test_a_table_that_fits_a_page_is_moved_whole_not_split():
    """Table 3 (sink tokens, 26 rows) was split over two pages although it fits on one."""
    from types import SimpleNamespace

    from probe.reports.pdf import _paginate
    from probe.reports.pdf.page import Row

    section = SimpleNamespace(title="S")
    filler = Row(3.5, lambda page, top: [], section)                 # half a page of figure
    table = _table(20, 1, section)                                    # 3 in: fits a page
    pages = _paginate([filler, *table], "T")
    body = _rows_per_page(pages, lambda r: r.table is not None and r.header is not None)
    assert body == [0, 20]


def test_a_heading_is_followed_by_its_long_table_and_no_page_holds_one_row():
    """The claims table after the cover: it starts under its heading (page 1 was half empty) and
    the rows carried over are at least WIDOW_ROWS, never one."""
    from types import SimpleNamespace

    from probe.reports.pdf import _paginate
    from probe.reports.pdf.page import WIDOW_ROWS, Row

    section = SimpleNamespace(title="Claims")
    cover = Row(2.5, lambda page, top: [], section, heading=True)
    heading = Row(0.6, lambda page, top: [], section, heading=True, keep_with_next=True)
    table = _table(12, 3, section)               # 6.3 in: fits a page alone, not with its heading
    pages = _paginate([cover, heading, *table], "T")
    body = _rows_per_page(pages, lambda r: r.table is not None and r.header is not None)
    assert body[0] >= 3 and sum(body) == 12 and len(pages) == 2
    assert body[1] >= WIDOW_ROWS
    # A table taller than any page breaks, and its last page still holds WIDOW_ROWS rows or more.
    tall = _table(40, 2, section)
    body = _rows_per_page(_paginate([heading, *tall], "T"), lambda r: r.table is not None and r.header is not None)
    assert sum(body) == 40 and min(body) >= WIDOW_ROWS


def test_the_table_after_the_cover_starts_on_page_one():
    """The claims table (taller since it has intervals) fits a page alone but not under the cover:
    moved whole, it left page 1 with the contents only. It starts under the cover and breaks,
    at least WIDOW_ROWS rows on each page; a table elsewhere still moves whole."""
    from types import SimpleNamespace

    from probe.reports.pdf import _paginate
    from probe.reports.pdf.page import WIDOW_ROWS, Row

    section = SimpleNamespace(title="Claims")
    cover = Row(2.8, lambda page, top: [], section, heading=True)
    heading = Row(0.6, lambda page, top: [], section, heading=True, keep_with_next=True)
    table = _table(10, 3, section)               # 5 in: fits a page with its heading
    body = _rows_per_page(_paginate([cover, heading, *table], "T"),
                          lambda r: r.table is not None and r.header is not None)
    assert sum(body) == 10 and len(body) == 2 and min(body) >= WIDOW_ROWS
    # Not even WIDOW_ROWS rows fit under a tall cover: the heading and its table move whole.
    tall_cover = Row(6.2, lambda page, top: [], section, heading=True)
    body = _rows_per_page(_paginate([tall_cover, heading, *table], "T"),
                          lambda r: r.table is not None and r.header is not None)
    assert body == [0, 10]


def test_a_heading_before_a_figure_too_tall_to_share_the_page_starts_the_next_page():
    """The real-model report left "Sink anatomy" and its intro alone at the foot of a page, its
    30-layer heatmap on the next."""
    from types import SimpleNamespace

    from probe.reports.pdf import _paginate
    from probe.reports.pdf.page import Row

    section = SimpleNamespace(title="Sink anatomy")
    before = Row(3.0, lambda page, top: [], SimpleNamespace(title="Attention patterns"))
    heading = Row(0.6, lambda page, top: [], section, heading=True, keep_with_next=True)
    figure = Row(6.3, lambda page, top: [], section)                  # nearly a page
    pages = _paginate([before, heading, figure], "T")
    assert [[row for row, _ in page.rows] for page in pages] == [[before], [heading, figure]]
