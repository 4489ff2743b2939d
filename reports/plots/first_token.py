"""F-Attn: the attention probability on the first token (paper Table 4, sinks)."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from reports.frames import (bucket_label, first_token_by_bucket, first_token_by_layer,
                            first_token_matrix)
from reports.plots._layout import (axes_or_new, figure_or_new, model_heatmaps, not_applicable,
                                   set_layer_ticks)
from reports.runs import load_runs
from reports.schema import LINEAR_ATTENTION
from reports.style import REFERENCE_COLOR, model_colors, styled
from reports.text import plain

METRIC_LABELS = {
    "f_attn": "F-Attn (queries t ≥ 1)",
    "f_attn_paper": "F-Attn, paper-style (incl. t = 0)",
}
LINEAR_NOTE = "linear attention, no F-Attn"


@styled
def plot_first_token_heatmap(runs: Any, *, fig: Figure | SubFigure | None = None,
                             metric: str = "f_attn", cmap: str = "magma_r",
                             vmax: float | None = None) -> Figure | SubFigure:
    """One layer x head heatmap per model, all on one colour scale (0 to the largest F-Attn)."""
    runs = load_runs(runs)
    models = list(runs.models)
    fig = figure_or_new(fig, 1.2 + 2.4 * len(models), 3.9)
    matrices = [first_token_matrix(runs, model, metric) for model in models]
    notes = [LINEAR_NOTE if runs.layers_of_type(model, LINEAR_ATTENTION) else None for model in models]
    model_heatmaps(fig, runs, models, matrices, cmap=cmap, vmax=vmax,
                   label=METRIC_LABELS.get(metric, metric), notes=notes)
    return fig


@styled
def plot_first_token_by_layer(runs: Any, *, ax: Axes | None = None,
                              metric: str = "f_attn") -> Axes:
    """Head-mean F-Attn per layer, models overlaid, each model's uniform reference dashed.

    The uniform reference mean_t 1/(t+1) is what F-Attn would be if every query spread its
    attention evenly over the keys it can see; a sink is F-Attn well above it.
    """
    runs = load_runs(runs)
    ax = axes_or_new(ax, 6.4, 3.6)
    by_layer = first_token_by_layer(runs, metric)
    if by_layer.empty:
        return not_applicable(ax, "No attention layer has F-Attn in these runs.")
    colors = model_colors(runs.models)
    all_layers: set[int] = set()
    annotated: set[float] = set()  # models on the same queries share one reference label
    for model in runs.models:
        rows = by_layer[by_layer["model"] == model]
        all_layers.update(runs.layers(model))
        if rows.empty:
            continue
        # Markers matter: in hybrid models the attention layers are isolated points.
        ax.plot(rows["layer"], rows["value"], marker="o", color=colors[model], label=plain(model))
        uniform = runs.summary[model].get("f_attn_uniform")
        _draw_uniform_reference(ax, uniform, colors[model], label=uniform not in annotated)
        annotated.add(uniform)
    set_layer_ticks(ax, sorted(all_layers), max_ticks=24)
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_ylim(bottom=0)
    ax.legend(title="model")
    return ax


def _draw_uniform_reference(ax: Axes, value: float | None, color: Any, label: bool) -> None:
    if value is None or not np.isfinite(value):
        return
    ax.axhline(value, linestyle="--", color=color, linewidth=1.0, label="_uniform reference")
    if label:
        ax.annotate("uniform 1/(t+1)", xy=(1.0, value), xycoords=("axes fraction", "data"),
                    xytext=(-2, 2), textcoords="offset points", ha="right", va="bottom",
                    fontsize=7, color=REFERENCE_COLOR)


@styled
def plot_first_token_by_bucket(runs: Any, *, ax: Axes | None = None, log: bool = True) -> Axes:
    """F-Attn by query-position bucket, one line per model, its uniform reference dashed.

    Per bucket: head-mean F-Attn per attention layer, then the mean over layers; the dashed line
    in the model's colour is mean 1/(t+1) over the same queries.
    """
    runs = load_runs(runs)
    ax = axes_or_new(ax, 6.4, 3.6)
    buckets = first_token_by_bucket(runs)
    if buckets.empty:
        return not_applicable(ax, "No run has F-Attn by query position "
                                  "(first_token_buckets.csv).")
    edges = sorted(set(zip(buckets["bucket_lo"], buckets["bucket_hi"])))
    position = {edge: i for i, edge in enumerate(edges)}
    colors = model_colors(runs.models)
    for model in runs.models:
        rows = buckets[buckets["model"] == model]
        if rows.empty:
            continue
        x = [position[edge] for edge in zip(rows["bucket_lo"], rows["bucket_hi"])]
        ax.plot(x, rows["value"], marker="o", color=colors[model], label=plain(model))
        # A wide dash as marker: visible even when the data reached one bucket only.
        ax.plot(x, rows["uniform"], marker="_", markersize=16, linestyle="--", linewidth=1.0,
                color=colors[model], label="_uniform reference")
    ax.set_xticks(range(len(edges)), labels=[bucket_label(lo, hi) for lo, hi in edges])
    ax.set_xlim(-0.5, len(edges) - 0.5)
    ax.set_xlabel("query position t")
    ax.set_ylabel("F-Attn (head-mean, mean over layers)")
    values = np.concatenate([buckets["value"].to_numpy(), buckets["uniform"].to_numpy()])
    values = values[np.isfinite(values) & (values > 0)]
    if log and len(values) and values.max() / values.min() > 10:  # log only over decades
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.legend(title="model (dashed: uniform 1/(t+1))")
    return ax
