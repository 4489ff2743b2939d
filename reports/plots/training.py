"""Training curves of trained runs: loss, grad norm and loss spikes per step."""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from probe.reports.plots._layout import (axes_or_new, figure_or_new, legend_beside, legend_entries,
                                         legend_outside, not_applicable)
from probe.reports.runs import load_runs
from probe.reports.style import REFERENCE_COLOR, model_colors, styled
from probe.reports.text import plain


@styled
def plot_training(runs: Any, *, fig: Figure | SubFigure | None = None) -> Figure | SubFigure:
    """Left: train loss and eval loss (dashed, markers, drawn on top); right: gradient norm.

    Raw per-step values are faint, their centred moving average over 2% of the steps solid.
    Steps flagged as spikes in training.csv are marked with a black x on both panels.
    """
    runs = load_runs(runs)
    log = runs.training
    fig = figure_or_new(fig, 10.0, 3.5)
    if log.empty:
        not_applicable(fig.add_subplot(), "No run has a training log (training.csv).")
        return fig
    loss_ax, grad_ax = fig.subplots(1, 2)
    colors = model_colors(runs.models)
    for model in runs.models:
        rows = log[log["model"] == model].sort_values("step")
        if rows.empty:
            continue
        color = colors[model]
        window = smoothing_window(len(rows))
        for ax, column in ((loss_ax, "train_loss"), (grad_ax, "grad_norm")):
            # Raw steps faint, their moving average solid: three raw curves on top of each
            # other hide one another and the eval line.
            ax.plot(rows["step"], rows[column], color=color, linewidth=0.5, alpha=0.3,
                    label="_raw")
            ax.plot(rows["step"], smoothed(rows[column], window), color=color, linewidth=1.3,
                    label=plain(model))
        evals = rows.dropna(subset=["eval_loss"])
        loss_ax.plot(evals["step"], evals["eval_loss"], linestyle="--", marker="o",
                     markersize=4, markeredgecolor="black", markeredgewidth=0.6,
                     linewidth=1.3, color=color, zorder=4, label="_eval")
        spikes = rows[rows["spike"]]
        loss_ax.scatter(spikes["step"], spikes["train_loss"], marker="x", color="black",
                        zorder=5, label="_spike")
        grad_ax.scatter(spikes["step"], spikes["grad_norm"], marker="x", color="black",
                        zorder=5, label="_spike")
    loss_ax.set_ylabel("loss")  # the legend says which line is held-out
    if log["eval_loss"].notna().any():
        loss_ax.plot([], [], linestyle="--", marker="o", markersize=4, color=REFERENCE_COLOR,
                     markeredgecolor="black", markeredgewidth=0.6, label="held-out (eval)")
    grad_ax.set_ylabel("gradient norm")
    for ax in (loss_ax, grad_ax):
        ax.set_xlabel("step")
    legend_outside(grad_ax, *legend_entries([loss_ax]))
    return fig


# The centred moving average spans 1/SMOOTHING_DIVISOR of the logged steps (the caption says
# how much, from this constant).
SMOOTHING_DIVISOR = 50


def smoothing_window(steps: int) -> int:
    """Steps of the centred moving average: 2% of the logged steps, at least 1."""
    return max(1, round(steps / SMOOTHING_DIVISOR))


def smoothed(values: pd.Series, window: int) -> pd.Series:
    return values.rolling(window, min_periods=1, center=True).mean()


@styled
def plot_loss_by_length(runs: Any, *, ax: Axes | None = None) -> Figure | SubFigure:
    """Held-out loss by input length (inference.csv of trained runs), one line per model.

    The dotted vertical line marks the analysed sequence length (meta.json seq_len), which
    examples/demo.py sets to the training length.
    """
    runs = load_runs(runs)
    ax = axes_or_new(ax, 6.4, 3.6)
    rows = runs.inference[runs.inference["metric"] == "eval_loss"].dropna(subset=["value"])
    if rows.empty:
        return not_applicable(ax, "No run has held-out loss by input length (inference.csv).")
    colors = model_colors(runs.models)
    lengths: set[int] = set()
    for model in runs.models:
        mine = rows[rows["model"] == model].sort_values("length")
        if mine.empty:
            continue
        lengths.update(mine["length"].astype(int))
        ax.plot(mine["length"], mine["value"], marker="o", color=colors[model],
                label=plain(model))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(lengths), labels=[str(n) for n in sorted(lengths)])
    ax.minorticks_off()
    for length in sorted(training_lengths(runs)):
        ax.axvline(length, color=REFERENCE_COLOR, linestyle=":", linewidth=1.0)
        ax.annotate("analysed length", xy=(length, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(3, -3), textcoords="offset points", ha="left", va="top",
                    fontsize=7, color=REFERENCE_COLOR)
    ax.set_xlabel("input length (tokens)")
    ax.set_ylabel("held-out loss")
    legend_beside(ax)
    return ax


def training_lengths(runs: Any) -> set[int]:
    """Analysed sequence lengths (meta.json seq_len) of the runs with an inference table."""
    found = set()
    for model in set(runs.inference["model"]):
        value = runs.meta.get(model, {}).get("seq_len")
        if isinstance(value, (int, float)) and value > 0:
            found.add(int(value))
    return found
