"""Gate scores: per-layer distributions (Figure 3) and statistics (Figure 7), heads, saturation."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from probe.reports.tables.frames import (gate_hist_by_layer, gate_matrix, gate_saturation, gate_score_top,
                                        gate_stats_by_layer)
from probe.reports.plots._layout import (axes_or_new, figure_or_new, grid_shape, key_band, key_line,
                                         legend_beside, legend_entries, legend_outside, log_headroom,
                                         model_heatmaps, not_applicable, set_layer_ticks, spread)
from probe.reports.labels import GATE_GROUPS
from probe.reports.plots.choices import check_choice, table_metrics
from probe.reports.runs import Runs, load_runs
from probe.reports.style import model_colors, styled
from probe.reports.text import plain

NO_GATE_NOTE = "no gate scores"
STD_ALPHA = 0.18


def no_gate_message(runs: Runs) -> str:
    baselines = ", ".join(runs.ungated_models) or "none"
    return f"No gated model in these runs (without a gate: {baselines})."


@styled
def plot_gate_histograms(runs: Any, *, fig: Figure | SubFigure | None = None,
                         layers: Sequence[int] | None = None, max_layers: int = 12,
                         log: bool = True, max_columns: int = 6) -> Figure | SubFigure:
    """One panel per layer: the share of gate scores in each of the 50 bins, models overlaid.

    Without `layers`, at most `max_layers` gated layers, evenly spread from first to last.
    """
    runs = load_runs(runs)
    hist = gate_hist_by_layer(runs)
    shown = histogram_layers(runs, max_layers) if layers is None else list(layers)
    rows, columns = grid_shape(len(shown), max_columns)
    if not shown:                 # sized for its note: a grid of no rows is 0.6 inches high
        fig = figure_or_new(fig, 6.4, 1.6)
        not_applicable(fig.add_subplot(), no_gate_message(runs))
        return fig
    fig = figure_or_new(fig, 0.6 + 2.1 * columns, 0.6 + 1.8 * rows)
    # x not shared: shared axes share their tick labels, and each panel labels its own (below).
    axes = fig.subplots(rows, columns, squeeze=False, sharey=True).ravel()
    colors = model_colors(runs.models)
    top = gate_score_top(runs)              # 1 (sigmoid gates), 2 (grafted 2 * sigmoid gates)
    for index, (ax, layer) in enumerate(zip(axes, shown)):
        for model in runs.models:
            bins = hist[(hist["model"] == model) & (hist["layer"] == layer)]
            if bins.empty:
                continue
            edges = np.append(bins["bin_lo"].to_numpy(), bins["bin_hi"].iloc[-1])
            ax.stairs(bins["share"].to_numpy(), edges, baseline=None, color=colors[model],
                      linewidth=1.2, label=plain(model))
        ax.set_title(f"layer {layer}", fontsize=8.5)
        ax.set_xlim(0, top)
        # "0", "0.5", "1"; a panel with a neighbour on its left leaves its 0 unlabelled: next to
        # that neighbour's 1 it read as one number ("1 0", "2 0").
        labels = [f"{t:g}" for t in (0, top / 2, top)]
        if index % columns:
            labels[0] = ""
        ax.set_xticks([0, top / 2, top], labels=labels)
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    if log and (hist["share"] > 0).any():   # no finite score anywhere (a NaN model): no log axis
        axes[0].set_yscale("log")
        log_headroom(axes[0])               # a labelled decade above the largest share
    for index, ax in enumerate(axes[:len(shown)]):
        if index % columns == 0:
            ax.set_ylabel("share of scores")
        if index + columns >= len(shown):  # nothing below it: label its x axis
            ax.set_xlabel("gate score")
        else:                              # the panel below has the same x range, labelled
            ax.tick_params(axis="x", labelbottom=False)
    legend_outside(axes[min(columns, len(shown)) - 1], *legend_entries(axes))
    return fig


def histogram_layers(runs: Runs, max_layers: int = 12) -> list[int]:
    """The layers `plot_gate_histograms` shows by default."""
    return spread(set(gate_hist_by_layer(runs)["layer"].astype(int)), max_layers)


@styled
def plot_gate_stats_by_layer(runs: Any, *,
                              ax: Axes | None = None, group: str = "all") -> Figure | SubFigure:
    """Per layer: mean gate score (line), ±1 std (band), min and max (thin dashed lines)."""
    check_choice("group", group, GATE_GROUPS)
    runs = load_runs(runs)
    ax = axes_or_new(ax, 6.4, 3.6)
    stats = gate_stats_by_layer(runs, group)
    if stats.empty:
        return not_applicable(ax, no_gate_message(runs))
    colors = model_colors(runs.models)
    layers: set[int] = set()
    for model in runs.models:
        rows = stats[stats["model"] == model]
        if rows.empty:
            continue
        layers.update(runs.layers(model))
        color = colors[model]
        ax.plot(rows["layer"], rows["mean"], marker="o", color=color, label=plain(model))
        ax.fill_between(rows["layer"], rows["mean"] - rows["std"], rows["mean"] + rows["std"],
                        color=color, alpha=STD_ALPHA, linewidth=0)
        for extreme in ("min", "max"):
            ax.plot(rows["layer"], rows[extreme], linestyle="--", linewidth=0.8, color=color,
                    alpha=0.7, label=f"_{extreme}")
    key_band(ax, "mean ± 1 std", STD_ALPHA)
    key_line(ax, "min, max", linestyle="--", linewidth=0.8)
    set_layer_ticks(ax, sorted(layers), max_ticks=24)
    top = gate_score_top(runs)              # 1 (sigmoid gates), 2 (grafted 2 * sigmoid gates)
    ax.set_ylim(-0.02 * top, 1.02 * top)
    ax.set_ylabel("gate score")
    legend_beside(ax)
    return ax


@styled
def plot_gate_heatmap(runs: Any, *, fig: Figure | SubFigure | None = None,
                      metric: str = "mean", group: str = "all", cmap: str = "viridis",
                      vmax: float | None = None) -> Figure | SubFigure:
    """Layer x head mean gate score per gated model, on one shared colour scale."""
    check_choice("group", group, GATE_GROUPS)
    runs = load_runs(runs)
    check_choice("metric", metric, table_metrics(runs.gates))
    models = runs.gated_models
    fig = figure_or_new(fig, 1.2 + 2.4 * max(len(models), 1), 3.9)
    if not models:
        not_applicable(fig.add_subplot(), no_gate_message(runs))
        return fig
    matrices = [gate_matrix(runs, model, metric, group) for model in models]
    notes = [NO_GATE_NOTE if np.isnan(matrix).any() else None for matrix in matrices]
    model_heatmaps(fig, runs, models, matrices, cmap=cmap, vmax=vmax,
                   label=f"gate score ({metric})", notes=notes)
    return fig


@styled
def plot_gate_saturation(runs: Any, *,
                          ax: Axes | None = None, group: str = "all") -> Figure | SubFigure:
    """Cumulative share of gate scores below 0.01, 0.1, 0.5, 0.9 and 0.99, one line per model,
    pooled over layers and heads with their element counts; logit x axis, on which the five
    thresholds are evenly spaced.

    gates.csv saves the shares below 0.01, 0.1, 0.5 and above 0.9, 0.99; the last two enter as
    1 - share above, so every point is "share of scores below x" and the line only rises.
    """
    check_choice("group", group, GATE_GROUPS)
    runs = load_runs(runs)
    ax = axes_or_new(ax, 6.4, 3.4)
    shares = gate_saturation(runs, group)
    if shares.empty:
        return not_applicable(ax, no_gate_message(runs))
    models = [model for model in runs.models if model in set(shares["model"])]
    colors = model_colors(runs.models)
    for model in models:
        points = cumulative_saturation(shares[shares["model"] == model])
        ax.plot(list(points), list(points.values()), marker="o", color=colors[model],
                label=plain(model))
    top = gate_score_top(runs)              # 1 (sigmoid gates), 2 (grafted 2 * sigmoid gates)
    if top > 1:
        # A logit axis ends at 1 and left a 2 * sigmoid gate's scores above 0.99 (42% of a
        # graft's) off the plot: the logit of x / top covers the gate's whole range (0, top),
        # the gate's own pre-activation scale, with ticks placed symmetrically about top / 2.
        ax.set_xscale("function", functions=(functools.partial(_logit_of_share, top=top),
                                             functools.partial(_score_of_logit, top=top)))
        ticks = [top * share for share in (0.005, 0.05, 0.25, 0.5, 0.75, 0.95, 0.995)]
        label = f"gate score x (logit scale of x / {top:g})"
        # Half the first threshold's share of the range, so its point is not on the frame.
        limits = (0.0025 * top, 0.9975 * top)
    else:
        ax.set_xscale("logit")
        ticks = list(SATURATION_THRESHOLDS.values())
        label = "gate score x (logit scale)"
        limits = (0.005, 0.995)
    ax.set_xticks(ticks, labels=[f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlim(*limits)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(label)
    ax.set_ylabel("share below x")
    legend_beside(ax)
    return ax


def _logit_of_share(score, top: float):
    """log(p / (1 - p)) of p = score / top, clipped inside (0, 1) (matplotlib also maps the
    axis' margins, which may reach past the range)."""
    share = np.clip(np.asarray(score, dtype=float) / top, 1e-12, 1 - 1e-12)
    return np.log(share / (1 - share))


def _score_of_logit(value, top: float):
    return top / (1 + np.exp(-np.asarray(value, dtype=float)))


# The gate score each saturation metric of gates.csv is about.
SATURATION_THRESHOLDS = {"frac_lt_0.01": 0.01, "frac_lt_0.1": 0.1, "frac_lt_0.5": 0.5,
                         "frac_gt_0.9": 0.9, "frac_gt_0.99": 0.99}


def cumulative_saturation(rows) -> dict[float, float]:
    """{threshold: share of scores below it} from one model's gate_saturation rows."""
    values = dict(zip(rows["metric"], rows["value"]))
    points = {}
    for metric, threshold in SATURATION_THRESHOLDS.items():
        if metric in values:
            share = float(values[metric])
            points[threshold] = 1.0 - share if metric.startswith("frac_gt") else share
    return points
