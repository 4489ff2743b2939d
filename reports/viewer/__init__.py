"""The per-token viewer: the per-token series of one or two runs (tokens.json + tokens.npz,
probe/results/token_series.py) as one self-contained HTML page, with no server, no CDN and no
network request, so it opens from an e-mail attachment.

    page(runs, title=)      the standalone file of `probe view RUN... --out FILE.html`
    fragment(runs)          the same viewer as an <iframe srcdoc>: the report's Tokens section and
                            `analysis.view()` in Jupyter and VS Code (no ipywidgets, no extension)
    View                    what analysis.view() returns: an object with _repr_html_

What travels: the stored codes themselves (deflate-compressed, base 85; the page inflates them with
the browser's DecompressionStream) and tokens.json's decoding rules, so a value on screen is the
stored value (payload.py). The page's script and style sheet are viewer.js and viewer.css here,
inlined (package data).
"""
from __future__ import annotations

import html
from importlib import resources

from probe.core.errors import printable
from probe.reports.viewer.payload import payload, series_of

__all__ = ["View", "fragment", "page", "series_of"]


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


# In the page's head: `probe view --force` replaces an existing file only where it finds this.
GENERATOR = '<meta name="generator" content="probe view">'


def page(runs, *, title: str | None = None) -> str:
    """The viewer of the per-token series of `runs` (run directories, analyses, or TokenSeries
    with names; at most two, on the same token ids) as one HTML document."""
    data, blob, names = payload(runs)
    shown = title or "probe tokens: " + " vs ".join(names)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            # An empty icon: no request for /favicon.ico, even from a server.
            "<link rel=\"icon\" href=\"data:,\">\n"
            f"{GENERATOR}\n"
            f"<title>{html.escape(printable(shown))}</title>\n<style>{_asset('viewer.css')}</style>\n"
            "</head>\n<body>\n<div id=\"ptv\"></div>\n"
            f"<script type=\"application/json\" id=\"ptv-meta\">{data}</script>\n"
            f"<script type=\"text/plain\" id=\"ptv-blob\">{blob}</script>\n"
            f"<script>{_asset('viewer.js')}</script>\n</body>\n</html>\n")


def fragment(runs, *, height: int = 760) -> str:
    """The viewer in an <iframe srcdoc>: its script and styles stay inside it, whatever page
    (a report, a notebook) holds it."""
    return (f'<iframe class="probe-tokens" title="per-token viewer" style="width:100%;height:{height}px;'
            f'border:1px solid #d0d7de" srcdoc="{html.escape(page(runs), quote=True)}"></iframe>')


class View:
    """`analysis.view()`: the viewer inline in a notebook (Jupyter, VS Code), via _repr_html_."""

    def __init__(self, runs, height: int = 760):
        self.runs, self.height = runs, height
        self._html = fragment(runs, height=height)   # built now: a mistake shows at the call

    def _repr_html_(self) -> str:
        return self._html

    def __repr__(self) -> str:
        # Where no HTML is drawn (a terminal, a script): what this is and how to see it.
        names = " vs ".join(printable(name) for name, _ in series_of(self.runs))
        return f"<probe token viewer: {names}; shown inline in a notebook, .save(path) writes the page>"

    def save(self, path) -> None:
        """The standalone page, as `probe view` writes it."""
        from pathlib import Path

        from probe.core.atomic import write_text

        write_text(Path(path), page(self.runs))
