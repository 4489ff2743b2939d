"""Render the report sections as one self-contained HTML file.

Figures are inline SVG (glyphs as paths, heatmap pixels as data: URIs inside the SVG), the
style sheet is inline, and nothing refers to a file or a URL: the page reads the same offline,
attached to an e-mail or years later.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Sequence

import pandas as pd
from matplotlib.figure import Figure, SubFigure

from probe.core.errors import printable
from probe.reports import claims
from probe.reports.parallel import map_forked
from probe.reports.sections import (PROVENANCE, FigureItem, Section, TableItem, left_out_line, shown,
                                    shown_figures)
from probe.reports.style import freeze_layout, report_style
from probe.reports.tables import numeric_columns

_CSS = """
:root { color-scheme: light; --ink: #1f2328; --muted: #57606a; --line: #d0d7de;
        --note: #fff8e6; --note-line: #e3b341; --accent: #0b5cad; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff; line-height: 1.5;
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 32px 64px; }
header { border-bottom: 2px solid var(--ink); margin-bottom: 20px; }
h1 { font-size: 28px; margin: 8px 0 4px; }
h2 { font-size: 22px; margin: 40px 0 8px; padding-top: 8px; border-top: 1px solid var(--line); }
h3 { font-size: 16px; margin: 24px 0 6px; }
.subtitle { color: var(--muted); margin: 0 0 12px; }
nav ol { columns: 2; margin: 8px 0 16px; padding-left: 22px; }
nav a { color: var(--accent); text-decoration: none; }
nav a:hover { text-decoration: underline; }
nav ul.left-out { color: var(--muted); font-size: 13.5px; margin: 0 0 12px; padding-left: 22px; }
.intro { margin: 4px 0 12px; }
aside.note { background: var(--note); border-left: 4px solid var(--note-line);
             padding: 8px 14px; margin: 12px 0; font-size: 14px; }
aside.note ul { margin: 4px 0; padding-left: 20px; }
figure { margin: 16px 0 28px; }
/* A figure shrinks to fit the column, but never below 3/4 of its drawn size (--natural, set per
   figure): smaller, a multi-panel figure's tick labels become unreadable, so a narrow window
   scrolls the figure sideways in a box of its own instead. */
figure .plot { overflow-x: auto; }
figure .plot svg { display: block; max-width: 100%; height: auto; margin: 0 auto;
                   min-width: calc(0.75 * var(--natural, 0px)); }
figcaption, table caption { color: var(--muted); font-size: 13.5px; margin-top: 6px;
                            text-align: left; }
.table-wrap { overflow-x: auto; margin: 12px 0 28px; container-type: inline-size; }
table { border-collapse: collapse; font-size: 13.5px; font-variant-numeric: tabular-nums; }
/* A caption spans its table: in a table wider than the window it would run past the scroller's
   edge. It wraps to the scroller's width instead (100cqi: .table-wrap is the container) and
   stays in view while the table scrolls sideways. */
table caption { caption-side: bottom; padding-top: 6px; max-width: 100cqi; position: sticky;
                left: 0; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left;
         vertical-align: top; }
