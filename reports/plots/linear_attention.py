"""Gated DeltaNet (linear-attention) layers of hybrid models (gdn_*.csv, probe/metrics/gdn/,
docs/gdn.md): where a hybrid keeps its sink, and the GDN gates per layer and value head."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from probe.reports.plots._layout import (axes_or_new, figure_or_new, layer_head_heatmap, legend_beside,
                                         log_headroom, not_applicable, panel_title, set_layer_ticks,
                                         shared_norm)
from probe.reports.runs import Runs, load_runs
from probe.reports.style import REFERENCE_COLOR, model_colors, styled
from probe.reports.tables.frames import first_token_by_layer
from probe.reports.text import plain

# A share of 0 has no place on a log axis: such points are drawn at this floor (the caption says so).
FLOOR = 1e-6

# The per-head quantities of the layer x value-head maps: (table, quantity or metric, label).
# The labels head their columns broken into lines narrower than a map: in one line they were
# wider than the map and ran under the colour bar of the column to their left.
HEAD_MAPS = (
    ("gdn_gates", "gate_silu", "mean SiLU(z),\noutput gate"),
    ("gdn_gates", "beta", "mean β,\nwrite strength"),
    ("gdn_gates", "half_life", "decay half-life\n(tokens)"),
    ("gdn_keys", "key0_share", "key-0 share"),
)
# The share of a column's width that its map gets beside its layer labels and colour bar (0.57 as
# drawn, 0.56 at the PDF's text width): run names above the maps are wrapped to it.
MAP_SHARE = 0.5
# A model without a column's table (a run analysed with --gdn but not --anatomy has no per-key
# terms) gets this note in its panel instead of an empty frame.
MISSING_NOTE = {"gdn_gates": "not measured", "gdn_keys": "not measured\n(no --anatomy)"}


NO_KEYS = ("No run has the GDN layers' per-key terms (gdn_keys.csv): analyse with --gdn --anatomy "
           "for the key-0 share.")


def gdn_models(runs: Runs) -> list[str]:
    """The models whose runs measured GDN layers (gdn_gates.csv or gdn_keys.csv has their rows)."""
    found = set(runs.gdn_keys["model"]) | set(runs.gdn_gates["model"])
    return [model for model in runs.models if model in found]


def key0_by_layer(runs: Runs, model: str) -> pd.DataFrame:
    """Per GDN layer the head-mean key-0 share (queries t >= 1): columns layer, value."""
    rows = runs.rows("gdn_keys", model)
    rows = rows[rows["metric"] == "key0_share"]
    return rows.groupby("layer", as_index=False)["value"].mean().sort_values("layer")


def has_keys(runs: Runs) -> bool:
    """Whether any run has the per-key terms (--gdn with --anatomy)."""
    return bool(len(runs.gdn_keys))


def head_maps(runs: Runs) -> tuple:
    """The columns of plot_gdn_heads: the key-0 share's only where a run has the per-key terms."""
    return HEAD_MAPS if has_keys(runs) else HEAD_MAPS[:-1]


def head_matrix(runs: Runs, model: str, table: str, quantity: str) -> tuple[list[int], np.ndarray]:
    """(GDN layers, (layers, value heads) matrix) of one per-head quantity over every token:
    the mean of SiLU(z) or beta, the decay's half-life, or a gdn_keys metric."""
    rows = runs.rows(table, model)
    if table == "gdn_gates":
        metric = "half_life" if quantity == "half_life" else "mean"
        quantity = "decay" if quantity == "half_life" else quantity
        rows = rows[(rows["quantity"] == quantity) & (rows["group"] == "all") & (rows["metric"] == metric)]
    else:
        rows = rows[rows["metric"] == quantity]
    layers = sorted(int(layer) for layer in rows["layer"].unique())
    heads = int(rows["head"].max()) + 1 if len(rows) else 0
    matrix = np.full((len(layers), heads), np.nan)
    index = {layer: i for i, layer in enumerate(layers)}
    for layer, head, value in zip(rows["layer"], rows["head"], rows["value"]):
        matrix[index[int(layer)], int(head)] = value
    return layers, matrix


def consecutive_runs(rows: pd.DataFrame, layers) -> list[pd.DataFrame]:
    """`rows` (a column layer, sorted) split where a layer of the model lies between two of them
    (a layer of the other type): each part is drawn as one line."""
    rows = rows.sort_values("layer")
    order = {layer: index for index, layer in enumerate(sorted(int(layer) for layer in layers))}
    places = np.array([order.get(int(layer), -1) for layer in rows["layer"]])
    bounds = [0, *(np.flatnonzero(np.diff(places) != 1) + 1), len(rows)]
    parts = [rows.iloc[start:end] for start, end in zip(bounds, bounds[1:])]
    return [part for part in parts if len(part) > 1]


