"""F-Attn: the attention probability on the first token (paper Table 4, sinks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from probe.reports.tables.frames import first_token_by_bucket, first_token_by_layer, first_token_matrix
from probe.reports.plots._layout import (axes_or_new, figure_or_new, key_band, legend_beside, model_heatmaps,
                                         not_applicable, set_layer_ticks)
from probe.reports.plots.intervals import BAND_ALPHA, draw_band
from probe.reports.plots.choices import check_choice, table_metrics
from probe.reports.runs import load_runs
from probe.reports.labels import LINEAR_ATTENTION
from probe.reports.style import REFERENCE_COLOR, model_colors, styled
from probe.reports.text import plain

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
    check_choice("metric", metric, table_metrics(runs.first_token))
    models = list(runs.models)
    fig = figure_or_new(fig, 1.2 + 2.4 * len(models), 3.9)
    matrices = [first_token_matrix(runs, model, metric) for model in models]
    notes = [LINEAR_NOTE if runs.layers_of_type(model, LINEAR_ATTENTION) else None for model in models]
    model_heatmaps(fig, runs, models, matrices, cmap=cmap, vmax=vmax,
                   label=METRIC_LABELS.get(metric, metric), notes=notes)
    return fig


@styled
def plot_first_token_by_layer(runs: Any, *, ax: Axes | None = None,
                              metric: str = "f_attn") -> Figure | SubFigure:
    """Head-mean F-Attn per layer, models overlaid, each model's uniform reference dashed.

    The uniform reference mean_t 1/(t+1) is what F-Attn would be if every query spread its
    attention evenly over the keys it can see; a sink is F-Attn well above it.
    """
    runs = load_runs(runs)
    check_choice("metric", metric, table_metrics(runs.first_token))
    ax = axes_or_new(ax, 6.4, 3.6)
    by_layer = first_token_by_layer(runs, metric)
    if by_layer.empty:
        return not_applicable(ax, "No attention layer has F-Attn in these runs.")
    colors = model_colors(runs.models)
    all_layers: set[int] = set()
    banded = False
    for model in runs.models:
        rows = by_layer[by_layer["model"] == model]
        all_layers.update(runs.layers(model))
        if rows.empty:
            continue
        # Markers matter: in hybrid models the attention layers are isolated points.
        ax.plot(rows["layer"], rows["value"], marker="o", color=colors[model], label=plain(model))
        if metric == "f_attn":
            banded |= draw_band(ax, runs, model, "f_attn", colors[model])   # 95% interval over sequences
    references = {model: runs.summary[model].get("f_attn_uniform") for model in runs.models
                  if model in set(by_layer["model"])}
    _draw_uniform_references(ax, references, colors)
    if banded:
        key_band(ax, "95% interval", BAND_ALPHA)
    set_layer_ticks(ax, sorted(all_layers), max_ticks=24)
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_ylim(bottom=0)
    legend_beside(ax)
    return ax


def same_reference(values: Sequence[float | None]) -> bool:
    """Do all models have one uniform reference (they read the same queries)?"""
    finite = [float(v) for v in values if v is not None and np.isfinite(v)]
    return len(finite) == len(values) and bool(finite) and np.allclose(finite, finite[0],
                                                                         rtol=1e-9, atol=0)


def _draw_uniform_references(ax: Axes, references: dict[str, float | None],
                             colors: dict[str, Any]) -> None:
    """One grey dashed line when every model has the same reference (coinciding lines in
    model colours would hide each other and their labels); else one per model in its colour."""
    if same_reference(list(references.values())):
        ax.axhline(float(next(iter(references.values()))), linestyle="--", linewidth=1.0,
                   color=REFERENCE_COLOR, label="uniform 1/(t+1)")
        return
    for model, value in references.items():
        if value is not None and np.isfinite(value):
            ax.axhline(value, linestyle="--", color=colors[model], linewidth=1.0,
                       label=f"uniform 1/(t+1), {plain(model)}")


@styled
def plot_first_token_by_bucket(runs: Any, *,
                                ax: Axes | None = None, log: bool = True) -> Figure | SubFigure:
    """F-Attn by query position, one line per model, with the uniform reference.

    Each point pools the queries of one bucket of positions (probe writes powers of two,
    [2^k, 2^(k+1))), drawn at the bucket's first position on a log2 axis: head-mean F-Attn per
    attention layer, then the mean over layers. The dashed line is mean 1/(t+1) over the same
    queries (one grey line where all models share it, else one per model in its colour).
    """
    runs = load_runs(runs)
    ax = axes_or_new(ax, 6.4, 3.6)
    buckets = first_token_by_bucket(runs)
    if buckets.empty:
        return not_applicable(ax, "No run has F-Attn by query position "
                                  "(first_token_buckets.csv).")
    colors = model_colors(runs.models)
    drawn = [model for model in runs.models if (buckets["model"] == model).any()]
    for model in drawn:
        rows = buckets[buckets["model"] == model]
        ax.plot(rows["bucket_lo"], rows["value"], marker="o", color=colors[model],
                label=plain(model))
    uniform = {model: tuple(buckets[buckets["model"] == model]["uniform"].round(12))
               for model in drawn}
    shared = len(set(uniform.values())) == 1
    for model in drawn[:1] if shared else drawn:
        rows = buckets[buckets["model"] == model]
        ax.plot(rows["bucket_lo"], rows["uniform"], linestyle="--", linewidth=1.0,
                marker="_", markersize=10,
                color=REFERENCE_COLOR if shared else colors[model],
                label="uniform 1/(t+1)" if shared else f"uniform 1/(t+1), {plain(model)}")
    starts = sorted(set(buckets["bucket_lo"].astype(int)))
    ax.set_xscale("log", base=2)
    # Past 8 buckets, every other one named (1, 4, 16, ...): on a half-page axis "128" and
    # "256" ran together as "128256".
    step = 1 if len(starts) <= 8 else 2
    ax.set_xticks(starts, labels=[position_label(start) if index % step == 0 else ""
                                  for index, start in enumerate(starts)])
    ax.minorticks_off()
    if len(starts) == 1:
        ax.set_xlim(starts[0] / 2, starts[0] * 2)
    ax.set_xlabel("query position t (first position of each bucket)")
    ax.set_ylabel("F-Attn (mean over heads, layers)")
    values = np.concatenate([buckets["value"].to_numpy(), buckets["uniform"].to_numpy()])
    values = values[np.isfinite(values) & (values > 0)]
    if log and len(values) and values.max() / values.min() > 10:  # log only over decades
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    legend_beside(ax, title=None)
    return ax


def position_label(position: int) -> str:
    """1024 -> "1K", 1048576 -> "1M", 96 -> "96"."""
    for size, suffix in ((1 << 20, "M"), (1 << 10, "K")):
        if position >= size and position % size == 0:
            return f"{position // size}{suffix}"
    return str(position)
