"""The paper's four headline claims, checked in direction on the runs of one report.

Each verdict says whether these runs move the way the paper reports, never that they reproduce
its numbers: small or briefly trained models are not expected to reach the paper's values. The
thresholds of the verdicts are the named constants of rules.py, the only place they live; the
rules table quotes them, so a reader who disagrees with one can see which and rerun with another.

    from probe import reports
    reports.claims_table(["runs/base", "runs/gated"])        # run directories
    reports.claims_table(a_baseline, a_gated)                  # probe.Analysis objects
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

# nonfinite_reason is imported from here by notes.py.
from probe.reports.claims.numbers import (f_attn_of, gate_numbers, m_act_of, nonfinite_reason,
                                          sparsity_numbers, uniform_of)
from probe.reports.claims.numbers import fmt as _fmt
from probe.reports.claims import intervals as ci
from probe.reports.claims import sink_need
from probe.reports.claims.pairs import NOT_COMPARABLE, split_pairs
from probe.reports.claims.scope import not_sigmoid
from probe.reports.runs import Runs, load_runs
from probe.reports.tables.intervals import few_sequences
from probe.reports.labels import VARIANT_LABELS

# The rules' thresholds and their text: rules.py, read there at each call (rules.NAME), so
# that moving a constant moves every verdict and every text that quotes it.
from probe.reports.claims import rules

CONSISTENT = "direction consistent with the paper"
# The run moves the paper's way but by less than the rule asks: not a contradiction.
BELOW_THRESHOLD = "same direction, below the threshold"
NOT_CONSISTENT = "not consistent with the paper"
NOT_TESTABLE = "not testable"
# With per-sequence values (per_sequence.csv) a verdict is decided by the 95% interval of the
# difference: on the paper's side of zero, on the other side, or containing it.
OPPOSITE = "opposite to the paper"
WITHIN_NOISE = "within noise"
NO_GATED = "no gated model in these runs: the claims need one"
# Each verdict's kind, for colour in HTML and PDF (the words carry the meaning).
VERDICT_KINDS = ((CONSISTENT, "consistent"), (NOT_CONSISTENT, "inconsistent"), (OPPOSITE, "inconsistent"),
                 (BELOW_THRESHOLD, "below"), (WITHIN_NOISE, "below"), (NOT_TESTABLE, "untestable"),
                 (NOT_COMPARABLE, "untestable"))

STATEMENTS = {
    1: "Gate scores are sparse",
    2: "The gate makes the attention output sparse beyond uniform scaling",
    3: "The gate removes the first-token attention sink",
    4: "The gate removes massive activations",
}
STATEMENTS[5] = sink_need.STATEMENT          # judged only where a run has sink ablations
_SINK_NEED_VERDICTS = {"consistent": CONSISTENT, "opposite": OPPOSITE, "noise": WITHIN_NOISE,
                       "untestable": NOT_TESTABLE}
COLUMNS = ["claim", "statement", "models", "paper", "these runs", "verdict", "rule", "numbers"]


@dataclass
class _Row:
    claim: int
    models: str
    measured: str
    verdict: str
    numbers: dict[str, float] = field(default_factory=dict)


def claims_table(*runs_or_analyses: Any, pairs=None) -> pd.DataFrame:
    """One row per claim and gated model (claims 3-4: per baseline and gated model).

    Accepts what `load_runs` does (run directories, a `probe compare` folder, Analysis objects,
    a `Runs`), as one argument or several: `claims_table(a_baseline, a_gated)`. Columns: claim
    number, statement, models, the paper's values, the values in these runs, the verdict, the
    rule used, and `numbers` (a dict of the values the verdict was computed from).

    pairs: [(baseline, gated), ...] declared matched pairs (--pair); claims 3-4 are judged only on
    matched pairs (reports/claims/pairs.py), every other pair is "not comparable" with the reason.
    """
    source = runs_or_analyses[0] if len(runs_or_analyses) == 1 else list(runs_or_analyses)
    runs = load_runs(source)
    rows = (_sparse_gate(runs) + _sparse_output(runs) + _sink(runs, pairs) + _massive(runs, pairs)
            + [_Row(5, *row) for row in sink_need.rows(runs, _SINK_NEED_VERDICTS, pairs)])
    records = [{"claim": row.claim, "statement": STATEMENTS[row.claim], "models": row.models,
                "paper": rules.PAPER_VALUES[row.claim](), "these runs": row.measured,
                "verdict": row.verdict, "rule": rules.RULES[row.claim](), "numbers": row.numbers}
               for row in rows]
    return pd.DataFrame.from_records(records, columns=COLUMNS)


def claims_display(runs: Any, pairs=None) -> pd.DataFrame:
    """Strings for HTML and PDF: the claim as the first column, `numbers` and `rule` left out
    (the rules are one table of their own, rules_display)."""
    frame = claims_table(runs, pairs=pairs)
    display = frame.drop(columns=["claim", "statement", "numbers", "rule"])
    display.index = [f"{claim}. {statement}"
                     for claim, statement in zip(frame["claim"], frame["statement"])]
    return display


def claims_caption(runs: Any = None) -> str:
    """The table's caption; with `runs`, which of them are judged on point values (no per_sequence.csv)."""
    missing = ci.without_table(runs, runs.models) if runs is not None else []
    few = few_sequences(runs).strip() if runs is not None else ""
    return ("Whether each headline claim of the paper holds in these runs, in the paper's direction "
            "(not its values); brackets: 95% intervals over sequences. The rules: the last table, under Provenance."
            + (f" No intervals for {', '.join(missing)} (no per_sequence.csv, written before it): "
               "judged on the point values." if missing else "")
            + (f" {few}" if few else ""))


