"""Continued training, measured at each saved step (trajectory.csv): held-out loss, F-Attn, the
base's sink layers, sink rate, M-Act and mean gate against the step, one line per model."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure, SubFigure

from probe.reports.plots._layout import figure_or_new, legend_entries, legend_outside, not_applicable
from probe.reports.runs import load_runs
from probe.reports.style import model_colors, styled
from probe.reports.text import plain

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")

# (metric of trajectory.csv, panel title), in panel order.
PANELS = (("loss", "held-out loss"), ("f_attn", "F-Attn (t ≥ 1)"),
          ("f_attn_sink_layers", "F-Attn, base's sink layers"), ("sink_rate", "sink rate"),
          ("m_act", "M-Act"), ("mean_gate", "mean gate"))


@styled
def plot_trajectory(runs: Any, *, fig: Figure | SubFigure | None = None) -> Figure | SubFigure:
    """One panel per metric against the training step, one line per model with markers at the
    measured steps. A model measured at one step only (the base, before any training) is a
    dashed horizontal line across the panel, so the arms read against it."""
    runs = load_runs(runs)
    frame = runs.trajectory.dropna(subset=["value"])
    fig = figure_or_new(fig, 11.0, 5.6)
    if frame.empty:
        not_applicable(fig.add_subplot(), "No run has a trajectory (trajectory.csv): no continued training was measured.")
        return fig
    axes = fig.subplots(2, 3).ravel()
    colors = model_colors(runs.models)
    # A marker of its own per model as well: arms that differ only in seed sit on top of each
    # other, and colour alone does not separate seven lines for every reader.
    markers = {model: MARKERS[index % len(MARKERS)] for index, model in enumerate(runs.models)}
    for ax, (metric, title) in zip(axes, PANELS):
        rows = frame[frame["metric"] == metric]
        for model in runs.models:
            mine = rows[rows["model"] == model].sort_values("step")
            if mine.empty:
                continue
            if mine["step"].nunique() == 1:
                ax.axhline(float(mine["value"].iloc[0]), color=colors[model], linestyle="--",
                           linewidth=1.2, label=plain(model))
            else:
                ax.plot(mine["step"], mine["value"], marker=markers[model], markersize=3.5, linewidth=1.2,
                        color=colors[model], label=plain(model))
        if rows.empty:
            not_applicable(ax, f"no model has {title}")
            continue
        ax.set_title(title)
        ax.set_xlabel("step")
    legend_outside(axes[2], *legend_entries(list(axes)))
    return fig
