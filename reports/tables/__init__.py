"""Tables of the report as DataFrames: numbers for notebooks, `display_*` strings for output.

Each `*_table` function returns the raw values; `as_display` turns any of them into strings
with one explicit marker for "does not apply", which HTML and PDF render alike.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from probe.reports.tables.frames import (gate_mean_by_group, gate_mean_by_token_type_pooled,
                                         interventions_all_layers, token_type_order)
from probe.reports.runs import load_runs
from probe.reports.labels import ATTENTION, INFERENCE_METRICS, INTERVENTION_LABELS, INTERVENTIONS, SITE_LABELS
from probe.reports.tables.intervals import with_intervals
from probe.reports.text import visible_token

NOT_APPLICABLE = "n/a"

SUMMARY_COLUMNS = {
    "gate_layout": "gate layout",
    "layers": "layers (attention / all)",
    "mean_gate": "mean gate",
    "m_act": "M-Act",
    "f_attn": "F-Attn (t ≥ 1)",
    "f_attn_paper": "F-Attn paper-style",
    "f_attn_uniform": "uniform F-Attn",
    "sink_rate": "sink rate",
    "loss": "loss",
    "perplexity": "perplexity",
    "tokens": "tokens",
}


def summary_table(runs: Any) -> pd.DataFrame:
    """One row per model with the paper's Table 4 quantities (NaN where they do not apply)."""
    runs = load_runs(runs)
    records = []
    for model in runs.models:
        summary = runs.summary[model]
        attention = len(runs.layers_of_type(model, ATTENTION))
        record: dict[str, Any] = {
            "model": model,
            "gate_layout": summary.get("gate_layout") or ("none" if not runs.is_gated(model)
                                                         else NOT_APPLICABLE),
            "layers": f"{attention} / {runs.num_layers(model)}",
        }
        for key in list(SUMMARY_COLUMNS)[2:]:
            record[key] = _number(summary.get(key))
        records.append(record)
    frame = pd.DataFrame.from_records(records).set_index("model")
    frame["tokens"] = frame["tokens"].astype("Int64")        # a count: 2048, not 2048.0 (<NA> where unknown)
    return frame


def summary_display(runs: Any) -> pd.DataFrame:
    runs = load_runs(runs)
    frame = summary_table(runs)
    formats: dict[str, Callable[[Any], str]] = {
        "mean_gate": _fixed(3), "m_act": _significant, "f_attn": _fixed(3),
        "f_attn_paper": _fixed(3), "f_attn_uniform": _fixed(3), "sink_rate": _fixed(3),
        "loss": _fixed(3), "perplexity": _significant, "tokens": _count,
    }
    display = with_intervals(as_display(frame, formats), runs, formats)
    for model in runs.ungated_models:
        display.loc[model, "mean_gate"] = "no gate"
    return display.rename(columns=SUMMARY_COLUMNS)


def massive_top_table(runs: Any, per_model: int = 6) -> pd.DataFrame:
    """The largest |h| of each model, grouped by where they sit: one row per (layer, site,
    position, dim) with the largest value there and `count`, how many of the saved top
    values (massive_top.csv, the k largest per layer and site) fall on it, over sequences.

    The same first-token value recurs in sequence after sequence; grouped, it is one row
    with its count instead of a table of repeats. `token` is the token of the largest value.
    """
    runs = load_runs(runs)
    top = runs.massive_top
    columns = ["model", "layer", "site", "position", "dim", "value", "count", "token"]
    if top.empty:
        return pd.DataFrame(columns=columns)
    keys = ["model", "layer", "site", "position", "dim"]
    ordered = top.sort_values(["abs_value", "sequence"], ascending=[False, True], kind="stable")
    grouped = ordered.groupby(keys, sort=False)
    table = grouped.first()[["value", "abs_value", "token"]]
    table["count"] = grouped.size()
    table = table.reset_index()
    table = table.sort_values(["abs_value", "layer", "dim"], ascending=[False, True, True],
                              kind="stable")
    picked = table.groupby("model", sort=False).head(per_model)
    picked = picked.assign(model=pd.Categorical(picked["model"], categories=list(runs.models)))
    picked = picked.sort_values(["model", "abs_value"], ascending=[True, False], kind="stable")
    picked = picked.assign(model=picked["model"].astype(str))
    return picked[columns].reset_index(drop=True)


