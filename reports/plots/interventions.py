"""Interventions (interventions.csv): how much the held-out loss needs the gate and the
massive activations."""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from probe.reports.tables.frames import interventions_all_layers, interventions_by_layer
from probe.reports.plots._layout import (axes_or_new, figure_or_new, grid_shape, legend_entries,
                                         legend_outside, not_applicable, set_layer_ticks)
from probe.reports.runs import load_runs
from probe.reports.labels import INTERVENTION_LABELS, INTERVENTIONS
from probe.reports.style import REFERENCE_COLOR, model_colors, styled
from probe.reports.text import plain

NO_INTERVENTIONS = ("No run has intervention results (interventions.csv; "
                    "probe analyze --interventions).")
DELTA_LABEL = "Δ loss (intervened − unmodified)"


@styled
def plot_interventions(runs: Any, *, ax: Axes | None = None) -> Figure | SubFigure:
    """Δ loss of each intervention applied to all layers at once, one bar per model."""
    runs = load_runs(runs)
    ax = axes_or_new(ax, 8.0, 3.8)
    rows = interventions_all_layers(runs)
    rows = rows[rows["intervention"] != "none"]
    shown = [name for name in INTERVENTIONS if name in set(rows["intervention"])]
    shown += sorted(set(rows["intervention"]) - set(shown))
    models = [model for model in runs.models if model in set(rows["model"])]
    if not shown:
        return not_applicable(ax, NO_INTERVENTIONS)
    colors = model_colors(runs.models)
    width = 0.8 / len(models)
    for index, model in enumerate(models):
        mine = rows[rows["model"] == model].set_index("intervention")["delta_loss"]
        x = [position for position, name in enumerate(shown) if name in mine.index]
        values = [float(mine[name]) for name in shown if name in mine.index]
        offset = (index - (len(models) - 1) / 2) * width
        bars = ax.bar(np.asarray(x, dtype=float) + offset, values, width * 0.92,
                      color=colors[model], label=plain(model))
        ax.bar_label(bars, labels=[_short(value) for value in values], fontsize=6.5, padding=1.5)
    ax.axhline(0.0, color=REFERENCE_COLOR, linewidth=0.8)
    # Two short lines each: the labels must not run into each other on a narrow figure.
    ax.set_xticks(range(len(shown)), labels=[textwrap.fill(INTERVENTION_LABELS.get(name, name),
                                                           16) for name in shown])
    ax.set_xlabel("intervention, all layers at once")
    ax.set_ylabel(DELTA_LABEL)
    ax.margins(y=0.12)
    legend_outside(ax, *ax.get_legend_handles_labels())  # never over the bars
    return ax


@styled
def plot_interventions_by_layer(runs: Any, *, fig: Figure | SubFigure | None = None,
                                max_columns: int = 4) -> Figure | SubFigure:
    """One panel per intervention: Δ loss when only that layer is intervened on, per model."""
    runs = load_runs(runs)
    rows = interventions_by_layer(runs)
    shown = [name for name in INTERVENTIONS if name in set(rows["intervention"])]
    shown += sorted(set(rows["intervention"]) - set(shown))
    panel_rows, columns = grid_shape(max(len(shown), 1), max_columns)
    fig = figure_or_new(fig, 1.2 + 2.6 * columns, 0.8 + 2.3 * panel_rows)
    if not shown:
        not_applicable(fig.add_subplot(), "No run has single-layer interventions "
                                          "(interventions.csv).")
        return fig
    axes = fig.subplots(panel_rows, columns, squeeze=False).ravel()
    colors = model_colors(runs.models)
    for ax, name in zip(axes, shown):
        layers: set[int] = set()
        for model in runs.models:
            mine = rows[(rows["model"] == model) & (rows["intervention"] == name)]
            if mine.empty:
                continue
            layers.update(mine["layer"].astype(int))
            ax.plot(mine["layer"], mine["delta_loss"], marker="o", markersize=3.5,
                    color=colors[model], label=plain(model))
        ax.axhline(0.0, color=REFERENCE_COLOR, linewidth=0.8)
        set_layer_ticks(ax, sorted(layers), max_ticks=12)
        ax.set_title(INTERVENTION_LABELS.get(name, name), fontsize=9)
    for index, ax in enumerate(axes[:len(shown)]):
        if index % columns == 0:
            ax.set_ylabel(DELTA_LABEL)
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    handles, labels = legend_entries(axes[:len(shown)])
    order = {plain(model): index for index, model in enumerate(runs.models)}
    entries = sorted(zip(handles, labels), key=lambda entry: order.get(entry[1], len(order)))
    legend_outside(axes[min(columns, len(shown)) - 1], [h for h, _ in entries],
                   [label for _, label in entries])
    return fig


def _short(value: float) -> str:
    if not np.isfinite(value):
        return "n/a"
    return f"{value:+.2g}" if abs(value) < 0.01 else f"{value:+.2f}"
