"""Sparsity of the attention output: ungated, uniform mean-gate control, dynamic gate (Figure 5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure, SubFigure

from probe.reports.tables.frames import sparsity_at, sparsity_sweep
from probe.reports.plots._layout import (figure_or_new, legend_entries, legend_outside, legend_width,
                                         not_applicable, panel_title, set_layer_ticks, side_by_side)
from probe.reports.plots.intervals import layer_intervals
from probe.reports.runs import load_runs
from probe.reports.labels import HEADLINE_THRESHOLDS, VARIANT_LABELS, VARIANTS
from probe.reports.style import model_colors, styled
from probe.reports.text import plain

# Light to dark: from no gate to the dynamic gate, the order in which sparsity should grow.
VARIANT_COLORS = {"ungated": "#b8b8b8", "mean_gate": "#6baed6", "gated": "#08519c"}


@styled
def plot_sparsity_by_layer(runs: Any, *, fig: Figure | SubFigure | None = None,
                           thresholds: Sequence[float] = HEADLINE_THRESHOLDS
                           ) -> Figure | SubFigure:
    """Rows: models; columns: thresholds; bars: share of |x| < threshold per layer and variant.

    A baseline has only `ungated` (= `gated`, as nothing gates it) and no mean-gate control.
    """
    runs = load_runs(runs)
    models = list(runs.models)
    # Wider panels for deep models: three bars per layer must stay visible.
    most_layers = max(runs.rows("sparsity", model)["layer"].nunique() for model in models)
    panel_width = min(max(2.5 + 0.12 * most_layers, 4.2), 7.0)
    fig = figure_or_new(fig, 2.2 + panel_width * len(thresholds), 0.5 + 2.0 * len(models))
    # A column's panels share one y scale, so that bar heights compare across models, unless the
    # models' shares differ so much that the smaller ones would be unreadable (Gemma 3 next to a
    # toy arm): then each panel its own, and the caption says so (sparsity_scales_shared).
    shared = sparsity_scales_shared(runs, thresholds)
    axes = fig.subplots(len(models), len(thresholds), squeeze=False, sharey="col" if shared else False)
    tops = np.full((len(models), len(thresholds)), np.nan)  # each panel's tallest bar or whisker
    for column, threshold in enumerate(thresholds):
        at_threshold = sparsity_at(runs, threshold)
        for row, model in enumerate(models):
            ax = axes[row][column]
            rows = at_threshold[at_threshold["model"] == model]
            if rows.empty:
                not_applicable(ax, f"{model}: no sparsity at threshold {threshold:g}")
                continue
            tops[row][column] = _variant_bars(
                ax, rows, gated=runs.is_gated(model),
                intervals={v: layer_intervals(runs, model, "sparsity", v, f"{threshold:g}")
                           for v in VARIANTS})
            # One title line and one axis label per figure where they fit: a page that draws
            # five models' rows shorter (the PDF) keeps the height for the bars.
            panel_title(ax, f"{model}, |x| < {threshold:g}", panels=len(thresholds))
            if row < len(models) - 1:
                ax.set_xlabel("")
    # Headroom above the tallest bar or whisker of a panel (of its column, where the column
    # shares a scale): matplotlib's 5% left the tallest bars touching the frame and their upper
    # whiskers on it.
    for column in range(len(thresholds)):
        for row in range(len(models)):
            known = tops[:, column] if shared else tops[row, column:column + 1]
            top = max(known[np.isfinite(known)], default=np.nan)
            if top > 0:
                axes[row][column].set_ylim(0, BAR_HEADROOM * top)
    fig.supylabel("share below threshold", fontsize=mpl.rcParams["axes.labelsize"])
    legend_outside(axes[0][-1], *legend_entries(axes.ravel()), title="attention output")
    return fig


# The y axis of a bar panel ends this much above its tallest bar or whisker.
BAR_HEADROOM = 1.15

# The largest ratio between two models' tallest bars at one threshold that still shares a scale:
# beyond it the shorter model's bars would be a few pixels high.
SHARED_SCALE_RATIO = 5.0


def sparsity_scales_shared(runs: Any, thresholds: Sequence[float] = HEADLINE_THRESHOLDS) -> bool:
    """Whether plot_sparsity_by_layer draws each column (threshold) on one y scale: at every
    threshold, the models' largest shares lie within SHARED_SCALE_RATIO of each other."""
    runs = load_runs(runs)
    for threshold in thresholds:
        rows = sparsity_at(runs, threshold)
        tallest = rows.groupby("model")["value"].max().dropna()
        tallest = tallest[tallest > 0]
        if len(tallest) > 1 and tallest.max() > SHARED_SCALE_RATIO * tallest.min():
            return False
    return True


