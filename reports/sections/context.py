"""The report's section "Context length": the runs of context sweeps (probe analyze --seq-len
512,2048,...) against their sequence length, with and without position scaling.

Runs that are not part of a sweep get no section at all: a report without sweeps reads as
before.
"""

from __future__ import annotations

import math
from functools import partial

import pandas as pd

from probe.reports.context import context_table, pooled, sweep_runs, trained_length
from probe.reports.sections.items import FigureItem, Section, TableItem
from probe.reports.plots.context import plot_context_buckets, plot_context_length
from probe.reports.runs import Runs


def context_length(runs: Runs) -> Section | None:
    found = sweep_runs(runs)
    if not found:
        return None
    table = context_table(runs)
    trained = {series: trained_length(sweep) for series, _, sweep in found}
    marks = "; ".join(f"{series}: {length:,}" for series, length in trained.items() if length)
    items = [
        FigureItem("context-length", "Sinks, massive activations and loss against context length",
                   partial(plot_context_length, runs),
                   "Per series (a model, and its position scaling when one was applied on load): "
                   "F-Attn over queries t ≥ 1 (dashed: what uniform attention would give), the "
                   "sink rate (share of heads with F-Attn above ε), M-Act (mean over layers of the "
                   "largest |layer output|; log scale where it spans more than a factor 10) and the held-out loss, each against the "
                   "sequence length (log2 axis). Every length analyses the same tokens, cut into "
                   "sequences of that length. Dotted: the training length (a probe-trained "
                   "checkpoint's own, else the original positions of the config) "
                   f"({marks or 'not known'}); to its right RoPE extrapolates, or is rescaled."),
        FigureItem("context-buckets", "F-Attn and loss by position at each length",
                   partial(plot_context_buckets, runs),
                   "Top: F-Attn pooled over every layer and head for the queries of each position "
                   "bucket [2^k, 2^(k+1)) (log-log; dashed: uniform attention); bottom, where the "
                   "runs kept it: the next-token loss of the targets in each bucket. One line per "
                   "sequence length, one column per series; dotted: the training length. Whether "
                   "the first token keeps its share, and the loss holds, as positions move past "
                   "the training length."),
        TableItem("context-table", "Context sweep", display(table),
                  "One row per series and length (context_length.csv holds these and the "
                  "per-layer and per-bucket values). M-Act max: the largest |h| of the run, and "
                  "where it sits (layer, site, position, token).", index_label="series"),
    ]
    return Section(
        id="context-length", title="Context length",
        intro=("What happens to the first-token sink, the massive activations and the loss as the "
               "context grows past the length the model was trained at, with and without position "
               "scaling (the paper, Section 4.4, extends context with YaRN)."),
        items=items)


def display(table: pd.DataFrame) -> pd.DataFrame:
    wide = pooled(table).reset_index()
    order = {series: n for n, series in reversed(list(enumerate(table["series"])))}
    wide = wide.sort_values(["series", "length"], key=lambda c: c.map(order) if c.name == "series" else c)
    where = table[table["metric"] == "m_act_max"].set_index(["series", "length"])["where"]
    out = pd.DataFrame({
        "series": wide["series"],
        "length": [f"{int(n):,}" for n in wide["length"]],
        "F-Attn": [_num(v) for v in wide.get("f_attn", [])],
        "uniform": [_num(v) for v in wide.get("f_attn_uniform", [])],
        "sink rate": [_num(v) for v in wide.get("sink_rate", [])],
        "M-Act": [_num(v, big=True) for v in wide.get("m_act", [])],
        "M-Act max": [_num(v, big=True) for v in wide.get("m_act_max", [])],
        "where": [where.get((s, n), "") for s, n in zip(wide["series"], wide["length"])],
        "loss": [_num(v) for v in wide.get("loss", [])],
    })
    return out.set_index("series")


def _num(value, *, big: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.0f}" if big and abs(value) >= 100 else f"{value:.4g}"
