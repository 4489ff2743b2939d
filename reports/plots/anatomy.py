"""Sink anatomy (probe analyze --anatomy): which key positions receive attention, whether the
sinks carry value, where gated heads close their gates; and, for a gated and a baseline run on
the same tokens, the baseline's F-Attn beside the gated model's mean gate, head by head.

The `*_frame` / `*_matrix` functions return exactly what the figures draw, so that a test (or a
notebook) can compare a figure with its table.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure, SubFigure
from matplotlib.patches import Rectangle

from probe.reports.plots._layout import (figure_or_new, legend_outside, not_applicable, panel_title,
                                         set_layer_ticks, staggered_ticks)
from probe.reports.claims.pairs import gate_pairs
from probe.reports.runs import Runs, load_runs
from probe.reports.tables.frames import gate_score_top
from probe.reports.labels import SINK_MIN_QUERIES
from probe.reports.style import HATCH_COLOR, MISSING_COLOR, REFERENCE_COLOR, model_colors, styled
from probe.reports.text import plain

POOLED_HEADS = -1           # received_by_position's head of the mean over heads
# More key-position columns than this (16 exact positions and the buckets past them) are
# labelled on alternate sides of the panel, below and above, so that every column keeps its label.
ONE_SIDE_COLUMNS = 12
FEW_QUERIES_GID = "few-queries"   # the hatching over key buckets seen by too few queries
# The share of the x range the F-Attn scatter leaves left of 0, for the markers at 0.
SCATTER_MARGIN = 0.03
# The log colour scale spans at most this many decades below the largest cell: a sink near 1
# and the ordinary keys near 1/T stay apart, and a stray tiny cell does not flatten the rest.
LOG_DECADES = 4
NO_ANATOMY = "No run has received-attention tables (probe analyze --anatomy)."
NO_GATE_SINK = "No gated run has gate-sink tables (gate_sink.csv, probe analyze --anatomy)."
NO_PAIR = ("No gated and baseline run read the same token ids (meta.json tokens_sha256), so "
           "no head-by-head comparison.")


# -- what the figures draw ------------------------------------------------------------------

def key_label(lo: float, hi: float) -> str:
    """Exact positions as themselves ("7"), buckets as their first and last position ("16-31"),
    the open last bucket as "1048576+"."""
    if not math.isfinite(hi):
        return f"{int(lo)}+"
    if hi - lo == 1:
        return str(int(lo))
    return f"{int(lo)}-{int(hi) - 1}"


def received_buckets(runs: Runs) -> list[tuple[float, float]]:
    """(key_lo, key_hi) of every bucket any run saved, in position order: one x axis for all
    panels, so equal columns are equal positions."""
    frame = runs.received_by_position
    return sorted(set(zip(frame["key_lo"].astype(float), frame["key_hi"].astype(float))))


def received_matrix(runs: Runs, model: str, head: int = POOLED_HEADS,
                    value: str = "score") -> np.ndarray:
    """(layers, buckets) of `value` of `model` (head -1: pooled over heads); NaN where the run
    has no cell (a layer without softmax attention, a bucket past its sequences)."""
    buckets = received_buckets(runs)
    rows = runs.rows("received_by_position", model)
    rows = rows[rows["head"] == head]
    matrix = np.full((runs.num_layers(model), len(buckets)), np.nan)
    column = {bucket: j for j, bucket in enumerate(buckets)}
    for layer, lo, hi, number in zip(rows["layer"], rows["key_lo"], rows["key_hi"], rows[value]):
        matrix[int(layer), column[(float(lo), float(hi))]] = number
    return matrix


def anatomy_models(runs: Runs, table: str = "received_by_position") -> list[str]:
    frame = runs.table(table)
    present = set(frame["model"])
    return [model for model in runs.models if model in present]


def value_drains_by_layer(runs: Runs) -> pd.DataFrame:
    """model, layer, value_norm_ratio, projection_share: the mean over heads (heads without a
    sink key, NaN, left out) per layer."""
    drains = runs.value_drains
    columns = ["model", "layer", "value_norm_ratio", "projection_share"]
    if drains.empty:
        return pd.DataFrame(columns=columns)
    means = drains.groupby(["model", "layer"], sort=False)[columns[2:]].mean().reset_index()
    return _in_model_order(means, runs).sort_values(["model", "layer"], kind="stable")[columns]


def gate_sink_by_layer(runs: Runs) -> pd.DataFrame:
    """model, layer, attention_lo, queries, attention, gate: gate_sink.csv pooled over heads,
    each head's bin weighted by its queries."""
    table = runs.gate_sink
    columns = ["model", "layer", "attention_lo", "queries", "attention", "gate"]
    if table.empty:
        return pd.DataFrame(columns=columns)
    weighted = table.assign(attention=table["attention"] * table["queries"],
                            gate=table["gate"] * table["queries"])
    sums = weighted.groupby(["model", "layer", "attention_lo"], sort=False)[
        ["queries", "attention", "gate"]].sum().reset_index()
    sums["attention"] /= sums["queries"]
    sums["gate"] /= sums["queries"]
    ordered = _in_model_order(sums, runs).sort_values(["model", "layer", "attention_lo"],
                                                      kind="stable")
    return ordered[columns].reset_index(drop=True)


