"""Gate scores by token type (gates_by_token_type.csv): where the gate opens and closes."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure, SubFigure

from probe.reports.tables.frames import gate_mean_by_token_type, token_type_order
from matplotlib.colors import Normalize

from probe.reports.plots._layout import figure_or_new, not_applicable, panel_title, set_layer_ticks
from probe.reports.runs import load_runs
from probe.reports.style import MISSING_COLOR, styled
from probe.reports.text import plain

NO_TOKEN_TYPES = "No run has gate scores by token type (gates_by_token_type.csv)."


@styled
def plot_gate_by_token_type(runs: Any, *, fig: Figure | SubFigure | None = None,
                            cmap: str = "viridis") -> Figure | SubFigure:
    """One layer x token-type heatmap of the mean gate score per model that has the table.

    Rows are the gated layers, columns the token types (built-in, then user groups); one colour
    scale over the range of all panels; each cell carries its value.
    """
    runs = load_runs(runs)
    means = gate_mean_by_token_type(runs)
    models = [model for model in runs.models if model in set(means["model"])]
    if not models:
        fig = figure_or_new(fig, 6.4, 2.4)
        not_applicable(fig.add_subplot(), NO_TOKEN_TYPES)
        return fig
    order = token_type_order(runs.gates_by_token_type)
    layers = {model: sorted(set(means[means["model"] == model]["layer"].astype(int)))
              for model in models}
    tallest = max(len(found) for found in layers.values())
    fig = figure_or_new(fig, 1.4 + (0.55 * len(order) + 0.9) * len(models),
                        1.9 + 0.36 * tallest)
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    # One scale over the data's own range: the differences between types are the point.
    finite = means["mean"][np.isfinite(means["mean"])]
    low, high = (float(finite.min()), float(finite.max())) if len(finite) else (0.0, 1.0)
    if high - low < 1e-3:
        low, high = max(0.0, low - 0.05), min(1.0, high + 0.05)
    norm = Normalize(vmin=low, vmax=high)
    image = None
    for ax, model in zip(axes, models):
        rows = means[means["model"] == model]
        matrix = np.full((len(layers[model]), len(order)), np.nan)
        row_of = {layer: i for i, layer in enumerate(layers[model])}
        column_of = {name: j for j, name in enumerate(order)}
        for layer, name, value in zip(rows["layer"], rows["token_type"], rows["mean"]):
            matrix[row_of[int(layer)], column_of[name]] = value
        image = ax.imshow(np.ma.masked_invalid(matrix), cmap=_missing_grey(cmap), norm=norm,
                          aspect="auto", interpolation="none")
        if matrix.size <= 160:
            for (i, j), value in np.ndenumerate(matrix):
                if np.isfinite(value):
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6.5,
                            color="white" if norm(value) < 0.55 else "black")
        set_layer_ticks(ax, layers[model], axis="y", positions=range(len(layers[model])))
        ax.set_xticks(range(len(order)), labels=[plain(name) for name in order],
                      rotation=45, ha="right", rotation_mode="anchor")
        ax.set_xlabel("token type")
        panel_title(ax, model, panels=len(models))
        ax.grid(False)
    fig.colorbar(image, ax=list(axes), label="mean gate score", shrink=0.9)
    return fig


def _missing_grey(cmap: str):
    from matplotlib import colormaps

    return colormaps[cmap].with_extremes(bad=MISSING_COLOR)
