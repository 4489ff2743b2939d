"""reports.html: one self-contained, deterministic file that a real browser renders."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone
from html.parser import HTMLParser

import pytest

from probe import reports
from probe.reports.html import figure_svg, render_html
from probe.reports.sections import build_sections

SECTIONS = ("claims", "summary", "first-token", "attention-patterns", "massive-activations",
            "gates", "sparsity", "interventions", "training", "inference", "provenance")
FIGURES = ("f-attn-heatmap", "f-attn-by-layer", "f-attn-by-position",
           "display-prompt-patterns", "m-act-by-site",
           "gate-histograms", "gate-stats", "gate-heatmap", "gate-saturation", "gate-token-types",
           "sparsity-by-layer", "sparsity-sweep", "loss-change-all-layers",
           "interventions-by-layer", "training-curves", "loss-by-length")
TABLES = ("claims-table", "summary-table", "m-act-top", "gate-position",
          "gate-token-type-table", "interventions-table", "provenance-table", "claims-rules")
TIME = re.compile(r'<time id="generated-at" datetime="[^"]*">[^<]*</time>')


class Outline(HTMLParser):
    """Collects what the tests look at: ids, references, figures, tables and their cells."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.references: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.tags: list[str] = []
        self.figures: dict[str, dict[str, object]] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self._figure: str | None = None
        self._in_caption = False
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append(tag)
        if "id" in attributes:
            self.ids.append(attributes["id"])
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action", "poster", "srcset") and value:
                self.references.append((tag, name, value))
        if tag == "figure":
            self._figure = attributes["id"]
            self.figures[self._figure] = {"svg": False, "caption": ""}
        elif tag == "svg" and self._figure:
            self.figures[self._figure]["svg"] = True
        elif tag == "figcaption":
            self._in_caption = True
        elif tag == "table":
            self._table = attributes["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table and self.tables[self._table]:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "figure":
            self._figure = None
        elif tag == "figcaption":
            self._in_caption = False
        elif tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._in_caption and self._figure:
            self.figures[self._figure]["caption"] += data
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def html_text(built_report) -> str:
    return built_report["html"].read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def outline(html_text) -> Outline:
    parser = Outline()
    parser.feed(html_text)
    return parser


def test_build_writes_only_the_requested_files(built_report):
    out = built_report["html"].parent
    assert sorted(path.name for path in out.iterdir()) == ["report.html", "report.pdf"]
    assert built_report["html"].stat().st_mode & 0o044  # readable by others, like a report


def test_nothing_external_is_referenced(html_text, outline):
    for tag, attribute, value in outline.references:
        assert value.startswith(("#", "data:image/png;base64,")), (tag, attribute, value[:60])
    assert not {"script", "link", "iframe", "object", "embed"} & set(outline.tags)
    for needle in ("http://", "https://", "file:", "@import", "url(//"):
        assert needle not in html_text, needle


def test_every_section_is_there_and_linked(outline):
    for section in SECTIONS:
        assert section in outline.ids
        assert ("a", "href", f"#{section}") in outline.references


def test_every_figure_is_inline_svg_with_a_caption(outline):
    assert tuple(outline.figures) == FIGURES
    for name, figure in outline.figures.items():
        assert figure["svg"], name
        assert len(str(figure["caption"])) > 80, name  # says what it shows and how


def test_ids_are_unique_across_inlined_svgs(outline):
    duplicates = {i for i in outline.ids if outline.ids.count(i) > 1}
    assert not duplicates


def test_tables_are_real_tables(outline, all_runs):
    assert tuple(outline.tables) == TABLES
    summary = outline.tables["summary-table"]
    assert summary[0][:4] == ["model", "gate layout", "layers (attention / all)", "mean gate"]
    assert [row[0] for row in summary[1:]] == list(all_runs.models)
    assert summary[1][3] == "no gate"  # the baseline's mean gate
    provenance = {row[0]: row[1:] for row in outline.tables["provenance-table"]}
    for field in ("checkpoint", "data", "tokens", "BOS policy", "position 0 holds", "versions",
                  "command line"):
        assert field in provenance, field
    assert provenance["command line"][0].startswith("probe analyze /checkpoints/baseline")


def test_new_tables_show_what_the_runs_saved(outline, run_dirs):
    token_types = outline.tables["gate-token-type-table"]
    header = token_types[0]
    assert header[:3] == ["model", "first", "whitespace"] and header[-1] == "dollar $"
    labels = [row[0] for row in token_types[1:]]
    assert labels == ["headwise", "headwise: positions", "hybrid", "hybrid: positions"]
    assert token_types[1][-1] == "n/a"  # headwise has no user group
    interventions = {row[0]: row[1:] for row in outline.tables["interventions-table"]}
    assert interventions["model"][:2] == ["loss, unmodified", "Δ gate → layer mean"]
    assert set(interventions) == {"model", "baseline", "hybrid"}
    assert interventions["baseline"][:2] == ["2.200", "n/a"]  # no gate to intervene on
    assert interventions["hybrid"][1] == "+0.400"
    # Latency (single noisy timings) is not in the default report; the function has it.
    inference = reports.inference_table(list(run_dirs.values()))
    assert list(inference.index) == ["baseline"] and "prefill_ms" in inference.columns


def test_reference_values_of_the_paper_are_quoted(html_text):
    for number in ("1053", "0.467", "0.116", "0.048", "0.172", "0.073", "400B"):
        assert number in html_text


def test_says_where_a_metric_does_not_apply(html_text):
    for sentence in ("baseline has no attention-output gate",
                     "hybrid: layers 0–2, 4 are linear attention",
                     "The models differ in depth (baseline: 4, headwise: 4, hybrid: 6 layers)",
                     "headwise saved no attention patterns",
                     "headwise has no training log",
                     "baseline has no gate: only the massive-activation intervention",
                     "headwise has no intervention results",
                     "hybrid has no F-Attn by query position (first_token_buckets.csv)",
                     "headwise has no inference measurements (inference.csv)"):
        assert sentence in html_text, sentence


def test_data_text_is_escaped(html_text):
    # The display prompt holds the token "<b>": it must show as text, never become markup.
    assert "&lt;b&gt;" in html_text
    assert "<b>" not in html_text


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")    # the raw labels draw as boxes
def test_control_and_bidi_characters_of_tick_labels_never_reach_the_svg():
    """Token strings become tick labels, which matplotlib writes into the SVG as comments: NUL,
    ESC and a right-to-left override must not reach report.html raw (issue 37)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.bar(["a\x1b[31mred", "b\u202eevil", "c\x00nul"], [1, 2, 3])
    svg = figure_svg(fig, "t")
    plt.close(fig)
    assert not any(ch in svg for ch in ("\x1b", "\u202e", "\x00")), "a raw control character in the svg"
    assert "<!--" not in svg and svg.startswith("<svg")


def test_output_is_deterministic_apart_from_the_timestamp(run_dirs, built_report, tmp_path):
    later = datetime(2027, 1, 1, tzinfo=timezone.utc)
    again = reports.build_report(list(run_dirs.values()), tmp_path, formats="html",
                                 generated_at=later)
    first = built_report["html"].read_text(encoding="utf-8")
    second = again["html"].read_text(encoding="utf-8")
    assert 'datetime="2026-11-02T08:30:00Z"' in first
    assert 'datetime="2027-01-01T00:00:00Z"' in second
    assert TIME.sub("", first) == TIME.sub("", second)


def test_source_date_epoch_sets_the_timestamp(all_runs, monkeypatch):
    from probe.reports.build import _timestamp

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    assert _timestamp(None) == "1970-01-01T00:00:00Z"


def test_svg_ids_get_a_per_figure_prefix(all_runs):
    import probe.reports.plots as plots

    svg = figure_svg(plots.plot_gate_saturation(all_runs), prefix="fig-x")
    ids = re.findall(r'\bid="([^"]+)"', svg)
    assert ids and all(i.startswith("fig-x-") for i in ids)
    references = re.findall(r'(?:href="#|url\(#)([^")]+)', svg)
    assert references and all(r.startswith("fig-x-") for r in references)
    assert svg.startswith("<svg")


def test_html_of_a_single_baseline_says_gates_do_not_apply(run_dirs):
    # Rendering the text without its figures keeps this check fast.
    runs = reports.load_runs(run_dirs["baseline"])
    sections = [replace(section, items=[]) for section in build_sections(runs)]
    text = render_html(sections, title="t", subtitle="s", generated_at="now")
    assert "baseline has no attention-output gate" in text
    assert "No run has a training log" not in text  # the baseline has one


def test_sections_without_data_are_left_out_with_one_line(run_dirs):
    """headwise alone has no training log, interventions, patterns, inference.csv, head_norms.csv
    (the fixture runs predate it) or sink ablations."""
    runs = reports.load_runs(run_dirs["headwise"])
    sections = build_sections(runs)
    left_out = {section.id: section.omitted for section in sections if section.omitted}
    assert set(left_out) == {"attention-patterns", "interventions", "training", "trajectory", "inference",
                             "head-norms", "sinks"}
    text = render_html([replace(section, items=[]) for section in sections], title="t",
                       subtitle="s", generated_at="now")
    for section in sections:
        if section.omitted:
            assert f'<section id="{section.id}">' not in text  # no empty box
            assert f"Not in this report: {section.title} ({section.omitted})." in text
        else:
            assert f'<section id="{section.id}">' in text
    assert "training log (training.csv)" in left_out["training"]


def test_unknown_format_is_refused(run_dirs, tmp_path):
    with pytest.raises(ValueError, match="unknown report format"):
        reports.build_report(run_dirs["baseline"], tmp_path, formats=("docx",))
    assert not list(tmp_path.iterdir())


def test_opens_in_headless_chromium(built_report, tmp_path):
    pytest.importorskip("websocket", reason="websocket-client is not installed")
    from tests.reports.headless_chromium import HeadlessChromium, find_chromium

    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with HeadlessChromium(binary, tmp_path / "profile") as browser:
        browser.open(built_report["html"])
        sizes = browser.evaluate(
            "Array.from(document.querySelectorAll('figure')).map(f => {"
            " const r = f.querySelector('svg').getBoundingClientRect();"
            " return [f.id, r.width, r.height]; })")
        shot = browser.screenshot(tmp_path / "report.png")
        errors, requests = browser.log.errors, browser.log.requests
    assert errors == []
    assert [name for name, _, _ in sizes] == list(FIGURES)
    for name, width, height in sizes:
        assert width > 100 and height > 100, name
    assert all(url.startswith(("file://", "data:")) for url in requests), requests
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_a_narrow_window_keeps_captions_and_figure_text_readable(built_report, tmp_path):
    """At a 700 px window: a table wider than the column scrolls sideways in its box, but its
    caption wraps to the box's width and stays in it when the table is scrolled to its right end
    (a caption spans its table, so its lines ran past the edge); a figure shrinks to the column
    but never below 3/4 of its drawn size, so tick labels stay readable, and one that does not
    fit scrolls in a box of its own rather than widening the page."""
    pytest.importorskip("websocket", reason="websocket-client is not installed")
    from tests.reports.headless_chromium import HeadlessChromium, find_chromium

    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with HeadlessChromium(binary, tmp_path / "profile", width=700, height=900) as browser:
        browser.open(built_report["html"])
        page_width = browser.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        tables = browser.evaluate(
            "Array.from(document.querySelectorAll('.table-wrap')).map(w => {"
            " const wide = w.scrollWidth > w.clientWidth; w.scrollLeft = w.scrollWidth;"
            " const b = w.getBoundingClientRect(), c = w.querySelector('caption').getBoundingClientRect();"
            " return [w.querySelector('table').id, wide, b.left, b.right, c.left, c.right]; })")
        figures = browser.evaluate(
            "Array.from(document.querySelectorAll('figure .plot svg')).map(s => {"
            " const box = s.parentElement; return [s.closest('figure').id,"
            " s.getBoundingClientRect().width, s.viewBox.baseVal.width * 96 / 72,"  # drawn in pt
            " box.clientWidth, box.getBoundingClientRect().right]; })")
    assert page_width[0] <= page_width[1], page_width                 # nothing widens the page
    assert any(wide for _, wide, *_ in tables), "no table wider than the column: nothing tested"
    for name, _, left, right, caption_left, caption_right in tables:
        assert left - 1 <= caption_left and caption_right <= right + 1, (name, left, right,
                                                                        caption_left, caption_right)
    assert any(0.75 * natural > column for _, _, natural, column, _ in figures), "nothing to test"
    for name, shown, natural, _, right in figures:
        assert shown >= 0.75 * natural - 1, (name, shown, natural)
        assert right <= page_width[1], name


def test_browser_harness_sees_console_errors(tmp_path):
    """The check above could not fail if the harness missed errors: prove it does not."""
    pytest.importorskip("websocket", reason="websocket-client is not installed")
    from tests.reports.headless_chromium import HeadlessChromium, find_chromium

    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>console.error('boom'); undefinedCall();"
                    "</script>", encoding="utf-8")
    with HeadlessChromium(binary, tmp_path / "profile") as browser:
        browser.open(page)
        errors = browser.log.errors
    assert any("boom" in error for error in errors)
    assert any("undefinedCall" in error for error in errors)