def _variant_bars(ax, rows, gated: bool, intervals=None) -> float:
    """intervals: variant -> {layer: (lo, hi)}, the 95% intervals drawn as error bars (summary.json's
    per-layer sparsity_lo / _hi: runs without per_sequence.csv, or the one-pass control, have none).
    Returns the top of the tallest bar or whisker (NaN where none is finite)."""
    top = np.nan
    # Without a gate, `gated` repeats `ungated`: one bar says it without implying a gate.
    variants = [v for v in VARIANTS if v in set(rows["variant"]) and (gated or v == "ungated")]
    layers = sorted(int(layer) for layer in rows["layer"].unique())
    positions = np.arange(len(layers))
    for variant, (offset, width) in zip(variants, side_by_side(len(variants))):
        values = rows[rows["variant"] == variant].set_index("layer")["value"]
        heights = np.array([values.get(layer, np.nan) for layer in layers], dtype=float)
        found = (intervals or {}).get(variant) or {}
        yerr = None
        if found:
            lo = np.array([found.get(layer, (np.nan, np.nan))[0] for layer in layers])
            hi = np.array([found.get(layer, (np.nan, np.nan))[1] for layer in layers])
            yerr = np.nan_to_num(np.vstack([heights - lo, hi - heights]).clip(min=0))
        upper = heights + (yerr[1] if yerr is not None else 0.0)
        if np.isfinite(upper).any():
            top = np.nanmax([top, np.nanmax(upper)])
        ax.bar(positions + offset, heights, width, color=VARIANT_COLORS[variant],
               label=VARIANT_LABELS[variant], linewidth=0, yerr=yerr,
               error_kw={"elinewidth": 0.6, "capsize": 0, "ecolor": "#333333"})
    # Bars sit at 0..n-1 so that hybrid models have no gaps for their linear layers.
    set_layer_ticks(ax, layers, positions=positions, max_ticks=12)
    ax.grid(axis="x", visible=False)
    return float(top)


@styled
def plot_sparsity_sweep(runs: Any, *, fig: Figure | SubFigure | None = None
                        ) -> Figure | SubFigure:
    """Share of |x| below each threshold of the sweep (log x), one panel per variant."""
    runs = load_runs(runs)
    sweep = sparsity_sweep(runs)
    # A baseline's "gated" is its ungated output again and it has no mean-gate control: a
    # panel for a variant that no gated model has would stay empty.
    drawn = {(model, variant) for model, variant in zip(sweep["model"], sweep["variant"])
             if variant == "ungated" or runs.is_gated(model)}
    variants = [variant for variant in VARIANTS if any(v == variant for _, v in drawn)]
    # Panels of 3.2 in whatever the legend beside them takes (long GGUF names made the one
    # panel of ungated models 130 px wide).
    labels = [plain(model) for model in runs.models if any(m == model for m, _ in drawn)]
    fig = figure_or_new(fig, 1.0 + 3.2 * max(len(variants), 1) + legend_width(labels), 3.3)
    if not variants:
        not_applicable(fig.add_subplot(), "No sparsity table in these runs.")
        return fig
    axes = fig.subplots(1, len(variants), squeeze=False, sharey=True)[0]
    colors = model_colors(runs.models)
    for ax, variant in zip(axes, variants):
        for model in runs.models:
            if (model, variant) not in drawn:
                continue
            rows = sweep[(sweep["model"] == model) & (sweep["variant"] == variant)]
            if rows.empty:
                continue
            ax.plot(rows["threshold"], rows["value"], marker="o", markersize=3,
                    color=colors[model], label=plain(model))
        ax.set_xscale("log")
        ax.set_title(VARIANT_LABELS[variant])
        ax.set_xlabel("threshold τ")
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("share of |x| < τ (mean over layers)")
    legend_outside(axes[-1], *legend_entries(axes))
    return fig
