"""Head-averaged attention maps of the display prompt, models side by side (paper Figure 2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure, SubFigure
from matplotlib.image import AxesImage

from reports.frames import attention_pattern, pattern_layers
from reports.plots._layout import figure_or_new, not_applicable, spread
from reports.runs import Runs, load_runs
from reports.style import MISSING_COLOR, styled
from reports.text import plain, visible_token


def choose_pattern_layers(runs: Runs, model: str, layers: Sequence[int] | None = None,
                          max_layers: int = 3) -> list[int]:
    """The requested layers that the model saved, or its first, middle and last ones."""
    saved = pattern_layers(runs, model)
    if layers is not None:
        return [layer for layer in layers if layer in saved]
    return spread(saved, max_layers)


def display_tokens(runs: Runs, model: str, size: int) -> list[str]:
    """Token labels of the display prompt; positions instead if meta.json has none that fit."""
    tokens = runs.meta[model].get("display_tokens") or []
    if len(tokens) != size:
        return [str(position) for position in range(size)]
    return [plain(visible_token(token)) for token in tokens]


@styled
def plot_attention_patterns(runs: Any, *, fig: Figure | SubFigure | None = None,
                            layers: Sequence[int] | None = None,
                            max_layers: int = 3) -> Figure | SubFigure:
    """One row per model with saved patterns, one column per chosen layer: query x key.

    All panels share one square-root colour scale from 0 to 1, so that small weights off the
    first column stay visible next to a sink.
    """
    runs = load_runs(runs)
    chosen = {model: picked for model in runs.models
              if (picked := choose_pattern_layers(runs, model, layers, max_layers))}
    columns = max((len(picked) for picked in chosen.values()), default=1)
    fig = figure_or_new(fig, 1.0 + 2.9 * columns, 0.4 + 2.9 * max(len(chosen), 1))
    if not chosen:
        not_applicable(fig.add_subplot(), "No run saved attention patterns of a display prompt.")
        return fig
    norm = PowerNorm(gamma=0.5, vmin=0.0, vmax=1.0)
    axes = fig.subplots(len(chosen), columns, squeeze=False)
    for row, (model, picked) in enumerate(chosen.items()):
        for column in range(columns):
            ax = axes[row][column]
            if column >= len(picked):
                ax.set_visible(False)  # this model has fewer attention layers to show
                continue
            image = _draw_pattern(ax, runs, model, picked[column], norm)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.7,
                 label="attention weight (head mean, √ scale)")
    return fig


def _draw_pattern(ax, runs: Runs, model: str, layer: int, norm) -> AxesImage:
    matrix = attention_pattern(runs, model, layer)
    image = ax.imshow(matrix, cmap=_cmap(), norm=norm, aspect="equal", interpolation="none")
    labels = display_tokens(runs, model, matrix.shape[0])
    positions = range(len(labels))
    ax.set_xticks(positions, labels=labels, rotation=90, fontsize=6.5)
    ax.set_yticks(positions, labels=labels, fontsize=6.5)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.grid(False)
    ax.set_title(f"{plain(model)}\nlayer {layer}", fontsize=8.5)
    return image


def _cmap():
    from matplotlib import colormaps

    return colormaps["magma_r"].with_extremes(bad=MISSING_COLOR)