th.num, td.num { text-align: right; }
thead th { border-bottom: 2px solid var(--ink); }
table.text td { overflow-wrap: anywhere; max-width: 420px;
                font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
.generated { color: var(--muted); font-size: 13px; }
td.verdict { font-weight: 600; }
td.consistent { color: #1a7f37; }
td.inconsistent { color: #b42318; }
td.below { color: #9a6700; }
td.untestable { color: var(--muted); font-weight: 400; }
"""
# Claims-table verdicts are coloured so the page can be scanned; the words carry the meaning.
_VERDICT_CLASSES = claims.VERDICT_KINDS


def render_html(sections: Sequence[Section], *, title: str, subtitle: str,
                generated_at: str) -> str:
    """The whole document as a string; `generated_at` is the only varying part."""
    body = [_header(sections, title, subtitle)]
    drawn = [item for item in shown_figures(sections) if item.interactive is None]
    svgs = dict(zip(map(id, drawn), map_forked(_svg, drawn)))
    for section in shown(sections):
        body.append(f'<section id="{section.id}">')
        body.append(f"<h2>{_text(section.title)}</h2>")
        body.append(f'<p class="intro">{_text(section.intro)}</p>')
        if section.notes:
            body.append(_notes(section.notes))
        for item in section.items:
            body.append(_figure(item, svgs.get(id(item))) if isinstance(item, FigureItem) else _table(item))
        if section.id == PROVENANCE:
            body.append(f'<p class="generated">Report generated <time id="generated-at" '
                        f'datetime="{generated_at}">{generated_at}</time> by probe reports '
                        "from the saved runs listed above.</p>")
        body.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{_text(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
            + "\n".join(body) + "\n</main>\n</body>\n</html>\n")


def _header(sections: Sequence[Section], title: str, subtitle: str) -> str:
    links = "".join(f'<li><a href="#{s.id}">{_text(s.title)}</a></li>' for s in shown(sections))
    left_out = "".join(f'<li id="{s.id}-left-out">{_text(left_out_line(s))}</li>'
                       for s in sections if s.omitted is not None)
    left_out = f'<ul class="left-out">{left_out}</ul>' if left_out else ""
    return (f"<header><h1>{_text(title)}</h1><p class=\"subtitle\">{_text(subtitle)}</p>"
            f"<nav aria-label=\"contents\"><ol>{links}</ol>{left_out}</nav></header>")


def _notes(notes: Sequence[str]) -> str:
    items = "".join(f"<li>{_text(note)}</li>" for note in notes)
    return ('<aside class="note"><strong>Where a metric does not apply</strong>'
            f"<ul>{items}</ul></aside>")


def _svg(item: FigureItem) -> str:
    """The figure drawn as inline SVG (in a worker process: reports/parallel.py)."""
    with report_style():
        return figure_svg(freeze_layout(item.draw()), prefix=item.id)


def _figure(item: FigureItem, svg: str | None) -> str:
    """The <figure>: `svg` drawn already, or the item's interactive view."""
    if svg is None:
        svg = item.interactive() if item.interactive is not None else _svg(item)
    # The drawn width ("950.4pt"), for the CSS that keeps a figure from shrinking unreadably.
    natural = re.match(r'<svg\b[^>]*?\swidth="([\d.]+pt)"', svg)
    style = f' style="--natural: {natural.group(1)}"' if natural else ""
    return (f'<figure id="{item.id}"><h3>{_text(item.title)}</h3>'
            f'<div class="plot"{style}>{svg}</div>'
            f"<figcaption><strong>{item.label}.</strong> {_text(item.caption)}</figcaption>"
            "</figure>")


def _table(item: TableItem) -> str:
    caption = f"<strong>{item.label}.</strong> {_text(item.caption)}"
    return (f'<h3 id="{item.id}-title">{_text(item.title)}</h3><div class="table-wrap">'
            f"{table_html(item.frame, item.index_label, item.id, caption, item.free_text)}"
            "</div>")


def table_html(frame: pd.DataFrame, index_label: str, table_id: str, caption_html: str = "",
               free_text: bool = False) -> str:
    """A real <table>: header row, one row per index entry, every cell escaped."""
    kind = "text" if free_text else "numbers"  # free text wraps, in a monospace font
    aligned = ["", *(' class="num"' if numeric else "" for numeric in numeric_columns(frame))]
    header = "".join(f'<th scope="col"{align}>{_text(column)}</th>'
                     for column, align in zip([index_label, *frame.columns], aligned))
    rows = []
    for label, values in zip(frame.index, frame.itertuples(index=False)):
        cells = "".join(f"<td{align or _verdict_class(value)}>{_text(value)}</td>"
                        for value, align in zip(values, aligned[1:]))
        rows.append(f'<tr><th scope="row">{_text(label)}</th>{cells}</tr>')
    caption = f"<caption>{caption_html}</caption>" if caption_html else ""
    return (f'<table id="{table_id}" class="{kind}">{caption}<thead><tr>{header}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def _verdict_class(value: object) -> str:
    text = str(value)
    return next((f' class="verdict {cls}"' for prefix, cls in _VERDICT_CLASSES if text.startswith(prefix)), "")


def figure_svg(figure: Figure | SubFigure, prefix: str) -> str:
    """The figure as an <svg> element ready to inline (no XML prolog, unique ids)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.DOTALL)
    # Matplotlib writes each text's string into a comment beside its glyph paths: a token's
    # NUL, ESC or bidi character would reach the page raw (the drawn glyphs are paths, so the
    # comments carry nothing a reader sees), and any such character left is shown as an escape.
    svg = printable(re.sub(r"<!--.*?-->\s*", "", svg, flags=re.DOTALL))
    # Namespace declarations are URLs that the HTML parser does not need for inline SVG.
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    return _prefix_ids(svg, prefix)


def _prefix_ids(svg: str, prefix: str) -> str:
    """Several SVGs share one HTML document: give every id a per-figure prefix.

    Matplotlib names glyphs and clip paths by content (e.g. "DejaVuSans-30"), so two figures
    would otherwise define the same ids; an artist's gid becomes an id too and may repeat
    within one figure, so repeats get a counter.
    """
    defined = re.findall(r'\bid="([^"]+)"', svg)
    if not defined:
        return svg
    seen: dict[str, int] = {}

    def rename_definition(match: re.Match[str]) -> str:
        name = match.group(1)
        seen[name] = seen.get(name, 0) + 1
        suffix = f"-{seen[name]}" if defined.count(name) > 1 else ""
        return f'id="{prefix}-{name}{suffix}"'

    def rename_reference(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in seen:
            return match.group(0)
        return f"{match.group(1)}{prefix}-{name}{match.group(3)}"

    svg = re.sub(r'\bid="([^"]+)"', rename_definition, svg)
    svg = re.sub(r'(href="#)([^"]+)(")', rename_reference, svg)
    return re.sub(r"(url\(#)([^)]+)(\))", rename_reference, svg)


def _text(value: object) -> str:
    """Escaped for HTML, with control and bidi characters shown as escapes (probe.core.errors.printable)."""
    from probe.core.errors import printable

    return html.escape(printable(value), quote=True)
