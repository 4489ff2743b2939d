"""The table across context lengths (context_length.csv) of the runs of context sweeps.

A sweep run (probe/api/sweep.py) carries meta.json `context_sweep`: the model it sweeps, its
length, the rope scaling and the model's positions. Runs of one model and one scaling form a
series; the table is tidy, one value per row:

  series, run, length, scope (pooled | layer | bucket), layer, bucket_lo, bucket_hi, metric,
  value, where

pooled: F-Attn (t >= 1), its uniform reference, sink rate, M-Act (mean over layers of the
largest |layer output|), the largest |h| of the run (`m_act_max`, `where` says at which layer,
site, position and token), loss; layer: F-Attn, sink rate (share of heads above the runs'
epsilon), largest |layer output|; bucket: F-Attn over every layer and head for the queries of
each position bucket [bucket_lo, bucket_hi), and its uniform reference; `loss` over the
targets at those positions (summary.json loss_by_position, which a sweep turns on).
"""
from __future__ import annotations

import json
import math

import pandas as pd

from probe.reports.runs import Runs, load_runs

COLUMNS = ("series", "run", "length", "scope", "layer", "bucket_lo", "bucket_hi", "metric", "value", "where")
POOLED = ("f_attn", "f_attn_uniform", "sink_rate", "m_act", "loss")
# The sink threshold for runs whose summary.json does not say: the one the metric declares.
from probe.results.schema import SINK_EPSILON as DEFAULT_SINK_EPSILON  # noqa: E402


def series_label(sweep: dict) -> str:
    """The model, plus its position scaling when one was applied (e.g. 'smollm2 + yarn x4')."""
    spec = sweep.get("rope_scaling")
    if not spec:
        return str(sweep["model"])
    if isinstance(spec, str) and spec.strip().startswith("{"):
        try:
            spec = json.loads(spec)
        except ValueError:
            pass
    if isinstance(spec, dict):
        kind, factor = spec.get("rope_type", "rope"), spec.get("factor")
        spec = f"{kind} x{factor:g}" if isinstance(factor, (int, float)) else str(kind)
    else:
        spec = str(spec).replace(":", " x")
    return f"{sweep['model']} + {spec}"


def sweep_runs(runs: Runs) -> list[tuple[str, str, dict]]:
    """(series, run, context_sweep) of every sweep run, by series then length."""
    found = [(series_label(runs.meta[m]["context_sweep"]), m, runs.meta[m]["context_sweep"])
             for m in runs.models if isinstance(runs.meta[m].get("context_sweep"), dict)]
    # Series in the order the runs came (probe compare: the baseline first), lengths ascending.
    order = {series: n for n, series in reversed(list(enumerate(s for s, _, _ in found)))}
    return sorted(found, key=lambda r: (order[r[0]], r[2]["length"]))


def trained_length(sweep: dict) -> int | None:
    """The length the model was trained at: a probe-trained checkpoint's own, else the original
    positions its config gives."""
    if sweep.get("trained_length"):
        return int(sweep["trained_length"])
    positions = sweep.get("positions") or {}
    value = positions.get("original_max_position_embeddings")
    return int(value) if value else None


def context_table(source) -> pd.DataFrame:
    """The tidy table of every sweep run in `source` (anything reports.load_runs reads)."""
    runs = load_runs(source)
    rows: list[dict] = []
    for series, model, sweep in sweep_runs(runs):
        T = int(sweep["length"])

        def add(scope, metric, value, layer=math.nan, lo=math.nan, hi=math.nan, where=""):
            rows.append({"series": series, "run": model, "length": T, "scope": scope, "layer": layer,
                         "bucket_lo": lo, "bucket_hi": hi, "metric": metric,
                         "value": math.nan if value is None else float(value), "where": where})

        summary = runs.summary[model]
        for metric in POOLED:
            add("pooled", metric, summary.get(metric))
        eps = summary.get("sink_epsilon") or DEFAULT_SINK_EPSILON
        top = runs.rows("massive_top", model)
        if len(top):
            best = top.loc[top["abs_value"].idxmax()]
            add("pooled", "m_act_max", best["abs_value"],
                where=f"layer {int(best['layer'])} {best['site']}, position {int(best['position'])} "
                      f"({best['token']!r})")
        ft = runs.rows("first_token", model)
        ft = ft[ft["metric"] == "f_attn"]
        for layer, heads in ft.groupby("layer"):
            add("layer", "f_attn", heads["value"].mean(), layer=int(layer))
            add("layer", "sink_rate", float((heads["value"] > eps).mean()), layer=int(layer))
        mx = runs.rows("massive", model)
        mx = mx[(mx["metric"] == "max_abs") & (mx["site"] == "resid_post")]
        for _, row in mx.iterrows():
            add("layer", "m_act", row["value"], layer=int(row["layer"]))
        for entry in summary.get("loss_by_position") or []:
            add("bucket", "loss", entry["loss"], lo=entry["bucket_lo"], hi=entry["bucket_hi"])
        buckets = runs.rows("first_token_buckets", model)
        for (lo, hi), cells in buckets.groupby(["bucket_lo", "bucket_hi"]):
            add("bucket", "f_attn", cells["value"].mean(), lo=lo, hi=hi)
            add("bucket", "f_attn_uniform", cells["uniform"].mean(), lo=lo, hi=hi)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def pooled(table: pd.DataFrame) -> pd.DataFrame:
    """series x length x metric of the pooled rows, wide (one column per metric)."""
    rows = table[table["scope"] == "pooled"]
    return rows.pivot_table(index=["series", "length"], columns="metric", values="value", aggfunc="first")