def massive_top_display(runs: Any, per_model: int = 6) -> pd.DataFrame:
    frame = massive_top_table(runs, per_model)
    display = as_display(frame, {"value": _significant, "layer": _count, "position": _count,
                                 "dim": _count, "count": _count})
    display["site"] = [SITE_LABELS.get(site, site) for site in frame["site"]]
    display["token"] = [repr_token(token) for token in frame["token"]]
    return display.set_index("model")


def repr_token(token: Any) -> str:
    """A token as its quoted text with whitespace made visible: " the" -> '␣the'."""
    return f"“{visible_token(token, limit=24)}”"


def gate_position_table(runs: Any) -> pd.DataFrame:
    """Mean gate score over all positions, at position 0 and at positions >= 1, per gated model."""
    runs = load_runs(runs)
    means = gate_mean_by_group(runs)
    if means.empty:
        return pd.DataFrame(columns=["all", "first", "rest"])
    wide = means.pivot(index="model", columns="group", values="mean")
    wide = wide.reindex(index=[m for m in runs.models if m in wide.index],
                        columns=["all", "first", "rest"])
    wide.columns.name = None
    return wide


def gate_position_display(runs: Any) -> pd.DataFrame:
    frame = gate_position_table(runs)
    display = as_display(frame, {column: _fixed(3) for column in frame.columns})
    return display.rename(columns={"all": "all positions", "first": "position 0",
                                   "rest": "positions ≥ 1"})


# Provenance rows: label and the meta.json keys that may hold it (first present wins).
PROVENANCE_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("checkpoint", ("checkpoint", "checkpoint_path", "model_path")),
    ("architecture", ("architecture", "architectures")),
    ("model class", ("model_class",)),
    ("model type", ("model_type",)),
    ("family", ("family",)),
    ("gate layout", ("gate_layout",)),
    ("gate", ("gate",)),
    ("config hash", ("config_hash",)),
    ("heads (query / KV) × dim", ()),  # composed below from num_heads, num_kv_heads, head_dim
    ("dtype", ("dtype",)), ("device", ("device",)),
    ("data", ("data", "data_path", "dataset")),
    ("data notes", ("data_notes",)),
    ("tokens", ("tokens", "num_tokens", "token_count")),
    ("sequences", ("sequences", "num_sequences")),
    ("sequence length", ("seq_len", "sequence_length")),
    ("BOS policy", ("bos_policy", "bos")),
    ("BOS token id", ("bos_token_id",)),
    ("position 0 holds", ("position0", "position_0", "first_token")),
    ("thresholds", ("thresholds",)),
    ("sink ε", ("sink_epsilon",)),
    ("seed", ("seed",)), ("bootstrap resamples", ("resamples",)),
    ("training recipe", ("train_recipe",)),
    ("graft", ("graft",)),
    ("versions", ("versions", "package_versions")),
    ("command line", ("command", "command_line", "argv")),
    ("analysed at", ("timestamp", "created", "created_at")),
    ("weights file", ("weights",)),
    ("layout note", ("layout_note",)),
    ("longest sequence", ("longest_sequence",)),
    ("windows", ("windows",)),
    ("token ids sha256", ("tokens_sha256",)),
    ("token groups", ("token_groups",)),
    ("processes", ("processes",)), ("sparsity control", ("sparsity_control",)),
    ("sparsity exact", ("sparsity_exact",)),
    ("sparsity error bound", ("sparsity_error_bound",)),
    ("non-finite activations", ("nonfinite_activations",)),
    ("F-Attn dropped queries", ("f_attn_dropped_queries",)),
    ("rows per table", ("tables",)),
    ("data files", ("data_files",)), ("embedding fingerprint", ("embedding_fingerprint",)),
    ("sink anatomy", ("anatomy",)),
    ("anatomy: least queries per key", ("anatomy_min_queries",)),
    ("anatomy: least queries per sink key", ("anatomy_sink_min_queries",)),
)
# What meta.json's data holds for texts given in Python: said in words in the report.
IN_MEMORY_DATA = {"<texts>": "<texts>: texts given to probe.analyze(texts=...)"}
# Shown elsewhere (layer notes, the attention-pattern caption, the table header) or composed.
_PROVENANCE_SKIP = {"display_tokens", "layer_types", "model", "name", "num_layers", "num_heads",
                    "num_kv_heads", "head_dim"}