def rules_display() -> pd.DataFrame:
    """How each verdict is decided, one row per claim (thresholds: the constants of reports/claims/rules.py)."""
    rows = {f"{claim}. {STATEMENTS[claim]}": {"rule": rules.RULES[claim]()} for claim in STATEMENTS}
    return pd.DataFrame.from_dict(rows, orient="index")


def rules_caption() -> str:
    return (f"\"{CONSISTENT}\" only when the 95% interval of the difference (paired: the same resampled "
            f"sequences for both) lies on the paper's side of zero (claims 3-4: and the drop reaches the "
            f"rule's factor, else \"{BELOW_THRESHOLD}\"), \"{OPPOSITE}\" on the other side, "
            f"\"{WITHIN_NOISE}\" when it holds zero; without intervals \"{BELOW_THRESHOLD}\" or "
            f"\"{NOT_CONSISTENT}\" by the point values. Claims 3-4 need a matched pair (same token ids; "
            f"arms of one probe train run, a graft and its base, or --pair): else \"{NOT_COMPARABLE}\".")


def has_gated(runs: Any) -> bool:
    return bool(load_runs(runs).gated_models)


# --- The four claims ----------------------------------------------------------------------

def _untestable(why: str) -> str:
    return f"{NOT_TESTABLE}: {why}"


def _judge(holds: bool, same_direction: bool) -> str:
    """The rule met; else the paper's direction without its threshold; else against it."""
    if holds:
        return CONSISTENT
    return BELOW_THRESHOLD if same_direction else NOT_CONSISTENT


def _decide(lo: float, hi: float) -> str:
    """The interval of a difference taken so that the paper's side is above zero."""
    if lo > 0:
        return CONSISTENT
    if hi < 0:
        return OPPOSITE
    return WITHIN_NOISE


def _decide_removal(found: dict, factor: float) -> str:
    """Claims 3-4 say the gate *removes* a sink or massive activations: an interval on the paper's
    side of zero with a reduction short of the rule's factor (a 3% lower F-Attn measured
    precisely) moves the paper's way without removing anything. found: the paired bootstrap
    (difference and ratio baseline ÷ gated, each (point, lo, hi)); the factor is read off the
    ratio's point, on the same per-sequence values as the interval."""
    verdict = _decide(found["difference"][1], found["difference"][2])
    removed = found["ratio"][0] >= factor               # inf where the gated value is 0; NaN: False
    return BELOW_THRESHOLD if verdict == CONSISTENT and not removed else verdict


def _no_gated_rows(runs: Runs, claim: int) -> list[_Row]:
    return [_Row(claim, ", ".join(runs.models), "; ".join(f"{m}: no gate" for m in runs.models),
                 _untestable(NO_GATED))]


def _sparse_gate(runs: Runs) -> list[_Row]:
    if not runs.gated_models:
        return _no_gated_rows(runs, 1)
    rows = []
    for model in runs.gated_models:
        mean, share = gate_numbers(runs, model, rules.LOW_GATE)
        numbers = {"mean_gate": mean, f"share_below_{rules.LOW_GATE:g}": share}
        found = ci.gate_intervals(runs, model)
        measured = (f"{model}: mean gate {_fmt(mean)}{ci.bracket(found and found[0])}, share of scores below "
                    f"{rules.LOW_GATE:g}: {_fmt(share)}{ci.bracket(found and found[1])}")
        if (broken := nonfinite_reason(runs, [model])) is not None:
            verdict = _untestable(broken)
        elif (other := not_sigmoid(runs, model)) is not None:
            verdict = _untestable(other)
        elif math.isnan(mean) or math.isnan(share):
            verdict = _untestable(f"{model} has no gate scores with the share below "
                                  f"{rules.LOW_GATE:g} (gates.csv)")
        elif found is not None:
            (_, m_lo, m_hi), (_, s_lo, s_hi) = found
            numbers.update(mean_gate_lo=m_lo, mean_gate_hi=m_hi, share_lo=s_lo, share_hi=s_hi)
            if m_hi < rules.MEAN_GATE_MAX and s_lo > rules.LOW_GATE_SHARE_MIN:
                verdict = CONSISTENT
            elif m_lo > rules.NO_PREFERENCE_GATE or s_hi < rules.LOW_GATE:
                verdict = OPPOSITE
            elif m_hi < rules.NO_PREFERENCE_GATE and s_lo > rules.LOW_GATE:
                # Both intervals on the paper's side of a gate without preference, clear of the
                # noise, but not past the rule's thresholds: a tight 0.42 [0.40, 0.43] is not noise.
                verdict = BELOW_THRESHOLD
            else:
                verdict = WITHIN_NOISE
        else:
            verdict = _judge(mean <= rules.MEAN_GATE_MAX and share >= rules.LOW_GATE_SHARE_MIN,
                             mean < rules.NO_PREFERENCE_GATE and share > rules.LOW_GATE)
        rows.append(_Row(1, model, measured, verdict, numbers))
    return rows


