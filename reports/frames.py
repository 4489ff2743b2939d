"""Reshape the tidy tables into what a figure or table shows.

Kept apart from drawing so that tables, figures and tests read the same numbers, and so that a
notebook user can get the data behind any figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports.runs import Runs
from reports.schema import ATTENTION, LINEAR_ATTENTION, SATURATION_METRICS


def layer_head_matrix(frame: pd.DataFrame, num_layers: int, num_heads: int) -> np.ndarray:
    """(layers, heads) array of `value`; NaN where a layer or head has no row."""
    matrix = np.full((num_layers, num_heads), np.nan)
    rows = frame.dropna(subset=["layer", "head"])
    for layer, head, value in zip(rows["layer"], rows["head"], rows["value"]):
        if 0 <= layer < num_layers and 0 <= head < num_heads:
            matrix[int(layer), int(head)] = value
    return matrix


def first_token_matrix(runs: Runs, model: str, metric: str = "f_attn") -> np.ndarray:
    """F-Attn per (layer, head); NaN on linear-attention layers."""
    rows = runs.rows("first_token", model)
    return layer_head_matrix(rows[rows["metric"] == metric], runs.num_layers(model),
                             runs.num_heads(model))


def first_token_by_layer(runs: Runs, metric: str = "f_attn") -> pd.DataFrame:
    """Head-mean F-Attn per model and layer (the paper averages heads first), attention only."""
    rows = runs.first_token[(runs.first_token["metric"] == metric)
                            & (runs.first_token["layer_type"] != LINEAR_ATTENTION)]
    means = rows.groupby(["model", "layer"], sort=True)["value"].mean().dropna()
    return means.reset_index()


def gate_matrix(runs: Runs, model: str, metric: str = "mean", group: str = "all") -> np.ndarray:
    rows = runs.rows("gates", model)
    rows = rows[(rows["metric"] == metric) & (rows["group"] == group)]
    return layer_head_matrix(rows, runs.num_layers(model), runs.num_heads(model))


def _gate_wide(runs: Runs, group: str) -> pd.DataFrame:
    """One row per (model, layer, head) with one column per gate metric."""
    rows = runs.gates[runs.gates["group"] == group]
    if rows.empty:
        return pd.DataFrame(columns=["model", "layer", "head", "count", "mean", "std"])
    wide = rows.pivot_table(index=["model", "layer", "head"], columns="metric", values="value",
                            aggfunc="first").reset_index()
    wide.columns.name = None
    if "count" not in wide:
        wide["count"] = 1.0  # no counts saved: weight every head equally
    return wide


def gate_stats_by_layer(runs: Runs, group: str = "all") -> pd.DataFrame:
    """Per model and layer: mean, std, min, max of gate scores pooled over heads.

    Heads are pooled with their element counts; the pooled variance is
    E[std^2 + mean^2] - (pooled mean)^2, which is exact for population statistics.
    """
    wide = _gate_wide(runs, group)
    columns = ["model", "layer", "mean", "std", "min", "max", "count"]
    if wide.empty:
        return pd.DataFrame(columns=columns)
    records = []
    for (model, layer), heads in wide.groupby(["model", "layer"], sort=True):
        weights = heads["count"].to_numpy(float)
        total = weights.sum()
        mean = np.sum(weights * heads["mean"]) / total
        second_moment = np.sum(weights * (heads["std"] ** 2 + heads["mean"] ** 2)) / total
        records.append({
            "model": model, "layer": int(layer), "mean": mean,
            "std": float(np.sqrt(max(second_moment - mean ** 2, 0.0))),
            "min": heads["min"].min() if "min" in heads else np.nan,
            "max": heads["max"].max() if "max" in heads else np.nan,
            "count": total,
        })
    return pd.DataFrame.from_records(records, columns=columns)


def gate_saturation(runs: Runs, group: str = "all") -> pd.DataFrame:
    """Per model: share of gate scores below / above the saturation thresholds, over all heads."""
    wide = _gate_wide(runs, group)
    records = []
    for model, heads in wide.groupby("model", sort=False):
        weights = heads["count"].to_numpy(float)
        for metric in SATURATION_METRICS:
            if metric in heads:
                share = np.sum(weights * heads[metric]) / weights.sum()
                records.append({"model": model, "metric": metric, "value": share})
    return pd.DataFrame.from_records(records, columns=["model", "metric", "value"])


def gate_mean_by_group(runs: Runs) -> pd.DataFrame:
    """Per model: the count-weighted mean gate over all positions, position 0, and the rest."""
    records = []
    for group in ("all", "first", "rest"):
        wide = _gate_wide(runs, group)
        for model, heads in wide.groupby("model", sort=False):
            weights = heads["count"].to_numpy(float)
            records.append({"model": model, "group": group,
                            "mean": np.sum(weights * heads["mean"]) / weights.sum()})
    return pd.DataFrame.from_records(records, columns=["model", "group", "mean"])


def gate_hist_by_layer(runs: Runs) -> pd.DataFrame:
    """Per model, layer and bin: the share of the layer's gate scores in that bin (all heads)."""
    columns = ["model", "layer", "bin_lo", "bin_hi", "share"]
    hist = runs.gate_hist
    if hist.empty:
        return pd.DataFrame(columns=columns)
    counts = hist.groupby(["model", "layer", "bin_lo", "bin_hi"], sort=True)["count"].sum()
    counts = counts.reset_index()
    totals = counts.groupby(["model", "layer"])["count"].transform("sum")
    counts["share"] = counts["count"] / totals.where(totals > 0)
    return counts[columns]


def massive_by_layer(runs: Runs, site: str, metric: str = "max_abs") -> pd.DataFrame:
    rows = runs.massive[(runs.massive["site"] == site) & (runs.massive["metric"] == metric)]
    return rows[["model", "layer", "value"]].sort_values(["model", "layer"], kind="stable")


def sparsity_at(runs: Runs, threshold: float) -> pd.DataFrame:
    """Rows of sparsity.csv at one threshold (matched with a relative tolerance)."""
    frame = runs.sparsity
    matches = np.isclose(frame["threshold"].to_numpy(float), threshold, rtol=1e-6, atol=0.0)
    return frame[matches][["model", "layer", "variant", "value"]]


def sparsity_sweep(runs: Runs) -> pd.DataFrame:
    """Share below each threshold, averaged over layers (each layer has the same element count)."""
    frame = runs.sparsity
    means = frame.groupby(["model", "variant", "threshold"], sort=True)["value"].mean()
    return means.reset_index()


def attention_pattern(runs: Runs, model: str, layer: int) -> np.ndarray:
    """(queries, keys) head-averaged attention of the display prompt at one layer."""
    rows = runs.rows("attention_patterns", model)
    rows = rows[rows["layer"] == layer]
    if rows.empty:
        return np.zeros((0, 0))
    size = int(max(rows["query"].max(), rows["key"].max())) + 1
    matrix = np.full((size, size), np.nan)
    matrix[rows["query"].astype(int), rows["key"].astype(int)] = rows["value"]
    return matrix


def pattern_layers(runs: Runs, model: str) -> list[int]:
    """Layers of `model` that have a saved display pattern (attention layers only)."""
    rows = runs.rows("attention_patterns", model)
    saved = sorted(int(layer) for layer in rows["layer"].unique())
    return [layer for layer in saved if runs.layer_types(model).get(layer, ATTENTION) == ATTENTION]
