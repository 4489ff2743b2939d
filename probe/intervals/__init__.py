"""95% bootstrap intervals of the headline numbers, from the per-sequence table (per_sequence.csv).

    bootstrap.py  resampling weights (fixed seed), percentile intervals, intervals over seeds
    stats.py      SequenceValues: each headline number as a function of the resampling weights
    here          the *_lo / *_hi keys of summary.json (anatomy's too); paired differences of two runs

numpy and pandas only: reports/ recomputes every interval from saved runs without torch.
"""
from __future__ import annotations

import math

import numpy as np

from .bootstrap import LEVEL, MIN_RESAMPLES, MIN_SEQUENCES, SEED, percentile_interval, resample_weights, seed_interval  # noqa: F401
from .stats import SITES, SequenceValues, intervals_of  # noqa: F401

METHOD = "percentile bootstrap over sequences"
METHOD_DOCUMENTS = "percentile bootstrap over documents (the windows of a document drawn together)"


def describe(values: SequenceValues | None, resamples: int) -> dict:
    """summary.json `intervals`: how the *_lo / *_hi keys were made, or why there are none."""
    if values is None:
        return {"method": None, "why_none": "no per-sequence table"}
    out = {"method": METHOD if values.documents is None else METHOD_DOCUMENTS, "level": LEVEL,
           "resamples": resamples, "seed": SEED, "sequences": values.sequences}
    if values.documents is not None:
        out["documents"] = values.units
    if resamples < 1:
        out["why_none"] = "resamples is 0"
    elif resamples < MIN_RESAMPLES:
        out["why_none"] = f"fewer than {MIN_RESAMPLES} resamples"
    elif values.units < MIN_SEQUENCES:
        out["why_none"] = f"fewer than {MIN_SEQUENCES} {'sequences' if values.documents is None else 'documents'}"
    return out


def _pair(result):
    """(lo, hi) as floats or None (summary.json's null)."""
    if result is None:
        return None, None
    _, lo, hi = result
    return _num(lo), _num(hi)


def _num(x):
    x = float(x)
    return x if math.isfinite(x) else None


def summary_intervals(values: SequenceValues, resamples: int, epsilon: float, layers: list[dict]) -> dict:
    """The *_lo / *_hi keys of summary.json (model level), and the same beside each layer's and
    head's numbers in `layers` (summary.json's per-layer entries, filled in place)."""
    def of(statistic):
        return intervals_of(values, statistic, resamples)

    top = {}
    for key, statistic in (("f_attn", values.f_attn), ("f_attn_uniform", values.f_attn_uniform),
                           ("sink_rate", lambda W: values.sink_rate(W, epsilon)),
                           ("mean_gate", values.mean_gate), ("m_act", values.m_act), ("loss", values.loss)):
        top[f"{key}_lo"], top[f"{key}_hi"] = _pair(of(statistic))
    lo, hi = top["loss_lo"], top["loss_hi"]
    top["perplexity_lo"] = math.exp(lo) if lo is not None and lo < 700 else None
    top["perplexity_hi"] = math.exp(hi) if hi is not None and hi < 700 else None

    column = {layer: i for i, layer in enumerate(values.attention_layers)}
    by_layer = of(values.f_attn_layers)
    cells = of(values.f_attn_cells)
    gates = of(values.mean_gate_layers)
    m_act = of(values.m_act_layers)
    sparsity = {key: of(lambda W, k=key: values.sparsity_layers(W, *k)) for key in values.sparsity}
    row = {layer: i for i, layer in enumerate(values.layers)}
    for entry in layers:
        layer = entry["layer"]
        if layer in row:
            i = row[layer]
            entry["m_act_lo"] = {s: _num(m_act[1][i, k]) for k, s in enumerate(SITES)}
            entry["m_act_hi"] = {s: _num(m_act[2][i, k]) for k, s in enumerate(SITES)}
        if layer not in column:
            continue
        a = column[layer]
        entry["f_attn_lo"], entry["f_attn_hi"] = _num(by_layer[1][a]), _num(by_layer[2][a])
        if gates is not None:
            entry["mean_gate_lo"], entry["mean_gate_hi"] = _num(gates[1][a]), _num(gates[2][a])
        for head in entry.get("heads", []):
            h = head["head"]
            head["f_attn_lo"], head["f_attn_hi"] = _num(cells[1][a, h]), _num(cells[2][a, h])
        for side, index in (("sparsity_lo", 1), ("sparsity_hi", 2)):
            entry[side] = {}
            for (variant, t), result in sparsity.items():
                entry[side].setdefault(variant, {})[f"{t:g}"] = _num(result[index][a])
    return top


def anatomy_intervals(values: SequenceValues | None, resamples: int, epsilon: float) -> dict:
    """summary.json anatomy's numbers with their intervals: key 0's importance score and its
    sink rate (each with _lo / _hi), and _lo / _hi of the secondary-sink count; {} without the
    per-sequence anatomy (a run analysed before per_sequence.csv kept it)."""
    if values is None or values.key0_score is None:
        return {}
    out = {}
    for key, statistic in (("key0_score", values.key0_score_mean),
                           ("key0_sink_rate", lambda W: values.key0_sink_rate(W, epsilon))):
        result = intervals_of(values, statistic, resamples)
        out[key] = _num(result[0])
        out[f"{key}_lo"], out[f"{key}_hi"] = _pair(result)
    out["secondary_sinks_lo"], out["secondary_sinks_hi"] = _pair(intervals_of(values, values.secondary_sinks, resamples))
    return out


def paired(a: SequenceValues, b: SequenceValues, statistic, resamples: int, seed: int = SEED):
    """Paired bootstrap of statistic(a) - statistic(b) and statistic(a) / statistic(b), where
    statistic(values, W) -> (R,): the same resampled sequences for both runs (they must hold the
    same sequences, in the same order; grouped into documents as a's are). Returns {"difference":
    (point, lo, hi), "ratio": ...}."""
    if a.sequences != b.sequences:
        raise ValueError(f"a paired bootstrap needs the same sequences ({a.sequences} vs {b.sequences})")
    ones = np.ones((1, a.sequences))
    pa, pb = statistic(a, ones), statistic(b, ones)
    if pa is None or pb is None:
        return None
    out = {}
    W = a.weights(resamples, seed) if resamples >= MIN_RESAMPLES and a.units >= MIN_SEQUENCES else None
    ra, rb = (statistic(a, W), statistic(b, W)) if W is not None else (None, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, combine in (("difference", np.subtract), ("ratio", np.divide)):
            point = float(combine(pa, pb)[0])
            lo, hi = percentile_interval(combine(ra, rb)) if W is not None else (math.nan, math.nan)
            out[name] = (point, float(lo), float(hi))
    return out