def _sparse_output(runs: Runs) -> list[_Row]:
    if not runs.gated_models:
        return _no_gated_rows(runs, 2)
    rows = []
    for model in runs.gated_models:
        shares, layers = sparsity_numbers(runs, model, rules.SPARSITY_THRESHOLD)
        order = ("ungated", "mean_gate", "gated")
        numbers = {variant: shares.get(variant, math.nan) for variant in order}
        missing = [VARIANT_LABELS[v] for v in order if math.isnan(numbers[v])]
        gain = ci.sparsity_gain(runs, model, rules.SPARSITY_THRESHOLD)
        beyond = ci.control_gain(runs, model, rules.SPARSITY_THRESHOLD) if gain is not None else None
        measured = (f"{model}, τ = {rules.SPARSITY_THRESHOLD:g}, mean over {layers} layers: "
                    + ", ".join(f"{_SHORT_VARIANTS[v]} {_fmt(numbers[v])}" for v in order)
                    + (f"; dynamic minus ungated {_fmt(gain[0])}{ci.bracket(gain)}" if gain else "")
                    + (f"; dynamic minus control {_fmt(beyond[0])}{ci.bracket(beyond)}" if beyond else ""))
        if (broken := nonfinite_reason(runs, [model])) is not None:
            verdict = _untestable(broken)
        elif missing:
            verdict = _untestable(f"{model} has no share below {rules.SPARSITY_THRESHOLD:g} for "
                                  f"{', '.join(missing)} (sparsity.csv)")
        else:
            ungated, control, gated = (numbers[v] for v in order)
            steps = (control - ungated, gated - control)
            if gain is not None and beyond is not None:
                # The exact control has its own interval: the gate must beat both references.
                numbers.update(gain_lo=gain[1], gain_hi=gain[2], control_gain_lo=beyond[1],
                               control_gain_hi=beyond[2])
                verdict = (CONSISTENT if gain[1] > 0 and beyond[1] > 0
                           else OPPOSITE if gain[2] < 0 or beyond[2] < 0 else WITHIN_NOISE)
            elif gain is not None:
                numbers.update(gain_lo=gain[1], gain_hi=gain[2])
                verdict = _decide(gain[1], gain[2])
                if verdict == CONSISTENT and min(steps) <= 0:
                    verdict = WITHIN_NOISE if max(steps) > 0 else OPPOSITE
            else:
                verdict = _judge(min(steps) >= rules.SPARSITY_MIN_STEP, min(steps) > 0)
        rows.append(_Row(2, model, measured, verdict, numbers))
    return rows


_SHORT_VARIANTS = {"ungated": "ungated", "mean_gate": "mean-gate control",
                   "gated": "dynamic gate"}


def _unpaired(runs: Runs, claim: int, measure: Callable[[str], str]) -> list[_Row]:
    """Claims 3-4 compare a baseline with a gated model: the rows that say why there is no
    such pair (empty when there is one)."""
    if not runs.gated_models:
        return [_Row(claim, ", ".join(runs.models), "; ".join(measure(m) for m in runs.models),
                     _untestable(NO_GATED))]
    if not runs.ungated_models:
        return [_Row(claim, model, measure(model), _untestable("no baseline in this report"))
                for model in runs.gated_models]
    return []


def _pairs(runs: Runs, declared, claim: int, measure) -> tuple[list[tuple[str, str]], list[_Row]]:
    """(matched pairs, one row per baseline and reason for the pairs that are not comparable)."""
    matched, unmatched = split_pairs(runs, declared)
    rows = [_Row(claim, f"{base} vs {', '.join(gated)}", "; ".join(measure(m) for m in (base, *gated)),
                 f"{NOT_COMPARABLE}: {why}") for base, gated, why in unmatched]
    return matched, rows


