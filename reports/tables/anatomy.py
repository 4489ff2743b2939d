"""The sink-anatomy tables of the report (`probe analyze --anatomy`): the tokens that receive
the most attention over the whole model, and the secondary sinks."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from probe.reports.runs import load_runs
from probe.reports.tables import _count, _fixed, _significant, as_display, repr_token

SINK_TOKEN_COLUMNS = ["model", "token", "token_id", "cells", "score", "sink_share", "position_0"]
SECONDARY_SINK_COLUMNS = ["model", "layer", "head", "sequence", "position", "token", "score"]
ALL_LAYERS = -1     # received_by_token.csv's rows pooled over every layer


def sink_tokens_table(runs: Any, per_model: int = 8) -> pd.DataFrame:
    """The tokens that receive the most attention, per run: received_by_token.csv's layer -1
    rows, the mean importance score of a token over every layer, head and cell (the definition
    summary.json's top_sink_tokens uses too), highest first as written. The token at position 0
    (meta.json's BOS id, or the one first token every sequence starts with) is added after the
    top `per_model` if it is among the pooled rows but not the top ones, so the first-token sink
    is there to compare with. Runs written without layer -1 rows have no rows here."""
    runs = load_runs(runs)
    table = runs.received_by_token
    table = table[table["layer"] == ALL_LAYERS] if len(table) else table
    if table.empty:
        return pd.DataFrame(columns=SINK_TOKEN_COLUMNS)
    parts = []
    for model in runs.models:
        rows = table[table["model"] == model].sort_values("rank", kind="stable")
        rows = rows.assign(position_0=rows["token_id"] == position0_token_id(runs.meta[model]))
        top = rows.head(per_model)
        parts.append(pd.concat([top, rows.iloc[per_model:][rows.iloc[per_model:]["position_0"]]]))
    return pd.concat(parts, ignore_index=True)[SINK_TOKEN_COLUMNS]


def position0_token_id(meta: Mapping[str, Any]) -> int | None:
    """The token id at position 0 of every sequence, where meta.json says one: the BOS probe
    or the tokenizer put there, or the one first token all sequences share."""
    if meta.get("bos_token_id") is not None and "no BOS" not in str(meta.get("position0", "")):
        return int(meta["bos_token_id"])
    found = re.search(r"\(id (\d+)\)", str(meta.get("position0", "")))
    return int(found.group(1)) if found else None


def sink_tokens_display(runs: Any, per_model: int = 8) -> pd.DataFrame:
    frame = sink_tokens_table(runs, per_model)
    display = as_display(frame.drop(columns=["position_0"]),
                         {"token_id": _count, "cells": _count,
                          "score": _significant, "sink_share": _fixed(2)})
    display["token"] = [repr_token(token) + (" (position 0)" if first else "")
                        for token, first in zip(frame["token"], frame["position_0"])]
    return display.rename(columns={"token_id": "token id", "score": "mean score",
                                   "sink_share": "sink share"}).set_index("model")


def secondary_sinks_table(runs: Any, per_model: int = 10) -> pd.DataFrame:
    """The `per_model` highest-scoring secondary sinks of each run (secondary_sinks.csv: cells
    above epsilon away from position 0), highest first, ties by layer, head and position."""
    runs = load_runs(runs)
    table = runs.secondary_sinks
    if table.empty:
        return pd.DataFrame(columns=SECONDARY_SINK_COLUMNS)
    ordered = table.sort_values(["score", "layer", "head", "position"],
                                ascending=[False, True, True, True], kind="stable")
    parts = [ordered[ordered["model"] == model].head(per_model) for model in runs.models]
    # The sequence says which cell of the caption's (layer, head, sequence, key position) it is.
    columns = [c for c in SECONDARY_SINK_COLUMNS if c in table.columns]
    return pd.concat(parts, ignore_index=True)[columns]


def secondary_sinks_display(runs: Any, per_model: int = 10) -> pd.DataFrame:
    frame = secondary_sinks_table(runs, per_model)
    display = as_display(frame, {"layer": _count, "head": _count, "sequence": _count, "position": _count,
                                 "score": _fixed(3)})
    display["token"] = [repr_token(token) for token in frame["token"]]
    return display.set_index("model")


KEY0_COLUMNS = ["model", "key0_score", "key0_sink_rate", "secondary_sinks"]


def key0_table(runs: Any) -> pd.DataFrame:
    """One row per run analysed with --anatomy whose summary.json has the per-sequence anatomy
    numbers: key 0's importance score (mean over sequences, heads, layers), its sink rate (the
    share of those cells above epsilon) and the secondary-sink count, each as (value, lo, hi)."""
    runs = load_runs(runs)
    rows = []
    for model in runs.models:
        an = runs.summary[model].get("anatomy") or {}
        if an.get("key0_score") is None:
            continue
        rows.append({"model": model, **{key: (an.get(key), an.get(f"{key}_lo"), an.get(f"{key}_hi"))
                                        for key in KEY0_COLUMNS[1:]}})
    return pd.DataFrame(rows, columns=KEY0_COLUMNS)


def key0_display(runs: Any) -> pd.DataFrame:
    """key0_table as text: each number with its 95% interval in brackets (none where null)."""
    frame = key0_table(runs)

    def cell(found, digits: int) -> str:
        value, lo, hi = found
        text = f"{value:.{digits}f}" if digits else f"{int(value):,}"
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
            text += f" [{lo:.{digits}f}, {hi:.{digits}f}]" if digits else f" [{lo:,.0f}, {hi:,.0f}]"
        return text

    display = pd.DataFrame({"model": frame["model"],
                            "key-0 score": [cell(x, 3) for x in frame["key0_score"]],
                            "key-0 sink rate": [cell(x, 3) for x in frame["key0_sink_rate"]],
                            "secondary sinks": [cell(x, 0) for x in frame["secondary_sinks"]]})
    return display.set_index("model")
