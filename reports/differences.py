"""Paired differences of the headline numbers: the difference and the ratio, with 95% intervals
from a paired bootstrap (the same resampled sequences for both runs, probe/intervals/), from the
runs' per-sequence tables.

Who is compared with whom: each gated model against its matched baseline where the runs have
matched pairs (claims/pairs.py: arms of one training run, a graft and its base, or --pair), as
the claims judge them; a gated hybrid minus a softmax baseline would mix the gate with the
architecture. Runs without any matched pair: each model against the first, on the same token ids.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from probe.intervals import paired
from probe.reports.claims.intervals import resamples_of, values_of
from probe.reports.claims.numbers import fmt as _f
from probe.reports.claims.pairs import split_pairs
from probe.reports.runs import load_runs
from probe.reports.labels import HEADLINE_THRESHOLDS, SINK_EPSILON

COLUMNS = ["model", "reference", "quantity", "value", "reference value", "difference", "difference_lo",
           "difference_hi", "ratio", "ratio_lo", "ratio_hi"]
SPARSITY_AT = HEADLINE_THRESHOLDS[0]
QUANTITIES = {
    "F-Attn": lambda v, W: v.f_attn(W),
    "sink rate": lambda v, W: v.sink_rate(W, SINK_EPSILON),
    "M-Act": lambda v, W: v.m_act(W),
    "loss": lambda v, W: v.loss(W),
    "mean gate": lambda v, W: v.mean_gate(W),
    # What o_proj reads: the gated output of a gated model, the attention output itself of an
    # ungated one ("gated" named a gate that an ungated pair does not have).
    f"sparsity < {SPARSITY_AT:g}, o_proj input": lambda v, W: v.sparsity_mean(W, "gated", SPARSITY_AT),
}


def comparisons(runs, pairs=None) -> tuple[list[tuple[str, str]], bool]:
    """([(reference, model), ...], matched): the matched (baseline, gated) pairs when there are
    any (pairs: the declared ones, --pair), else every later model against the first."""
    if runs.gated_models and runs.ungated_models:
        matched = split_pairs(runs, pairs)[0]
        if matched:
            return matched, True
    return [(runs.models[0], m) for m in runs.models[1:]], False


def differences_table(runs: Any, pairs=None) -> pd.DataFrame:
    """One row per compared model and quantity (comparisons()): its value, its reference's, and the
    paired difference (model minus reference) and ratio with their intervals. Models on other
    token ids, or without per-sequence values, have no rows (differences_notes says why)."""
    runs = load_runs(runs)
    rows = []
    for reference, model in comparisons(runs, pairs)[0]:
        if _why_not(runs, reference, model):
            continue
        a, b = values_of(runs, model), values_of(runs, reference)
        for name, statistic in QUANTITIES.items():
            out = paired(a, b, statistic, resamples_of(runs, model))
            if out is None:
                continue
            d, r = out["difference"], out["ratio"]
            rows.append({"model": model, "reference": reference, "quantity": name, "value": _point(a, statistic),
                         "reference value": _point(b, statistic), "difference": d[0], "difference_lo": d[1],
                         "difference_hi": d[2], "ratio": r[0], "ratio_lo": r[1], "ratio_hi": r[2]})
    return pd.DataFrame.from_records(rows, columns=COLUMNS)


def _point(values, statistic) -> float:
    import numpy as np

    return float(statistic(values, np.ones((1, values.sequences)))[0])


def _why_not(runs, reference: str, model: str) -> str | None:
    a, b = (runs.meta[m].get("tokens_sha256") for m in (reference, model))
    if a is None or b is None:
        return f"{model} and {reference} do not record their token ids (meta.json tokens_sha256)"
    if a != b:
        return f"{model} and {reference} did not see the same token ids"
    missing = [m for m in (reference, model) if values_of(runs, m) is None]
    if missing:
        return f"{', '.join(missing)} has no per_sequence.csv (written before it)"
    return None


def differences_notes(runs: Any, pairs=None) -> list[str]:
    """Why a compared model has no paired differences, for runs that have per-sequence values (the
    summary's interval note already names those that have none); under matched pairs, the gated
    models that have no matched baseline (the claims say why)."""
    runs = load_runs(runs)
    with_values = [m for m in runs.models if values_of(runs, m) is not None]
    compared, matched = comparisons(runs, pairs)
    why = [_why_not(runs, ref, m) for ref, m in compared if ref in with_values and m in with_values]
    notes = [f"No paired differences: {w}." for w in why if w]
    if matched:
        alone = [m for m in runs.gated_models if m not in {g for _, g in compared}]
        if alone:
            notes.append(f"No paired differences for {', '.join(alone)}: no matched baseline among these runs "
                         "(the claims say why; --pair BASE:GATED declares one).")
    return notes


def differences_display(runs: Any, pairs=None) -> pd.DataFrame:
    frame = differences_table(runs, pairs)
    records = frame.to_dict("records")
    out = pd.DataFrame({
        "model": [f"{m} − {r}" for m, r in zip(frame["model"], frame["reference"])],
        "quantity": frame["quantity"],
        "values": [f"{_f(v)} vs {_f(w)}" for v, w in zip(frame["value"], frame["reference value"])],
        "difference [95%]": [_difference_cell(r) for r in records],
        "ratio [95%]": [_ratio_cell(r) for r in records],
    })
    return out.set_index("model")


def _both_zero(r: dict) -> bool:
    """Both models at exactly 0 in every resample (a sink rate where neither model has a sink):
    the row says so once instead of "0 [0, 0], ratio n/a [n/a, n/a]"."""
    return all(r[k] == 0 for k in ("value", "reference value", "difference", "difference_lo", "difference_hi"))


def _difference_cell(r: dict) -> str:
    if _both_zero(r):
        return "0 (both 0)"
    return f"{_f(r['difference'])} [{_f(r['difference_lo'])}, {_f(r['difference_hi'])}]"


def _ratio_cell(r: dict) -> str:
    """The ratio with its interval; "n/a" alone where the ratio is undefined (a reference of 0)."""
    if all(pd.isna(r[k]) for k in ("ratio", "ratio_lo", "ratio_hi")):
        return "n/a (reference 0)" if r["reference value"] == 0 else "n/a"
    return f"{_f(r['ratio'])} [{_f(r['ratio_lo'])}, {_f(r['ratio_hi'])}]"


def differences_text(frame: pd.DataFrame) -> str:
    if frame.empty:
        return ""
    lines = ["Paired differences, model minus reference (95% intervals, the same resampled sequences "
             "for both):"]
    for r in frame.to_dict("records"):
        lines.append(f"  {r['model']} − {r['reference']}, {r['quantity']}: {_difference_cell(r)}, "
                     f"ratio {_ratio_cell(r)}")
    return "\n".join(lines)