def how_many_times(factor: float, subject: str) -> str:
    """" (the gated 2.97× smaller)" for a baseline / gated factor above 1, " (... 1.14× larger)"
    below it: never "0.876× smaller" for a value that grew. Nothing when the factor is missing."""
    if math.isnan(factor) or factor <= 0:
        return ""
    if factor == 1:
        return f" ({subject} the same)"
    return (f" ({subject} {_fmt(factor)}× smaller)" if factor > 1
            else f" ({subject} {_fmt(1 / factor)}× larger)")


def _ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator; NaN where either is missing or the denominator is 0."""
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return math.nan
    return numerator / denominator


def _sink(runs: Runs, declared=None) -> list[_Row]:
    def measure(model: str) -> str:
        f_attn, uniform = f_attn_of(runs, model), uniform_of(runs, model)
        return (f"{model}: F-Attn {_fmt(f_attn)} = {_fmt(_ratio(f_attn, uniform))}× uniform "
                f"{_fmt(uniform)}")

    rows = _unpaired(runs, 3, measure)
    matched, refused = ([], []) if rows else _pairs(runs, declared, 3, measure)
    for base, gated in matched:
        numbers = {"baseline_f_attn": f_attn_of(runs, base),
                   "baseline_uniform": uniform_of(runs, base),
                   "gated_f_attn": f_attn_of(runs, gated), "gated_uniform": uniform_of(runs, gated)}
        base_ratio = _ratio(numbers["baseline_f_attn"], numbers["baseline_uniform"])
        gated_ratio = _ratio(numbers["gated_f_attn"], numbers["gated_uniform"])
        numbers.update(baseline_ratio=base_ratio, gated_ratio=gated_ratio)
        found = ci.sink_difference(runs, base, gated)
        measured = f"{measure(base)}; {measure(gated)}" + ci.paired_text(found, "F-Attn ÷ uniform")
        missing = [model for model, value in ((base, base_ratio), (gated, gated_ratio))
                   if math.isnan(value)]
        if (broken := nonfinite_reason(runs, [base, gated])) is not None:
            verdict = _untestable(broken)
        elif missing:
            verdict = _untestable(f"no F-Attn with a uniform reference for {', '.join(missing)} "
                                  "(first_token.csv, summary.json f_attn_uniform)")
        elif base_ratio < rules.SINK_MIN_RATIO:
            verdict = _untestable(f"the baseline has no sink ({base}'s F-Attn is "
                                  f"{_fmt(base_ratio)}× its uniform reference; a sink needs "
                                  f"≥ {rules.SINK_MIN_RATIO:g}×)")
        elif found is not None:
            numbers.update(difference_lo=found["difference"][1], difference_hi=found["difference"][2])
            verdict = _decide_removal(found, rules.F_ATTN_MIN_REDUCTION)
        else:
            verdict = _judge(gated_ratio * rules.F_ATTN_MIN_REDUCTION <= base_ratio,
                             gated_ratio < base_ratio)
        rows.append(_Row(3, f"{base} vs {gated}", measured, verdict, numbers))
    return rows + refused


def _massive(runs: Runs, declared=None) -> list[_Row]:
    def measure(model: str) -> str:
        return f"{model}: M-Act {_fmt(m_act_of(runs, model))}"

    rows = _unpaired(runs, 4, measure)
    matched, refused = ([], []) if rows else _pairs(runs, declared, 4, measure)
    for base, gated in matched:
        numbers = {"baseline_m_act": m_act_of(runs, base), "gated_m_act": m_act_of(runs, gated)}
        factor = _ratio(numbers["baseline_m_act"], numbers["gated_m_act"])
        numbers["factor"] = factor
        found = ci.m_act_difference(runs, base, gated)
        measured = (f"{measure(base)}; {measure(gated)}{how_many_times(factor, 'the gated')}"
                    + ci.paired_text(found, "M-Act"))
        missing = [model for model, key in ((base, "baseline_m_act"), (gated, "gated_m_act"))
                   if math.isnan(numbers[key])]
        if (broken := nonfinite_reason(runs, [base, gated])) is not None:
            verdict = _untestable(broken)
        elif missing:
            verdict = _untestable(f"no M-Act of the layer output for {', '.join(missing)} "
                                  "(massive.csv, summary.json m_act)")
        elif found is not None:
            numbers.update(difference_lo=found["difference"][1], difference_hi=found["difference"][2])
            verdict = _decide_removal(found, rules.M_ACT_MIN_REDUCTION)
        else:
            verdict = _judge(numbers["gated_m_act"] * rules.M_ACT_MIN_REDUCTION <= numbers["baseline_m_act"],
                             numbers["gated_m_act"] < numbers["baseline_m_act"])
        rows.append(_Row(4, f"{base} vs {gated}", measured, verdict, numbers))
    return rows + refused
