"""Head-averaged attention maps of the display prompt, models side by side (paper Figure 2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure, SubFigure
from matplotlib.image import AxesImage

from probe.reports.tables.frames import attention_pattern, pattern_layers
from probe.reports.plots._layout import figure_or_new, not_applicable, spread, staggered_ticks
from probe.reports.runs import Runs, load_runs
from probe.reports.style import MISSING_COLOR, styled
from probe.reports.text import plain, visible_token


def choose_pattern_layers(runs: Runs, model: str, layers: Sequence[int] | None = None,
                          max_layers: int = 1) -> list[int]:
    """The requested layers that the model saved; else, for one layer, the saved layer whose
    pattern puts the most weight on the first key (its strongest sink), for more, layers
    spread from the first to the last."""
    saved = pattern_layers(runs, model)
    if layers is not None:
        return [layer for layer in layers if layer in saved]
    if max_layers == 1 and saved:
        return [max(saved, key=lambda layer: (first_key_weight(runs, model, layer), -layer))]
    return spread(saved, max_layers)


def first_key_weight(runs: Runs, model: str, layer: int) -> float:
    """Mean weight on key 0 over the display prompt's queries t >= 1 (head mean)."""
    matrix = attention_pattern(runs, model, layer)
    column = matrix[1:, 0] if matrix.shape[0] > 1 else matrix[:, 0]
    finite = column[np.isfinite(column)]  # a NaN in the model leaves no finite weight
    return float(finite.mean()) if finite.size else 0.0


# Token tick labels: at 6 pt they were unreadable (about 5 pt as the HTML and PDF scale the
# figure), and tokens longer than a cell ("__", "JavaScript") ran into their neighbours. At this
# size a label needs about 9.5 pt of row: more than a row gets once several panels share a
# page, so rows and columns are labelled on alternate sides (`_token_ticks`).
TOKEN_FONTSIZE = 7.5
# At most this many tokens are labelled on one side of a lone panel (about 10 pt a row).
ONE_SIDE_TOKENS = 24
# Longer tokens are cut to this many characters, the last one "…" (the caption lists them whole).
TOKEN_CHARS = 8


def display_tokens(runs: Runs, model: str, size: int) -> list[str]:
    """Token labels of the display prompt; positions instead if meta.json has none that fit."""
    tokens = runs.meta[model].get("display_tokens") or []
    if len(tokens) != size:
        return [str(position) for position in range(size)]
    return [plain(visible_token(token, TOKEN_CHARS)) for token in tokens]


@styled
def plot_attention_patterns(runs: Any, *, fig: Figure | SubFigure | None = None,
                            layers: Sequence[int] | None = None,
                            max_layers: int = 1) -> Figure | SubFigure:
    """One query x key panel per model and chosen layer, models in reading order, at most
    three panels to a row.

    By default one layer per model, its strongest sink (`choose_pattern_layers`), so that
    each panel is large enough to label every token; `layers=` or `max_layers=` show more.
    All panels share one square-root colour scale from 0 to 1, so that small weights off the
    first column stay visible next to a sink.
    """
    runs = load_runs(runs)
    panels = [(model, layer) for model in runs.models
              for layer in choose_pattern_layers(runs, model, layers, max_layers)]
    columns = min(max(len(panels), 1), 3)
    rows = -(-max(len(panels), 1) // columns)
    # A lone panel of the default 24 tokens has room for its labels on one side (the PDF draws
    # it a column wide); panels side by side label alternate rows on alternate sides, and their
    # slots hold labels on both sides of the map, above and below it.
    tokens = max((attention_pattern(runs, model, layer).shape[0] for model, layer in panels),
                 default=0)
    staggered = len(panels) > 1 or tokens > ONE_SIDE_TOKENS
    if staggered:
        fig = figure_or_new(fig, 1.2 + 3.4 * columns, 0.5 + 3.5 * rows)
    else:
        fig = figure_or_new(fig, 5.2, 4.8)
    if not panels:
        not_applicable(fig.add_subplot(), "No run saved attention patterns of a display prompt.")
        return fig
    norm = PowerNorm(gamma=0.5, vmin=0.0, vmax=1.0)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, (model, layer) in zip(axes, panels):
        image = _draw_pattern(ax, runs, model, layer, norm, staggered)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    fig.colorbar(image, ax=list(axes[:len(panels)]), shrink=0.8,
                 label="attention weight (head mean, √ scale)")
    return fig


def _draw_pattern(ax, runs: Runs, model: str, layer: int, norm, staggered: bool) -> AxesImage:
    matrix = attention_pattern(runs, model, layer)
    image = ax.imshow(matrix, cmap=_cmap(), norm=norm, aspect="equal", interpolation="none")
    labels = display_tokens(runs, model, matrix.shape[0])
    _token_ticks(ax, labels, staggered)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.grid(False)
    ax.set_title(f"{plain(model)}, layer {layer}", fontsize=9)
    return image


def _token_ticks(ax, labels: Sequence[str], staggered: bool) -> None:
    """Every row and column labelled with its token, key labels upright (rotated 90°);
    `staggered`: on alternate sides (`staggered_ticks`), so that the PDF, which draws several
    panels on one page, labels every query row (on one side it kept every other) at a readable
    size."""
    if staggered:
        staggered_ticks(ax, "x", labels, rotation=90, fontsize=TOKEN_FONTSIZE)
        staggered_ticks(ax, "y", labels, fontsize=TOKEN_FONTSIZE)
        return
    positions = range(len(labels))
    ax.set_xticks(positions, labels=labels, rotation=90, fontsize=TOKEN_FONTSIZE)
    ax.set_yticks(positions, labels=labels, fontsize=TOKEN_FONTSIZE)


def _cmap():
    from matplotlib import colormaps

    return colormaps["magma_r"].with_extremes(bad=MISSING_COLOR)