def f_attn_vs_gate(runs: Runs, baseline: str, gated: str) -> pd.DataFrame:
    """layer, head, f_attn (the baseline's, first_token.csv) and gate (the gated run's mean gate,
    gates.csv, all positions) for every (layer, head) both runs have."""
    first = runs.rows("first_token", baseline)
    first = first[first["metric"] == "f_attn"][["layer", "head", "value"]]
    gates = runs.rows("gates", gated)
    gates = gates[(gates["metric"] == "mean") & (gates["group"] == "all")][
        ["layer", "head", "value"]]
    joined = first.merge(gates, on=["layer", "head"], suffixes=("_f", "_g")).dropna()
    joined = joined.rename(columns={"value_f": "f_attn", "value_g": "gate"})
    joined[["layer", "head"]] = joined[["layer", "head"]].astype(int)
    return joined.sort_values(["layer", "head"], kind="stable").reset_index(drop=True)


def _in_model_order(frame: pd.DataFrame, runs: Runs) -> pd.DataFrame:
    return frame.assign(model=pd.Categorical(frame["model"], categories=list(runs.models)))


def log_norm(matrices: list[np.ndarray]) -> Normalize:
    """One log colour scale for all panels: up to the largest cell, down to the smallest
    positive one but at most LOG_DECADES below the top."""
    values = np.concatenate([m[np.isfinite(m) & (m > 0)] for m in matrices] or [np.array([])])
    if not len(values):
        return LogNorm(vmin=1e-3, vmax=1.0)
    high = float(values.max())
    low = max(float(values.min()), high / 10 ** LOG_DECADES)
    return LogNorm(vmin=min(low, high / 10), vmax=high)


# -- figures --------------------------------------------------------------------------------

def sink_bar(runs: Runs, model: str) -> int:
    """The queries a key needs to name a secondary sink in this run (meta.json)."""
    return int(runs.meta[model].get("anatomy_sink_min_queries") or SINK_MIN_QUERIES)


def few_query_columns(runs: Runs, model: str) -> list[int]:
    """Columns (buckets of received_buckets) whose keys are seen by fewer than the run's bar of
    queries on average: the end of its sequences, where recency lifts every score."""
    rows = runs.rows("received_by_position", model)
    rows = rows[rows["head"] == POOLED_HEADS].drop_duplicates(["key_lo", "key_hi"])
    column = {bucket: j for j, bucket in enumerate(received_buckets(runs))}
    bar = sink_bar(runs, model)
    return sorted(column[(float(lo), float(hi))] for lo, hi, cells, queries in
                  zip(rows["key_lo"], rows["key_hi"], rows["cells"], rows["queries"])
                  if cells and queries / cells < bar)


