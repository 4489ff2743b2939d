"""The numbers a claim is judged on, for one model: from the tables, summary.json where a table
is missing; and which layers saw NaN/inf activations (no verdict on those)."""

from __future__ import annotations

import math
from typing import Any, Sequence

from probe.reports.tables.frames import first_token_by_layer, gate_mean_by_group, gate_saturation, sparsity_at
from probe.reports.runs import Runs
from probe.reports.text import join_layers
from probe.results.number_text import fmt  # noqa: F401  (re-exported: the reports' number format)

MASSIVE_SITE = "resid_post"  # the paper's M-Act: each layer's output hidden state


def number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def gate_numbers(runs: Runs, model: str, low_gate: float) -> tuple[float, float]:
    """Count-weighted mean gate and share of gate scores below `low_gate`, all gated layers."""
    means = gate_mean_by_group(runs)
    mean = means[(means["model"] == model) & (means["group"] == "all")]["mean"]
    shares = gate_saturation(runs)
    share = shares[(shares["model"] == model) & (shares["metric"] == f"frac_lt_{low_gate:g}")]
    return (number(mean.iloc[0]) if len(mean) else number(runs.summary[model].get("mean_gate")),
            number(share["value"].iloc[0]) if len(share) else math.nan)


def sparsity_numbers(runs: Runs, model: str, threshold: float) -> tuple[dict[str, float], int]:
    """Share below `threshold` per variant, mean over layers (equal element counts)."""
    rows = sparsity_at(runs, threshold)
    rows = rows[rows["model"] == model]
    return rows.groupby("variant")["value"].mean().to_dict(), rows["layer"].nunique()


def f_attn_of(runs: Runs, model: str) -> float:
    per_layer = first_token_by_layer(runs)
    values = per_layer[per_layer["model"] == model]["value"]
    return float(values.mean()) if len(values) else number(runs.summary[model].get("f_attn"))


def uniform_of(runs: Runs, model: str) -> float:
    saved = number(runs.summary[model].get("f_attn_uniform"))
    if not math.isnan(saved):
        return saved
    # Older summaries: the query-weighted uniform reference of the position buckets.
    rows = runs.rows("first_token_buckets", model).dropna(subset=["uniform", "n_queries"])
    weights = rows["n_queries"].sum()
    return float((rows["uniform"] * rows["n_queries"]).sum() / weights) if weights else math.nan


def m_act_of(runs: Runs, model: str) -> float:
    rows = runs.rows("massive", model)
    maxima = rows[(rows["site"] == MASSIVE_SITE) & (rows["metric"] == "max_abs")]["value"]
    return float(maxima.mean()) if len(maxima) else number(runs.summary[model].get("m_act"))


def nonfinite_layers(runs: Runs, model: str) -> list[int]:
    """Layers where the run saw NaN/inf activations (meta.json nonfinite_activations, the
    `nonfinite` rows of massive.csv) or that have no layer-output M-Act although the model has
    them (a layer all NaN leaves no finite value to summarise)."""
    layers = set()
    for key, count in (runs.meta[model].get("nonfinite_activations") or {}).items():
        head = str(key).split(":")[0]
        if head.isdigit() and number(count) > 0:
            layers.add(int(head))
    rows = runs.rows("massive", model)
    if len(rows):
        flagged = rows[(rows["metric"] == "nonfinite") & (rows["value"] > 0)]
        layers.update(int(layer) for layer in flagged["layer"])
        maxima = rows[(rows["site"] == MASSIVE_SITE) & (rows["metric"] == "max_abs")]
        finite = {int(layer) for layer, value in zip(maxima["layer"], maxima["value"])
                  if math.isfinite(number(value))}
        layers.update(set(runs.layers(model)) - finite)
    return sorted(layers)


def nonfinite_reason(runs: Runs, models: Sequence[str]) -> str | None:
    """Why a verdict on `models` cannot be given when one of them saw NaN/inf values: its
    statistics then cover fewer layers (or values) than the model has, and a comparison
    with a model that has all of them would be between different things."""
    parts = []
    for model in models:
        layers = nonfinite_layers(runs, model)
        if layers:
            plural = "s" if len(layers) > 1 else ""
            parts.append(f"{model} has NaN/inf activations at layer{plural} "
                         f"{join_layers(layers)}")
    if not parts:
        return None
    return "; ".join(parts) + " (its statistics leave those values out)"
