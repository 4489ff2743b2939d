"""The 95% intervals a claim is judged on, from the runs' per-sequence tables (per_sequence.csv):
within one model for claims 1-2, a paired bootstrap of baseline and gated model (the same
resampled sequences for both) for claims 3-4. None where a run has no per-sequence table (runs
written before it: their verdicts are the point rules, marked so)."""

from __future__ import annotations

import math

import numpy as np

from probe.intervals import SequenceValues, intervals_of, paired
from probe.reports.claims.numbers import fmt
from probe.reports.runs import Runs

DEFAULT_RESAMPLES = 1000         # probe.core.options resamples' default, for runs that do not record it
# (id of a per-sequence table, model) -> (that table, its values): the entry holds the table, so
# that no other table can take its id() while the entry lives, and a hit is checked by identity.
_CACHE: dict[tuple[int, str], tuple[object, SequenceValues | None]] = {}


def values_of(runs: Runs, model: str) -> SequenceValues | None:
    """The per-sequence values of `model` in `runs`, read once per table (claims, differences and
    seeds ask for the same ones many times)."""
    frame = runs.per_sequence
    key = (id(frame), model)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not frame:
        if len(_CACHE) > 64:
            _CACHE.clear()
        hit = _CACHE[key] = (frame, SequenceValues.from_frame(runs.rows("per_sequence", model)))
    return hit[1]


def resamples_of(runs: Runs, model: str) -> int:
    saved = runs.meta[model].get("resamples")
    return int(saved) if isinstance(saved, int) and not isinstance(saved, bool) else DEFAULT_RESAMPLES


def without_table(runs: Runs, models) -> list[str]:
    """The models among `models` whose run has no per-sequence table."""
    return [m for m in models if values_of(runs, m) is None]


def _triple(result) -> tuple[float, float, float] | None:
    if result is None:
        return None
    point, lo, hi = (float(np.asarray(x).reshape(-1)[0]) for x in result)
    return (point, lo, hi) if not math.isnan(lo) else None


def gate_intervals(runs: Runs, model: str):
    """((mean gate), (share of scores below LOW_GATE)), each (point, lo, hi); None without."""
    v = values_of(runs, model)
    if v is None or v.gate_sum is None:
        return None
    R = resamples_of(runs, model)
    mean, share = _triple(intervals_of(v, v.mean_gate, R)), _triple(intervals_of(v, v.low_gate_share, R))
    return (mean, share) if mean and share else None


def sparsity_gain(runs: Runs, model: str, threshold: float):
    """(point, lo, hi) of the dynamic gate's share below `threshold` minus the ungated one's,
    mean over layers, both on the same resamples; None without."""
    return _share_gain(runs, model, threshold, "ungated")


def control_gain(runs: Runs, model: str, threshold: float):
    """(point, lo, hi) of the dynamic gate's share minus the mean-gate control's: what the gate
    adds beyond scaling every output by its mean. None without the control's per-sequence counts
    (only the exact control, --exact-control, counts them); m is held at the run's mean gate."""
    return _share_gain(runs, model, threshold, "mean_gate")


def _share_gain(runs: Runs, model: str, threshold: float, reference: str):
    v = values_of(runs, model)
    ones = np.ones((1, v.sequences)) if v is not None else None
    if v is None or any(v.sparsity_mean(ones, variant, threshold) is None for variant in ("gated", reference)):
        return None

    def gain(W):
        return v.sparsity_mean(W, "gated", threshold) - v.sparsity_mean(W, reference, threshold)
    return _triple(intervals_of(v, gain, resamples_of(runs, model)))


def _paired(runs: Runs, base: str, gated: str, statistic):
    a, b = values_of(runs, base), values_of(runs, gated)
    if a is None or b is None or a.sequences != b.sequences:
        return None
    out = paired(a, b, statistic, resamples_of(runs, gated))
    if out is None or math.isnan(out["difference"][1]):
        return None
    return out


def _sink_multiple(v: SequenceValues, W):
    with np.errstate(invalid="ignore", divide="ignore"):
        return v.f_attn(W) / v.f_attn_uniform(W)


def sink_difference(runs: Runs, base: str, gated: str):
    """Paired bootstrap of F-Attn as a multiple of its uniform reference: baseline minus gated
    ({"difference": (p, lo, hi), "ratio": (p, lo, hi)}, ratio baseline / gated); None without."""
    return _paired(runs, base, gated, _sink_multiple)


def m_act_difference(runs: Runs, base: str, gated: str):
    """Paired bootstrap of M-Act, baseline minus gated (and baseline / gated); None without."""
    return _paired(runs, base, gated, lambda v, W: v.m_act(W))


def bracket(found) -> str:
    """" [lo, hi]" of a (point, lo, hi), or nothing."""
    return f" [{fmt(found[1])}, {fmt(found[2])}]" if found else ""


def paired_text(found, what: str) -> str:
    """"; baseline − gated ... [lo, hi], baseline ÷ gated ... [lo, hi]" of a paired bootstrap, or nothing."""
    if not found:
        return ""
    d, r = found["difference"], found["ratio"]
    quantity = f"({what})" if " " in what else what
    return (f"; baseline − gated {quantity} {fmt(d[0])}{bracket(d)}, baseline ÷ gated {fmt(r[0])}{bracket(r)} "
            "(paired bootstrap)")