@styled
def plot_received_attention(runs: Any, *, fig: Figure | SubFigure | None = None,
                            cmap: str = "magma_r",
                            epsilon: float | None = None) -> Figure | SubFigure:
    """Key position x layer heatmap of the attention each key receives (Gu et al.'s importance
    score, pooled over heads), one panel per run with the table, one log colour scale.

    Columns are the exact positions 0-15, then power-of-two buckets; `epsilon`, where given,
    is marked on the colour bar (the sink threshold)."""
    runs = load_runs(runs)
    models = anatomy_models(runs)
    buckets = received_buckets(runs) if models else []
    tallest = max([runs.num_layers(model) for model in models] or [1])
    fig = figure_or_new(fig, 1.4 + (0.16 * len(buckets) + 1.1) * max(len(models), 1),
                        2.2 + 0.13 * min(tallest, 36))
    if not models:
        not_applicable(fig.add_subplot(), NO_ANATOMY)
        return fig
    matrices = [received_matrix(runs, model) for model in models]
    norm = log_norm(matrices)
    from matplotlib import colormaps
    colours = colormaps[cmap].with_extremes(bad=MISSING_COLOR)
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    labels = [key_label(lo, hi) for lo, hi in buckets]
    image = None
    for ax, model, matrix in zip(axes, models, matrices):
        # Cells <= 0 cannot go on a log scale: clipped to its bottom, not hidden.
        shown = np.where(np.isfinite(matrix), np.maximum(matrix, norm.vmin), np.nan)
        image = ax.imshow(np.ma.masked_invalid(shown), cmap=colours, norm=norm, aspect="auto",
                          interpolation="none", origin="upper")
        if len(labels) > ONE_SIDE_COLUMNS:
            # On one side, the PDF's panels (three to a page's width) kept every other label,
            # and buckets such as 32-63 went unnamed: alternate columns are labelled above.
            staggered_ticks(ax, "x", labels, rotation=90)
        else:
            ax.set_xticks(range(len(labels)), labels=labels, rotation=90)
        ax.set_xlabel("key position")
        set_layer_ticks(ax, range(matrix.shape[0]), axis="y")
        panel_title(ax, model, panels=len(models))
        ax.grid(False)
        for j in few_query_columns(runs, model):     # hatched: too few queries to read
            ax.add_patch(Rectangle((j - 0.5, -0.5), 1, matrix.shape[0], fill=False, hatch="xx",
                                   edgecolor=HATCH_COLOR, linewidth=0, gid=FEW_QUERIES_GID))
    colorbar = fig.colorbar(image, ax=list(axes), shrink=0.9,
                            label="received attention")
    if epsilon is not None and norm.vmin < epsilon < norm.vmax:
        colorbar.ax.axhline(epsilon, color="white", linewidth=1.5)  # the dark end: white
    return fig


@styled
def plot_value_drains(runs: Any, *, fig: Figure | SubFigure | None = None) -> Figure | SubFigure:
    """Per layer, the value-norm ratio of the sink keys (||v_sink|| / median ||v||, log y) and
    the sink's projection share of the attention output, mean over heads, one line per run."""
    runs = load_runs(runs)
    drains = value_drains_by_layer(runs)
    fig = figure_or_new(fig, 9.0, 3.4)
    if drains.empty:
        not_applicable(fig.add_subplot(), NO_ANATOMY)
        return fig
    colors = model_colors(runs.models)
    ratio_ax, share_ax = fig.subplots(1, 2)
    layers: set[int] = set()
    for model in anatomy_models(runs, "value_drains"):
        rows = drains[drains["model"] == model]
        layers.update(runs.layers(model))
        for ax, column in ((ratio_ax, "value_norm_ratio"), (share_ax, "projection_share")):
            ax.plot(rows["layer"], rows[column], marker="o", color=colors[model],
                    label=plain(model))
    ratio_ax.axhline(1.0, linestyle="--", linewidth=1.0, color=REFERENCE_COLOR,
                     label="median value norm")
    ratio_ax.set_yscale("log")
    ratio_ax.set_ylabel("‖v at sink‖ / median ‖v‖")
    ratio_ax.set_title("value norm of the sink key")
    share_ax.set_ylabel("share of the attention output")
    share_ax.set_title("sink's projection share")
    share_ax.set_ylim(bottom=0)
    for ax in (ratio_ax, share_ax):
        set_layer_ticks(ax, sorted(layers), max_ticks=8)       # two narrow panels side by side
    # Right of the panels: inside, it would cover the median line or the points near it.
    legend_outside(share_ax, *ratio_ax.get_legend_handles_labels(), title=None)
    return fig