def provenance_table(runs: Any) -> pd.DataFrame:
    """Rows: provenance fields from meta.json (known ones first, then any other key);
    columns: models. Token counts fall back to summary.json when meta.json lacks them."""
    runs = load_runs(runs)
    rows: dict[str, dict[str, str]] = {"source": dict(runs.sources)}
    used: dict[str, set[str]] = {model: set(_PROVENANCE_SKIP) for model in runs.models}
    for label, keys in PROVENANCE_FIELDS:
        for model in runs.models:
            meta = runs.meta[model]
            key = next((key for key in keys if key in meta), None)
            if label.startswith("heads"):
                value = _head_shape(meta)
            elif key is None and label in ("tokens", "sequences"):
                value = runs.summary[model].get(label)
            else:
                value = meta.get(key) if key else None
                used[model].add(key or "")
            if value is not None:
                text = format_value(value)
                rows.setdefault(label, {})[model] = IN_MEMORY_DATA.get(text, text) if label == "data" else text
    for model in runs.models:
        for key, value in runs.meta[model].items():
            if key not in used[model] and value is not None:  # null reads "—", as above
                rows.setdefault(key, {})[model] = format_value(value)
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=list(runs.models))
    return frame.fillna("—").map(_home_as_tilde)


def _home_as_tilde(cell: str) -> str:
    """~/.cache/probe-models/... in a report, not the user name of the machine it ran on
    (meta.json keeps the full path)."""
    home = str(Path.home())
    return cell.replace(home + "/", "~/") if len(home) > 1 else cell


def _head_shape(meta: Mapping[str, Any]) -> str | None:
    heads, kv, dim = (meta.get(key) for key in ("num_heads", "num_kv_heads", "head_dim"))
    if heads is None:
        return None
    return f"{heads} / {kv if kv is not None else heads}" + (f" × {dim}" if dim else "")


def format_value(value: Any) -> str:
    """A meta.json value as one readable line: dicts as "k=v, ..." (null entries left out, as a
    null field has no row; a dict inside one in parentheses, so that its keys are not read as
    the outer one's), lists comma-joined."""
    if isinstance(value, Mapping):
        value = {key: item for key, item in value.items() if item is not None}
    if isinstance(value, (Mapping, list, tuple)) and not value:
        return "none"
    if isinstance(value, Mapping):
        return ", ".join(f"{key}=({format_value(item)})" if isinstance(item, Mapping) and item
                         else f"{key}={format_value(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        if all(isinstance(item, str) for item in value):
            return " ".join(value)  # an argv list reads as the command line it was
        return ", ".join(format_value(item) for item in value)
    if isinstance(value, float):
        return _significant(value)
    if isinstance(value, (str, int, bool)) or value is None:
        return str(value)
    return json.dumps(value, default=str)


def as_display(frame: pd.DataFrame, formats: Mapping[str, Callable[[Any], str]]
               ) -> pd.DataFrame:
    """Strings for every cell; NaN becomes the "does not apply" marker."""
    display = frame.copy().astype(object)
    for column in display.columns:
        formatter = formats.get(column, str)
        display[column] = [NOT_APPLICABLE if _missing(value) else formatter(value)
                           for value in frame[column]]
    return display


# Display strings that read as numbers (or as the markers that stand in for one).
_NUMERIC = re.compile(r"^([-+]?[\d,]*\.?\d+(e[-+]?\d+)?|n/a|no gate|—|\d+ / \d+)$")


def numeric_columns(frame: pd.DataFrame) -> list[bool]:
    """Per column of a display frame: do all its cells read as numbers? (Numbers align right.)"""
    return [len(frame) > 0 and all(_NUMERIC.match(str(value)) for value in frame[column])
            for column in frame.columns]


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def _fixed(digits: int) -> Callable[[Any], str]:
    return lambda value: f"{float(value):.{digits}f}"


def _significant(value: Any) -> str:
    value = float(value)
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3g}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _count(value: Any) -> str:
    return f"{int(round(float(value))):,}"