@styled
def plot_sink_by_layer(runs: Any, *, ax: Axes | None = None) -> Figure | SubFigure:
    """On one layer axis: the softmax layers' head-mean F-Attn (filled circles) and the GDN
    layers' head-mean key-0 share (open squares), one colour per model, log scale. A hybrid's
    sink shows as a point far above the dashed uniform reference mean_t 1/(t+1)."""
    runs = load_runs(runs)
    ax = axes_or_new(ax, 6.4, 3.6)
    models = gdn_models(runs)
    if not models:
        return not_applicable(ax, "No run measured Gated DeltaNet layers (analyse with --gdn).")
    if not has_keys(runs):
        return not_applicable(ax, NO_KEYS)
    colors = model_colors(runs.models)
    f_attn = first_token_by_layer(runs, "f_attn")
    all_layers: set[int] = set()
    drawn: list[float] = []
    for model in models:
        all_layers.update(runs.layers(model))
        softmax = f_attn[f_attn["model"] == model]
        gdn = key0_by_layer(runs, model)
        # Markers for each layer type and a thin line through consecutive layers of one type, so
        # the reader follows one model along its layers; never from a GDN layer's key-0 share to
        # a softmax layer's F-Attn, which are different quantities.
        for layers in (softmax, gdn):
            for segment in consecutive_runs(layers[["layer", "value"]], runs.layers(model)):
                ax.plot(segment["layer"], np.maximum(segment["value"], FLOOR), color=colors[model],
                        linewidth=0.8, alpha=0.6)
        ax.plot(softmax["layer"], np.maximum(softmax["value"], FLOOR), linestyle="none", marker="o",
                color=colors[model], label=plain(model))
        ax.plot(gdn["layer"], np.maximum(gdn["value"], FLOOR), linestyle="none", marker="s",
                markerfacecolor="white", color=colors[model])
        drawn += [*softmax["value"], *gdn["value"]]
    uniform = [runs.summary[m].get("f_attn_uniform") for m in models]
    uniform = [float(u) for u in uniform if u is not None and np.isfinite(u)]
    if uniform:
        ax.axhline(float(np.mean(uniform)), linestyle="--", linewidth=1.0, color=REFERENCE_COLOR,
                   label="uniform 1/(t+1)")
        drawn.append(float(np.mean(uniform)))
    ax.set_yscale("log")
    # A labelled tick at or above the highest point: the axis ended at 0.08, its last tick at
    # 1e-2, and F-Attn near 0.06 or the uniform line (0.035) could not be read off.
    log_headroom(ax, float(np.nanmax(drawn)) if np.isfinite(drawn).any() else np.nan)
    ax.set_ylabel("share of the output from key 0")
    set_layer_ticks(ax, sorted(all_layers), max_ticks=24)
    # The marker kinds in black outline, unfilled: in a model's grey they read as one more model.
    ax.plot([], [], linestyle="none", marker="o", markerfacecolor="none", markeredgecolor="black",
            label="softmax: F-Attn")
    ax.plot([], [], linestyle="none", marker="s", markerfacecolor="none", markeredgecolor="black",
            label="GDN: key-0 share")
    legend_beside(ax)
    return ax


@styled
def plot_gdn_heads(runs: Any, *, fig: Figure | SubFigure | None = None,
                   cmap: str = "viridis") -> Figure | SubFigure:
    """GDN layer x value-head maps, one row per model: mean SiLU(z), mean beta, the decay's
    half-life and the key-0 share. Each column has one colour scale shared by its models."""
    runs = load_runs(runs)
    models = gdn_models(runs)
    maps = head_maps(runs)
    fig = figure_or_new(fig, 2.0 + 2.3 * len(maps), 0.6 + 2.4 * max(len(models), 1))
    if not models:
        return not_applicable(fig.add_subplot(), "No run measured Gated DeltaNet layers (--gdn).")
    axes = fig.subplots(len(models), len(maps), squeeze=False)
    for column, (table, quantity, label) in enumerate(maps):
        found = [head_matrix(runs, model, table, quantity) for model in models]
        norm = shared_norm([matrix for _, matrix in found])
        image = None
        for row, (model, (layers, matrix)) in enumerate(zip(models, found)):
            ax = axes[row, column]
            # The quantity heads its column once; each panel under it is named by its model.
            title = [label] * (row == 0) + [model] * (len(models) > 1)
            if title:
                panel_title(ax, "\n".join(title), panels=len(maps), share=MAP_SHARE)
            if not matrix.size:
                not_applicable(ax, MISSING_NOTE[table])
                continue
            image = layer_head_heatmap(ax, matrix, norm=norm, cmap=cmap)
            set_layer_ticks(ax, layers, axis="y", positions=range(len(layers)), label="GDN layer")
            ax.set_xlabel("value head")
        if image is not None:
            fig.colorbar(image, ax=list(axes[:, column]), shrink=0.9)
    return fig


__all__ = ["plot_sink_by_layer", "plot_gdn_heads"]
