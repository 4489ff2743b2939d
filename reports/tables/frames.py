"""Reshape the tidy tables into what a figure or table shows.

Kept apart from drawing so that tables, figures and tests read the same numbers, and so that a
notebook user can get the data behind any figure.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from probe.reports.runs import Runs
from probe.reports.labels import ALL_LAYERS, ATTENTION, LINEAR_ATTENTION, SATURATION_METRICS, TOKEN_TYPES


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
    # pivot_table drops a metric whose every value is NaN (no finite gate score: a NaN model);
    # its column stays, NaN, so that readers find it.
    wide = wide.reindex(columns=[*wide.columns, *sorted(set(rows["metric"]) - set(wide.columns))])
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
        if not total > 0:
            continue  # no finite gate score in this layer (a NaN in the model): no point
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


def count_weighted(counts: np.ndarray, values) -> float:
    """The mean of per-head values weighted by their score counts; a head with no finite score
    (count 0, value NaN) weighs nothing, and none at all (a NaN model) gives NaN."""
    values = np.asarray(values, dtype=float)
    counted = counts > 0
    total = counts[counted].sum()
    return float(np.sum(counts[counted] * values[counted]) / total) if total > 0 else math.nan


def gate_saturation(runs: Runs, group: str = "all") -> pd.DataFrame:
    """Per model: share of gate scores below / above the saturation thresholds, over all heads."""
    wide = _gate_wide(runs, group)
    records = []
    for model, heads in wide.groupby("model", sort=False):
        weights = heads["count"].to_numpy(float)
        for metric in SATURATION_METRICS:
            if metric in heads:
                share = count_weighted(weights, heads[metric])
                records.append({"model": model, "metric": metric, "value": share})
    return pd.DataFrame.from_records(records, columns=["model", "metric", "value"])


def gate_mean_by_group(runs: Runs) -> pd.DataFrame:
    """Per model: the count-weighted mean gate over all positions, position 0, and the rest."""
    records = []
    for group in ("all", "first", "rest"):
        wide = _gate_wide(runs, group)
        for model, heads in wide.groupby("model", sort=False):
            records.append({"model": model, "group": group,
                            "mean": count_weighted(heads["count"].to_numpy(float), heads["mean"])})
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


def gate_score_top(runs: Runs, models=None) -> float:
    """The top of the gate score range of these runs' gated models (of `models`, when given),
    where gate_hist.csv's bins end: 1 for a sigmoid gate, 2 for a grafted 2 * sigmoid one
    (probe.families.gates.SCORE_TOP); 1 where no run saved a histogram."""
    hist = runs.gate_hist
    if models is not None and not hist.empty:
        hist = hist[hist["model"].isin(list(models))]
    return float(hist["bin_hi"].max()) if not hist.empty else 1.0


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


def gate_mean_by_token_type(runs: Runs, model: str | None = None) -> pd.DataFrame:
    """Mean gate score per (model, layer, token_type), pooled over heads with their counts.

    Columns: model, layer, token_type, mean, count, tokens. Token types in display order
    (built-in types first, then user groups in the order they first appear).
    """
    rows = runs.gates_by_token_type
    if model is not None:
        rows = rows[rows["model"] == model]
    columns = ["model", "layer", "token_type", "mean", "count", "tokens"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    wide = rows.pivot_table(index=["model", "layer", "head", "token_type"], columns="metric",
                            values="value", aggfunc="first").reset_index()
    for metric in ("mean", "count", "tokens"):
        if metric not in wide:
            wide[metric] = 1.0 if metric == "count" else np.nan
    wide = wide.dropna(subset=["mean"])
    wide = wide.assign(weight=wide["count"].fillna(1.0).clip(lower=0.0))
    wide = wide.assign(weighted=wide["mean"] * wide["weight"])
    grouped = wide.groupby(["model", "layer", "token_type"], sort=False)
    result = grouped.agg(weighted=("weighted", "sum"), count=("weight", "sum"),
                         tokens=("tokens", "max")).reset_index()
    result["mean"] = np.where(result["count"] > 0, result["weighted"] / result["count"].where(
        result["count"] > 0, 1.0), np.nan)
    order = token_type_order(rows)
    result["order"] = result["token_type"].map({name: i for i, name in enumerate(order)})
    result = result.sort_values(["model", "layer", "order"], kind="stable")
    return result[columns].reset_index(drop=True)


def token_type_order(rows: pd.DataFrame) -> list[str]:
    """Built-in token types in their fixed order, then user groups as they first appear."""
    present = list(dict.fromkeys(rows["token_type"]))
    builtin = [name for name in TOKEN_TYPES if name in present]
    return builtin + [name for name in present if name not in TOKEN_TYPES]


def gate_mean_by_token_type_pooled(runs: Runs) -> pd.DataFrame:
    """Mean gate score per (model, token_type) over all gated layers, and the token count."""
    per_layer = gate_mean_by_token_type(runs)
    if per_layer.empty:
        return pd.DataFrame(columns=["model", "token_type", "mean", "tokens"])
    per_layer = per_layer.assign(weighted=per_layer["mean"] * per_layer["count"])
    grouped = per_layer.groupby(["model", "token_type"], sort=False)
    pooled = grouped.agg(weighted=("weighted", "sum"), count=("count", "sum"),
                         tokens=("tokens", "max")).reset_index()
    pooled["mean"] = pooled["weighted"] / pooled["count"].where(pooled["count"] > 0, np.nan)
    return pooled[["model", "token_type", "mean", "tokens"]]


def interventions_all_layers(runs: Runs) -> pd.DataFrame:
    """The all-layers rows (layer -1) of interventions.csv plus each model's `none` row."""
    rows = runs.interventions
    keep = (rows["layer"] == ALL_LAYERS) | (rows["intervention"] == "none")
    return rows[keep].drop_duplicates(["model", "intervention"]).reset_index(drop=True)


def interventions_by_layer(runs: Runs) -> pd.DataFrame:
    """Single-layer intervention rows (layer >= 0), `none` left out."""
    rows = runs.interventions
    keep = (rows["layer"] >= 0) & (rows["intervention"] != "none")
    return rows[keep].sort_values(["model", "intervention", "layer"]).reset_index(drop=True)


def first_token_by_bucket(runs: Runs) -> pd.DataFrame:
    """F-Attn per model and query-position bucket: the mean over heads per layer, then over
    layers (as the summary's F-Attn), with the uniform reference and the queries pooled."""
    rows = runs.first_token_buckets.dropna(subset=["value"])
    columns = ["model", "bucket_lo", "bucket_hi", "value", "uniform", "n_queries"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    per_layer = rows.groupby(["model", "bucket_lo", "bucket_hi", "layer"], sort=True).agg(
        value=("value", "mean"), uniform=("uniform", "mean"), n_queries=("n_queries", "max"))
    result = per_layer.groupby(["model", "bucket_lo", "bucket_hi"], sort=True).agg(
        value=("value", "mean"), uniform=("uniform", "mean"), n_queries=("n_queries", "max"))
    return result.reset_index()[columns]


def bucket_label(lo: float, hi: float) -> str:
    """[1, 1024) -> "1–1K"; [65536, inf) -> "64K+"."""
    def short(value: float) -> str:
        value = int(value)
        return f"{value // 1024}K" if value >= 1024 and value % 1024 == 0 else str(value)

    return f"{short(lo)}+" if not np.isfinite(hi) else f"{short(lo)}–{short(hi)}"