def gate_token_type_table(runs: Any) -> pd.DataFrame:
    """Mean gate score per token type (columns) and gated model (rows), all gated layers pooled
    with their element counts; NaN where a model has no position of that type."""
    runs = load_runs(runs)
    pooled = gate_mean_by_token_type_pooled(runs)
    if pooled.empty:
        return pd.DataFrame()
    wide = pooled.pivot(index="model", columns="token_type", values="mean")
    order = token_type_order(runs.gates_by_token_type)
    wide = wide.reindex(index=[m for m in runs.models if m in wide.index], columns=order)
    wide.columns.name = None
    return wide


def gate_token_type_display(runs: Any) -> pd.DataFrame:
    runs = load_runs(runs)
    frame = gate_token_type_table(runs)
    display = as_display(frame, {column: _fixed(3) for column in frame.columns})
    tokens = gate_mean_by_token_type_pooled(runs)
    shares = {}
    for model, rows in tokens.groupby("model", sort=False):
        counts = dict(zip(rows["token_type"], rows["tokens"]))
        shares[model] = counts
    # A second row per model with how many positions each type had: a mean over few tokens
    # says little.
    rows = []
    for model in display.index:
        rows.append((model, display.loc[model]))
        counts = shares.get(model, {})
        rows.append((f"{model}: positions", pd.Series(
            {column: (NOT_APPLICABLE if _missing(counts.get(column)) else _count(counts[column]))
             for column in display.columns})))
    return pd.DataFrame({label: series for label, series in rows}).T


def interventions_table(runs: Any) -> pd.DataFrame:
    """Per model: the unmodified loss and Δ loss of each intervention applied to all layers."""
    runs = load_runs(runs)
    rows = interventions_all_layers(runs)
    if rows.empty:
        return pd.DataFrame()
    present = set(rows["intervention"])
    names = [name for name in INTERVENTIONS if name in present]
    names += sorted(present - set(names) - {"none"})
    frame = pd.DataFrame(index=[m for m in runs.models if m in set(rows["model"])])
    frame.index.name = None
    for model in frame.index:
        mine = rows[rows["model"] == model].set_index("intervention")
        if "none" in mine.index:
            frame.loc[model, "none"] = float(mine.loc["none", "loss"])
        for name in names:
            if name in mine.index:
                frame.loc[model, name] = float(mine.loc[name, "delta_loss"])
        if "massive_zero" in mine.index:
            frame.loc[model, "zeroed"] = _number(mine.loc["massive_zero", "zeroed"])
    return frame.reindex(columns=[c for c in ["none", *names, "zeroed"] if c in frame.columns])


def interventions_display(runs: Any) -> pd.DataFrame:
    frame = interventions_table(runs)
    formats = {column: _signed for column in frame.columns}
    formats.update({"none": _fixed(3), "zeroed": _count})
    display = as_display(frame, formats)
    labels = {"none": "loss, unmodified", "zeroed": "elements zeroed"}
    labels.update({name: f"Δ {label}" for name, label in INTERVENTION_LABELS.items()})
    return display.rename(columns=labels)


def inference_table(runs: Any) -> pd.DataFrame:
    """Latency and memory of trained runs (inference.csv): one column per metric."""
    runs = load_runs(runs)
    rows = runs.inference[runs.inference["metric"].isin(list(INFERENCE_METRICS))]
    if rows.empty:
        return pd.DataFrame()
    wide = rows.pivot_table(index="model", columns="metric", values="value", aggfunc="first")
    wide = wide.reindex(index=[m for m in runs.models if m in wide.index],
                        columns=[m for m in INFERENCE_METRICS if m in wide.columns])
    lengths = rows.groupby("model")["length"].max()
    wide.insert(0, "prompt", lengths.reindex(wide.index))
    wide.columns.name = None
    return wide


def inference_display(runs: Any) -> pd.DataFrame:
    frame = inference_table(runs)
    formats: dict[str, Callable[[Any], str]] = {column: _significant for column in frame.columns}
    formats.update({"prompt": _count, "threads": _count})
    display = as_display(frame, formats)
    labels = {"prompt": "prompt (tokens)", **INFERENCE_METRICS}
    return display.rename(columns=labels)


def _signed(value: Any) -> str:
    value = float(value)
    return f"{value:+.3g}" if value != 0 and abs(value) < 1e-3 else f"{value:+.3f}"