@styled
def plot_gate_vs_sink_attention(runs: Any, *, fig: Figure | SubFigure | None = None,
                                cmap: str = "viridis") -> Figure | SubFigure:
    """Mean gate score against the attention a query puts on its head's top sink key, one curve
    per layer (coloured by layer), one panel per gated run with gate_sink.csv."""
    runs = load_runs(runs)
    curves = gate_sink_by_layer(runs)
    models = [model for model in runs.models if (curves["model"] == model).any()]
    fig = figure_or_new(fig, 1.6 + 3.6 * max(len(models), 1), 3.4)
    if not models:
        not_applicable(fig.add_subplot(), NO_GATE_SINK)
        return fig
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    deepest = max(runs.num_layers(model) for model in models)
    norm = Normalize(vmin=0, vmax=max(deepest - 1, 1))
    colours = colormaps[cmap]
    axes = fig.subplots(1, len(models), squeeze=False, sharey=True)[0]
    for ax, model in zip(axes, models):
        rows = curves[curves["model"] == model]
        for layer, curve in rows.groupby("layer", sort=True):
            ax.plot(curve["attention"], curve["gate"], marker="o", markersize=3, linewidth=1.2,
                    color=colours(norm(int(layer))), label=f"layer {int(layer)}")
        ax.set_xlim(0, 1)
        ax.set_xlabel("attention on the top sink key")
        panel_title(ax, model, panels=len(models))
    axes[0].set_ylabel("mean gate score")
    axes[0].set_ylim(bottom=0)
    colorbar = fig.colorbar(ScalarMappable(norm=norm, cmap=colours), ax=list(axes), shrink=0.9,
                            label="layer")
    colorbar.ax.yaxis.get_major_locator().set_params(integer=True)
    return fig


@styled
def plot_gate_vs_baseline_f_attn(runs: Any, *, fig: Figure | SubFigure | None = None,
                                 cmap: str = "viridis") -> Figure | SubFigure:
    """Per (layer, head): the baseline's F-Attn (x) against the gated run's mean gate (y), one
    panel per (baseline, gated) pair (claims.pairs.gate_pairs: the matched pairs, else those on
    the same token ids), points coloured by layer."""
    runs = load_runs(runs)
    pairs = gate_pairs(runs)
    fig = figure_or_new(fig, 1.6 + 3.4 * max(len(pairs), 1), 3.4)
    if not pairs:
        not_applicable(fig.add_subplot(), NO_PAIR)
        return fig
    from matplotlib.cm import ScalarMappable
    deepest = max(runs.num_layers(gated) for _, gated in pairs)
    norm = Normalize(vmin=0, vmax=max(deepest - 1, 1))
    axes = fig.subplots(1, len(pairs), squeeze=False, sharey=True)[0]
    for ax, (baseline, gated) in zip(axes, pairs):
        points = f_attn_vs_gate(runs, baseline, gated)
        ax.scatter(points["f_attn"], points["gate"], c=points["layer"], cmap=cmap, norm=norm,
                   s=14, edgecolors="none")
        # From 0 to a little past the largest F-Attn: a baseline without sinks keeps its
        # points apart instead of pressed against the left edge of [0, 1]. A small margin left
        # of 0: heads with F-Attn near 0 were drawn half outside the frame.
        right = max(0.05, 1.08 * float(points["f_attn"].max()) if len(points) else 1.0)
        ax.set_xlim(-SCATTER_MARGIN * right, right)
        ax.set_xlabel(f"F-Attn of {plain(baseline)}")
        panel_title(ax, f"{gated} vs {baseline}", panels=len(pairs))
    axes[0].set_ylabel("mean gate score (gated run)")
    axes[0].set_ylim(0, gate_score_top(runs, [gated for _, gated in pairs]))
    colorbar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes), shrink=0.9,
                            label="layer")
    colorbar.ax.yaxis.get_major_locator().set_params(integer=True)
    return fig
