"""One look for every figure, and the settings that make saved figures byte-for-byte stable."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Iterator, TypeVar

import matplotlib as mpl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from probe.reports.ticks import _renderer, declutter_ticks

# A seaborn "whitegrid"/"paper" look, with DejaVu Sans (shipped with matplotlib) named
# explicitly so the same glyphs are drawn on every machine, and the keys that would otherwise
# put random ids or dates into SVG and PDF files fixed.
_RC: dict[str, object] = {
    **sns.axes_style("whitegrid"),
    **sns.plotting_context("paper", font_scale=1.05),
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "figure.dpi": 100,
    "savefig.dpi": 200,
    "image.interpolation": "none",
    "legend.frameon": False,
    "svg.hashsalt": "probe-reports",  # stable element ids instead of uuid4-salted ones
    "svg.fonttype": "path",  # glyphs as paths: no font needed in the browser
    "pdf.fonttype": 42,  # TrueType: text in the PDF stays searchable and extractable
}

MISSING_COLOR = "#eeeeee"  # background of cells where a metric does not apply
HATCH_COLOR = "#9a9a9a"
REFERENCE_COLOR = "#555555"
KEY_COLOR = "#777777"       # legend entries that explain a line style or a band, not a model

F = TypeVar("F", bound=Callable)


@contextmanager
def report_style() -> Iterator[None]:
    with mpl.rc_context(_RC):
        yield


def styled(function: F) -> F:
    """Run a plot function inside `report_style`, so notebook and report figures look alike,
    and hand back the Figure it drew on (an axes-level plot's Axes becomes its figure), so
    that every plot function returns something `.savefig` works on and Jupyter displays."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with report_style():
            result = function(*args, **kwargs)
        return result.figure if isinstance(result, Axes) else result

    return wrapper  # type: ignore[return-value]


# seaborn's colorblind palette reordered so that the first seven are far apart, with black (an
# Okabe-Ito colour too) as the 7th: in its own order the 4th (vermillion) sat next to the 2nd
# (orange) and the 7th (light pink) next to the 5th (pink), which made a graft experiment's seven
# trajectories hard to tell apart.
_PALETTE_ORDER = (0, 1, 2, 4, 7, 9, None, 5, 8, 6, 3)


def model_colors(models: Sequence[str]) -> dict[str, tuple[float, float, float]]:
    """A fixed colour per model, by position, so a model has one colour in every figure."""
    colorblind = sns.color_palette("colorblind", 10)
    palette = [(0.0, 0.0, 0.0) if i is None else colorblind[i] for i in _PALETTE_ORDER]
    return {model: palette[index % len(palette)] for index, model in enumerate(models)}


def freeze_layout(figure: Figure, decimals: int = 6) -> Figure:
    """Run the layout engine, thin out tick labels that would overlap, round every axes
    position, and switch the engine off.

    The constrained-layout solver returns positions whose last digits vary between runs
    (its internal order follows memory addresses); the PDF backend writes ten decimals, so
    the same runs would give different bytes. Rounding to 1e-6 of the figure size (well below
    a printer dot) makes the saved file depend on the data only.
    """
    engine = figure.get_layout_engine()
    if engine is None:
        return figure
    with warnings.catch_warnings():
        # A figure whose axes were placed by hand (no GridSpec: the layer-axis figures of
        # axes_level) leaves constrained layout nothing to solve; matplotlib says so in a warning
        # that a report's reader would take for trouble. The figure is drawn as placed.
        warnings.filterwarnings("ignore", message="There are no gridspecs with layoutgrids")
        engine.execute(figure)
        if _wrap_long_y_labels(figure):
            engine.execute(figure)
    declutter_ticks(figure)  # at the size the figure is saved at, on the real text extents
    for ax in figure.findobj(Axes):
        x0, y0, width, height = ax.get_position().bounds
        rounded = [round(value, decimals) for value in (x0, y0, width, height)]
        ax.set_position(rounded, which="both")
    figure.set_layout_engine("none")
    return figure


def _wrap_long_y_labels(figure: Figure) -> bool:
    """Break a y-axis label that is longer than its axes is tall onto two lines, at the space
    nearest its middle: a figure drawn shorter to fill a page (reports/pdf/figures.py) would
    otherwise cut it off at the top and bottom. Return whether any label changed."""
    renderer = _renderer(figure)
    changed = False
    for ax in figure.findobj(Axes):
        label = ax.yaxis.label
        text = label.get_text()
        if not label.get_visible() or " " not in text or "\n" in text:
            continue
        if label.get_window_extent(renderer).height <= ax.get_window_extent(renderer).height:
            continue
        middle = len(text) / 2
        cut = min((i for i, c in enumerate(text) if c == " "), key=lambda i: abs(i - middle))
        label.set_text(text[:cut] + "\n" + text[cut + 1:])
        changed = True
    return changed
