"""The report's building blocks, independent of its format: figures, tables and sections, and
their numbering in reading order. The sections (reports/sections/__init__.py) fill them; html.py
and the pdf package (reports/pdf/__init__.py) render them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pandas as pd
from matplotlib.figure import Figure

# Makes a new figure of the plot's own size; each format saves (or resizes) it as it needs.
Draw = Callable[[], Figure]


@dataclass(frozen=True)
class FigureItem:
    id: str
    title: str
    draw: Draw
    caption: str
    number: int = 0  # set by build_sections: "Figure 3" in HTML, PDF and --figures alike
    # False: the PDF never draws it shorter than its own aspect to fill a page (a row per token
    # would lose every other token label to the tick thinning).
    shrinkable: bool = True
    # The HTML report shows this HTML (an interactive view of the same values) in the figure's
    # place; the PDF draws the figure.
    interactive: Callable[[], str] | None = None

    def __post_init__(self) -> None:
        if not getattr(self.draw, "printable", False):
            object.__setattr__(self, "draw", _printable_figure(self.draw))

    @property
    def label(self) -> str:
        return f"Figure {self.number}"


def printable_texts(figure: Figure) -> Figure:
    """Every text of `figure` shown printable: a model name's ESC or bidi override is drawn as
    an escape (probe.core.errors.printable), never as the raw character."""
    from matplotlib.text import Text

    from probe.core.errors import printable

    for text in figure.findobj(Text):
        value = text.get_text()
        if printable(value) != value:
            text.set_text(printable(value))
    return figure


def _printable_figure(draw: Draw) -> Draw:
    """draw, with printable_texts applied to the figure it makes."""
    def drawn() -> Figure:
        return printable_texts(draw())
    drawn.printable = True  # type: ignore[attr-defined]
    return drawn


@dataclass(frozen=True)
class TableItem:
    id: str
    title: str
    frame: pd.DataFrame  # display strings; the index is the first column
    caption: str
    index_label: str = "model"
    free_text: bool = False  # long strings (paths, command lines) rather than numbers
    number: int = 0
    # In the PDF, a row whose cells are all equal is drawn as one cell across the columns (the
    # provenance's fields that every run shares: written once, not once per run).
    merge_equal: bool = False

    def __post_init__(self) -> None:
        from probe.core.errors import printable

        shown = self.frame.map(lambda v: printable(v) if isinstance(v, str) else v)
        if not isinstance(self.frame.index, pd.MultiIndex):
            shown.index = pd.Index([printable(v) if isinstance(v, str) else v for v in self.frame.index],
                                   name=self.frame.index.name)
        object.__setattr__(self, "frame", shown)

    @property
    def label(self) -> str:
        return f"Table {self.number}"


Item = FigureItem | TableItem


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    intro: str
    items: list[Item]
    notes: list[str] = field(default_factory=list)
    # Why a section with nothing to show is left out; it then has no items and the contents
    # carry this one line instead of a page of empty boxes.
    omitted: str | None = None
    # The tables it reads (probe.results.schema.TABLES): without any of them in any run it is left out,
    # with the reason (`needing`).
    needs: tuple[str, ...] = ()


PROVENANCE = "provenance"  # the section that also carries the report's own timestamp


def shown(sections: list[Section]) -> list[Section]:
    return [section for section in sections if section.omitted is None]


def shown_figures(sections: list[Section]) -> list[FigureItem]:
    """The figures of the shown sections, in reading order."""
    return [item for section in shown(sections) for item in section.items if isinstance(item, FigureItem)]


def left_out_line(section: Section) -> str:
    """The contents' one line for a section left out."""
    return f"Not in this report: {section.title} ({section.omitted})."


def numbered(sections: list[Section]) -> list[Section]:
    counts = {FigureItem: 0, TableItem: 0}
    result = []
    for section in sections:
        items = []
        for item in section.items:
            counts[type(item)] += 1
            items.append(replace(item, number=counts[type(item)]))
        result.append(replace(section, items=items))
    return result


def left_out(section_id: str, title: str, reason: str) -> Section:
    return Section(id=section_id, title=title, intro="", items=[], omitted=reason)


def lacking(runs, needs: tuple[str, ...]) -> str | None:
    """Why a section that reads the tables `needs` has nothing to show (no run has any of them,
    saying how to get them), or None."""
    if not needs or any(len(runs.table(name)) for name in needs):
        return None
    from probe.reports.labels import OPTIONAL_TABLES

    files = " or ".join(f"{name}.csv" for name in needs)
    option = next((OPTIONAL_TABLES[name] for name in needs if name in OPTIONAL_TABLES), None)
    how = (f"analyse with --{option.replace('_', '-')}" if option
           else "the runs were written before probe measured it; analyse them again")
    return f"no run has {files}: {how}"


def needing(*needs: str, id: str, title: str):
    """Decorate a section builder `build(runs, ...) -> Section` that reads the tables `needs`:
    runs without any of them get the section left out with the reason, and `build` is not called."""
    def wrap(build: Callable[..., Section]) -> Callable[..., Section]:
        def section(runs, *args, **kwargs) -> Section:
            reason = lacking(runs, needs)
            built = left_out(id, title, reason) if reason else build(runs, *args, **kwargs)
            return replace(built, needs=needs)
        section.needs = needs  # type: ignore[attr-defined]
        section.__doc__, section.__name__ = build.__doc__, build.__name__
        return section
    return wrap


def axes_level(plot: Callable[[], Figure]) -> Draw:
    """An axes-level plot as a figure maker (plot functions return the figure)."""
    return plot
