"""Training curves of trained runs: loss, grad norm and loss spikes per step."""

from __future__ import annotations

from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from reports.plots._layout import (axes_or_new, figure_or_new, legend_entries, legend_outside,
                                   not_applicable)
from reports.runs import load_runs
from reports.style import REFERENCE_COLOR, model_colors, styled
from reports.text import plain


@styled
def plot_training(runs: Any, *, fig: Figure | SubFigure | None = None) -> Figure | SubFigure:
    """Left: train loss (line) and eval loss (dashed, markers); right: gradient norm.

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
        loss_ax.plot(rows["step"], rows["train_loss"], color=color, label=plain(model))
        evals = rows.dropna(subset=["eval_loss"])
        loss_ax.plot(evals["step"], evals["eval_loss"], linestyle="--", marker="o",
                     markersize=3, color=color, label="_eval")
        grad_ax.plot(rows["step"], rows["grad_norm"], color=color, linewidth=0.9,
                     label=plain(model))
        spikes = rows[rows["spike"]]
        loss_ax.scatter(spikes["step"], spikes["train_loss"], marker="x", color="black",
                        zorder=3, label="_spike")
        grad_ax.scatter(spikes["step"], spikes["grad_norm"], marker="x", color="black",
                        zorder=3, label="_spike")
    loss_ax.set_ylabel("loss (solid: train, dashed: eval)")
    grad_ax.set_ylabel("gradient norm")
    for ax in (loss_ax, grad_ax):
        ax.set_xlabel("step")
    legend_outside(grad_ax, *legend_entries([loss_ax]))
    return fig


@styled
def plot_loss_by_length(runs: Any, *, ax: Axes | None = None) -> Axes:
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
    ax.legend(title="model")
    return ax


def training_lengths(runs: Any) -> set[int]:
    """Analysed sequence lengths (meta.json seq_len) of the runs with an inference table."""
    found = set()
    for model in set(runs.inference["model"]):
        value = runs.meta.get(model, {}).get("seq_len")
        if isinstance(value, (int, float)) and value > 0:
            found.add(int(value))
    return found
