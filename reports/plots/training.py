"""Training curves of trained runs: loss, grad norm and loss spikes per step."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure, SubFigure

from reports.plots._layout import figure_or_new, legend_entries, legend_outside, not_applicable
from reports.runs import load_runs
from reports.style import model_colors, styled
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
