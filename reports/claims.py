"""The paper's four headline claims, checked in direction on the runs of one report.

Each verdict says whether these runs move the way the paper reports, never that they reproduce
its numbers: small or briefly trained models are not expected to reach the paper's values. The
thresholds of the verdicts are the named constants below, the only place they live; the table's
caption quotes them, so a reader who disagrees with one can see which and rerun with another.

    import reports
    reports.claims_table(["runs/base", "runs/gated"])        # run directories
    reports.claims_table(a_baseline, a_gated)                  # probe.Analysis objects
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from reports.frames import (first_token_by_layer, gate_mean_by_group, gate_saturation,
                            sparsity_at)
from reports.reference import FIGURE5, TABLE4
from reports.runs import Runs, load_runs
from reports.schema import HEADLINE_THRESHOLDS, VARIANT_LABELS
from reports.text import join_layers

# --- The rules' thresholds ----------------------------------------------------------------
# Claim 1. 0.3 lies below every variant the paper calls non-sparse (input-independent gate
# 0.335, NS-sigmoid 0.653) and well below 0.5, what a gate with no preference (logit 0) gives.
MEAN_GATE_MAX = 0.3
# gates.csv saves the share below 0.1 (frac_lt_0.1; LOW_GATE must be one of its saturation
# thresholds); a uniform spread of scores on [0, 1] would put 0.1 there, so "a large share"
# asks for 2.5 times that.
LOW_GATE = 0.1
LOW_GATE_SHARE_MIN = 0.25
# Claim 2. Figure 5's headline threshold; each step of the ordering must gain at least one
# percentage point, so that rounding-level differences do not decide a verdict.
SPARSITY_THRESHOLD = HEADLINE_THRESHOLDS[0]
SPARSITY_MIN_STEP = 0.01
# Claim 3. A baseline has a sink when its F-Attn is at least 3x what uniform causal attention
# gives on the same queries, mean_t 1/(t+1); only then can a gate remove one.
SINK_MIN_RATIO = 3.0
# Claims 3 and 4: "removes" is read as "at least this many times smaller than the baseline".
F_ATTN_MIN_REDUCTION = 2.0
M_ACT_MIN_REDUCTION = 2.0

# What "the same direction" means for each claim, without its threshold: claim 1, a mean
# gate below what a gate without preference gives (logit 0) and more scores below LOW_GATE than
# a uniform spread puts there; claims 2-4, every step of the ordering strictly the paper's way.
NO_PREFERENCE_GATE = 0.5

CONSISTENT = "direction consistent with the paper"
# The run moves the paper's way but by less than the rule asks: not a contradiction.
BELOW_THRESHOLD = "same direction, below the threshold"
NOT_CONSISTENT = "not consistent with the paper"
NOT_TESTABLE = "not testable"

STATEMENTS = {
    1: "Gate scores are sparse",
    2: "The gate makes the attention output sparse beyond uniform scaling",
    3: "The gate removes the first-token attention sink",
    4: "The gate removes massive activations",
}
COLUMNS = ["claim", "statement", "models", "paper", "these runs", "verdict", "rule", "numbers"]
MASSIVE_SITE = "resid_post"  # the paper's M-Act: each layer's output hidden state


@dataclass
class _Row:
    claim: int
    models: str
    measured: str
    verdict: str
    numbers: dict[str, float] = field(default_factory=dict)


def claims_table(*runs_or_analyses: Any) -> pd.DataFrame:
    """One row per claim and gated model (claims 3-4: per baseline and gated model).

    Accepts what `load_runs` does (run directories, a `probe compare` folder, Analysis objects,
    a `Runs`), as one argument or several: `claims_table(a_baseline, a_gated)`. Columns: claim
    number, statement, models, the paper's values, the values in these runs, the verdict, the
    rule used, and `numbers` (a dict of the values the verdict was computed from).
    """
    source = runs_or_analyses[0] if len(runs_or_analyses) == 1 else list(runs_or_analyses)
    runs = load_runs(source)
    rows = _sparse_gate(runs) + _sparse_output(runs) + _sink(runs) + _massive(runs)
    records = [{"claim": row.claim, "statement": STATEMENTS[row.claim], "models": row.models,
                "paper": PAPER_VALUES[row.claim](), "these runs": row.measured,
                "verdict": row.verdict, "rule": RULES[row.claim](), "numbers": row.numbers}
               for row in rows]
    return pd.DataFrame.from_records(records, columns=COLUMNS)


def claims_display(runs: Any) -> pd.DataFrame:
    """Strings for HTML and PDF: the claim as the first column, `numbers` left out."""
    frame = claims_table(runs)
    display = frame.drop(columns=["claim", "statement", "numbers"])
    display.index = [f"{claim}. {statement}"
                     for claim, statement in zip(frame["claim"], frame["statement"])]
    return display


def claims_caption() -> str:
    """Every threshold of the rules, for the table's caption."""
    return (
        "Whether each headline claim of the paper holds in these runs in the direction the "
        "paper reports; a consistent direction does not mean the paper's values are reached. "
        f"Verdicts: \"{CONSISTENT}\" (the rule below is met); \"{BELOW_THRESHOLD}\" (the "
        "run moves the paper's way, by less than the rule asks: claim 1, mean gate below "
        f"{NO_PREFERENCE_GATE:g} and more than {LOW_GATE:g} of the scores below {LOW_GATE:g}; "
        "claims 2-4, every step strictly the paper's way); "
        f"\"{NOT_CONSISTENT}\" (the run moves against the paper); \"{NOT_TESTABLE}\" (with "
        "the reason, e.g. NaN/inf activations in a model). "
        f"Thresholds (reports/claims.py): (1) mean gate ≤ {MEAN_GATE_MAX:g} "
        f"(MEAN_GATE_MAX; 0.5 is a gate without preference) and share of gate scores below "
        f"{LOW_GATE:g} ≥ {LOW_GATE_SHARE_MIN:g} (LOW_GATE_SHARE_MIN; a uniform spread puts "
        f"{LOW_GATE:g} there), count-weighted over all gated layers and heads; (2) share of "
        f"|attention output| below τ = {SPARSITY_THRESHOLD:g}, mean over the layers of "
        "sparsity.csv, ungated < mean-gate control < dynamic gate, each step at least "
        f"{SPARSITY_MIN_STEP:g} (SPARSITY_MIN_STEP), within each gated model; (3) F-Attn "
        "(t ≥ 1; heads averaged per layer, then attention layers) as a multiple of the run's "
        f"uniform reference mean_t 1/(t+1) (0 once key 0 leaves a sliding window): the baseline has a sink when it is ≥ "
        f"{SINK_MIN_RATIO:g}× (SINK_MIN_RATIO), and the gated model's multiple must be at least "
        f"{F_ATTN_MIN_REDUCTION:g}× smaller (F_ATTN_MIN_REDUCTION); (4) M-Act (mean over layers "
        "of the largest |layer output|) of the gated model at least "
        f"{M_ACT_MIN_REDUCTION:g}× smaller than the baseline's (M_ACT_MIN_REDUCTION); this "
        "rule does not ask whether the baseline's maxima are massive in absolute terms. "
        "Claims 3 and 4 need a baseline (a model without gate) in the report.")


def claims_text(table: pd.DataFrame) -> str:
    """The table as indented text blocks for a terminal (`probe compare`)."""
    lines = ["Claims of the paper, checked in direction (reports.claims_table; thresholds in "
             "reports/claims.py):"]
    for values in table.to_dict("records"):
        lines.append(f"[{values['claim']}] {values['statement']} ({values['models']}): "
                     f"{values['verdict']}")
        lines.append(f"    these runs: {values['these runs']}")
        lines.append(f"    paper:      {values['paper']}")
        lines.append(f"    rule:       {values['rule']}")
    return "\n".join(lines)


# --- The paper's side and the rules, as text ----------------------------------------------

_TABLE4_INDEX = {"mean gate": 1, "M-Act": 2, "F-Attn": 3}  # positions in TABLE4's rows


def _table4(column: str, fmt: Callable[[float], str]) -> str:
    """One column of the paper's Table 4: "baseline 1053 → elementwise 94, headwise 98"."""
    index = _TABLE4_INDEX[column]
    # "baseline (no gate)" -> "baseline", "elementwise gate (G1)" -> "elementwise"
    values = [(row[0].split()[0], row[index]) for row in TABLE4 if row[index] is not None]
    baseline = [f"{name} {fmt(value)}" for name, value in values if name == "baseline"]
    gated = ", ".join(f"{name} {fmt(value)}" for name, value in values if name != "baseline")
    return " → ".join([*baseline, gated])


def _paper_sparsity() -> str:
    shares = FIGURE5[SPARSITY_THRESHOLD]
    return (f"τ = {SPARSITY_THRESHOLD:g}: ungated {shares['ungated']:g} < mean-gate control "
            f"{shares['mean_gate']:g} < dynamic gate {shares['gated']:g} (Figure 5)")


PAPER_VALUES: dict[int, Callable[[], str]] = {
    1: lambda: (f"mean gate {_table4('mean gate', lambda v: f'{v:.3f}')} (Table 4); most "
                "scores near 0 (Figure 3)"),
    2: _paper_sparsity,
    3: lambda: f"F-Attn {_table4('F-Attn', lambda v: f'{v:.3f}')} (Table 4)",
    4: lambda: f"M-Act {_table4('M-Act', lambda v: f'{v:g}')} (Table 4)",
}

# Built when asked, so that they always quote the constants' current values.
RULES: dict[int, Callable[[], str]] = {
    1: lambda: (f"mean gate ≤ {MEAN_GATE_MAX:g} and share of gate scores < {LOW_GATE:g} "
                f"≥ {LOW_GATE_SHARE_MIN:g}"),
    2: lambda: (f"at τ = {SPARSITY_THRESHOLD:g}, mean over layers: ungated < mean-gate control "
                f"< dynamic gate, each step ≥ {SPARSITY_MIN_STEP:g}"),
    3: lambda: (f"baseline has a sink: F-Attn ≥ {SINK_MIN_RATIO:g}× its uniform reference; "
                f"then gated F-Attn ÷ uniform ≤ 1/{F_ATTN_MIN_REDUCTION:g} of the baseline's"),
    4: lambda: f"gated M-Act ≤ 1/{M_ACT_MIN_REDUCTION:g} of the baseline's",
}


# --- The numbers of one model, from the tables (summary.json where a table is missing) -----

def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _gate_numbers(runs: Runs, model: str) -> tuple[float, float]:
    """Count-weighted mean gate and share of gate scores below LOW_GATE, all gated layers."""
    means = gate_mean_by_group(runs)
    mean = means[(means["model"] == model) & (means["group"] == "all")]["mean"]
    shares = gate_saturation(runs)
    share = shares[(shares["model"] == model) & (shares["metric"] == f"frac_lt_{LOW_GATE:g}")]
    return (_number(mean.iloc[0]) if len(mean) else _number(runs.summary[model].get("mean_gate")),
            _number(share["value"].iloc[0]) if len(share) else math.nan)


def _sparsity_numbers(runs: Runs, model: str) -> tuple[dict[str, float], int]:
    """Share below SPARSITY_THRESHOLD per variant, mean over layers (equal element counts)."""
    rows = sparsity_at(runs, SPARSITY_THRESHOLD)
    rows = rows[rows["model"] == model]
    return rows.groupby("variant")["value"].mean().to_dict(), rows["layer"].nunique()


def _f_attn(runs: Runs, model: str) -> float:
    per_layer = first_token_by_layer(runs)
    values = per_layer[per_layer["model"] == model]["value"]
    return float(values.mean()) if len(values) else _number(runs.summary[model].get("f_attn"))


def _uniform(runs: Runs, model: str) -> float:
    saved = _number(runs.summary[model].get("f_attn_uniform"))
    if not math.isnan(saved):
        return saved
    # Older summaries: the query-weighted uniform reference of the position buckets.
    rows = runs.rows("first_token_buckets", model).dropna(subset=["uniform", "n_queries"])
    weights = rows["n_queries"].sum()
    return float((rows["uniform"] * rows["n_queries"]).sum() / weights) if weights else math.nan


def _m_act(runs: Runs, model: str) -> float:
    rows = runs.rows("massive", model)
    maxima = rows[(rows["site"] == MASSIVE_SITE) & (rows["metric"] == "max_abs")]["value"]
    return float(maxima.mean()) if len(maxima) else _number(runs.summary[model].get("m_act"))


# --- The four claims ----------------------------------------------------------------------

def _untestable(why: str) -> str:
    return f"{NOT_TESTABLE}: {why}"


def _judge(holds: bool, same_direction: bool) -> str:
    """The rule met; else the paper's direction without its threshold; else against it."""
    if holds:
        return CONSISTENT
    return BELOW_THRESHOLD if same_direction else NOT_CONSISTENT


def _nonfinite_layers(runs: Runs, model: str) -> list[int]:
    """Layers where the run saw NaN/inf activations (meta.json nonfinite_activations, the
    `nonfinite` rows of massive.csv) or that have no layer-output M-Act although the model has
    them (a layer all NaN leaves no finite value to summarise)."""
    layers = set()
    for key, count in (runs.meta[model].get("nonfinite_activations") or {}).items():
        head = str(key).split(":")[0]
        if head.isdigit() and _number(count) > 0:
            layers.add(int(head))
    rows = runs.rows("massive", model)
    if len(rows):
        flagged = rows[(rows["metric"] == "nonfinite") & (rows["value"] > 0)]
        layers.update(int(layer) for layer in flagged["layer"])
        maxima = rows[(rows["site"] == MASSIVE_SITE) & (rows["metric"] == "max_abs")]
        finite = {int(layer) for layer, value in zip(maxima["layer"], maxima["value"])
                  if math.isfinite(_number(value))}
        layers.update(set(runs.layers(model)) - finite)
    return sorted(layers)


def nonfinite_reason(runs: Runs, models: Sequence[str]) -> str | None:
    """Why a verdict on `models` cannot be given when one of them saw NaN/inf values: its
    statistics then cover fewer layers (or values) than the model has, and a comparison
    with a model that has all of them would be between different things."""
    parts = []
    for model in models:
        layers = _nonfinite_layers(runs, model)
        if layers:
            plural = "s" if len(layers) > 1 else ""
            parts.append(f"{model} has NaN/inf activations at layer{plural} "
                         f"{join_layers(layers)}")
    if not parts:
        return None
    return "; ".join(parts) + " (its statistics leave those values out)"


def _no_gated_rows(runs: Runs, claim: int) -> list[_Row]:
    return [_Row(claim, ", ".join(runs.models), "; ".join(f"{m}: no gate" for m in runs.models),
                 _untestable("no gated model in this report"))]


def _sparse_gate(runs: Runs) -> list[_Row]:
    if not runs.gated_models:
        return _no_gated_rows(runs, 1)
    rows = []
    for model in runs.gated_models:
        mean, share = _gate_numbers(runs, model)
        numbers = {"mean_gate": mean, f"share_below_{LOW_GATE:g}": share}
        measured = f"{model}: mean gate {_fmt(mean)}, share < {LOW_GATE:g} {_fmt(share)}"
        if (broken := nonfinite_reason(runs, [model])) is not None:
            verdict = _untestable(broken)
        elif math.isnan(mean) or math.isnan(share):
            verdict = _untestable(f"{model} has no gate scores with the share below "
                                  f"{LOW_GATE:g} (gates.csv)")
        else:
            verdict = _judge(mean <= MEAN_GATE_MAX and share >= LOW_GATE_SHARE_MIN,
                             mean < NO_PREFERENCE_GATE and share > LOW_GATE)
        rows.append(_Row(1, model, measured, verdict, numbers))
    return rows


def _sparse_output(runs: Runs) -> list[_Row]:
    if not runs.gated_models:
        return _no_gated_rows(runs, 2)
    rows = []
    for model in runs.gated_models:
        shares, layers = _sparsity_numbers(runs, model)
        order = ("ungated", "mean_gate", "gated")
        numbers = {variant: shares.get(variant, math.nan) for variant in order}
        missing = [VARIANT_LABELS[v] for v in order if math.isnan(numbers[v])]
        measured = (f"{model}, τ = {SPARSITY_THRESHOLD:g}, mean over {layers} layers: "
                    + ", ".join(f"{_SHORT_VARIANTS[v]} {_fmt(numbers[v])}" for v in order))
        if (broken := nonfinite_reason(runs, [model])) is not None:
            verdict = _untestable(broken)
        elif missing:
            verdict = _untestable(f"{model} has no share below {SPARSITY_THRESHOLD:g} for "
                                  f"{', '.join(missing)} (sparsity.csv)")
        else:
            ungated, control, gated = (numbers[v] for v in order)
            steps = (control - ungated, gated - control)
            verdict = _judge(min(steps) >= SPARSITY_MIN_STEP, min(steps) > 0)
        rows.append(_Row(2, model, measured, verdict, numbers))
    return rows


_SHORT_VARIANTS = {"ungated": "ungated", "mean_gate": "mean-gate control",
                   "gated": "dynamic gate"}


def _unpaired(runs: Runs, claim: int, measure: Callable[[str], str]) -> list[_Row]:
    """Claims 3-4 compare a baseline with a gated model: the rows that say why there is no
    such pair (empty when there is one)."""
    if not runs.gated_models:
        return [_Row(claim, ", ".join(runs.models), "; ".join(measure(m) for m in runs.models),
                     _untestable("no gated model in this report"))]
    if not runs.ungated_models:
        return [_Row(claim, model, measure(model), _untestable("no baseline in this report"))
                for model in runs.gated_models]
    return []


def _pairs(runs: Runs) -> list[tuple[str, str]]:
    return [(base, gated) for gated in runs.gated_models for base in runs.ungated_models]


def _ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator; NaN where either is missing or the denominator is 0."""
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return math.nan
    return numerator / denominator


def _sink(runs: Runs) -> list[_Row]:
    def measure(model: str) -> str:
        f_attn, uniform = _f_attn(runs, model), _uniform(runs, model)
        return (f"{model}: F-Attn {_fmt(f_attn)} = {_fmt(_ratio(f_attn, uniform))}× uniform "
                f"{_fmt(uniform)}")

    rows = _unpaired(runs, 3, measure)
    for base, gated in ([] if rows else _pairs(runs)):
        numbers = {"baseline_f_attn": _f_attn(runs, base), "baseline_uniform": _uniform(runs, base),
                   "gated_f_attn": _f_attn(runs, gated), "gated_uniform": _uniform(runs, gated)}
        base_ratio = _ratio(numbers["baseline_f_attn"], numbers["baseline_uniform"])
        gated_ratio = _ratio(numbers["gated_f_attn"], numbers["gated_uniform"])
        numbers.update(baseline_ratio=base_ratio, gated_ratio=gated_ratio)
        measured = f"{measure(base)}; {measure(gated)}"
        missing = [model for model, value in ((base, base_ratio), (gated, gated_ratio))
                   if math.isnan(value)]
        if (broken := nonfinite_reason(runs, [base, gated])) is not None:
            verdict = _untestable(broken)
        elif missing:
            verdict = _untestable(f"no F-Attn with a uniform reference for {', '.join(missing)} "
                                  "(first_token.csv, summary.json f_attn_uniform)")
        elif base_ratio < SINK_MIN_RATIO:
            verdict = _untestable(f"the baseline has no sink ({base}'s F-Attn is "
                                  f"{_fmt(base_ratio)}× its uniform reference; a sink needs "
                                  f"≥ {SINK_MIN_RATIO:g}×)")
        else:
            verdict = _judge(gated_ratio * F_ATTN_MIN_REDUCTION <= base_ratio,
                             gated_ratio < base_ratio)
        rows.append(_Row(3, f"{base} vs {gated}", measured, verdict, numbers))
    return rows


def _massive(runs: Runs) -> list[_Row]:
    def measure(model: str) -> str:
        return f"{model}: M-Act {_fmt(_m_act(runs, model))}"

    rows = _unpaired(runs, 4, measure)
    for base, gated in ([] if rows else _pairs(runs)):
        numbers = {"baseline_m_act": _m_act(runs, base), "gated_m_act": _m_act(runs, gated)}
        factor = _ratio(numbers["baseline_m_act"], numbers["gated_m_act"])
        numbers["factor"] = factor
        measured = f"{measure(base)}; {measure(gated)} ({_fmt(factor)}× smaller)"
        missing = [model for model, key in ((base, "baseline_m_act"), (gated, "gated_m_act"))
                   if math.isnan(numbers[key])]
        if (broken := nonfinite_reason(runs, [base, gated])) is not None:
            verdict = _untestable(broken)
        elif missing:
            verdict = _untestable(f"no M-Act of the layer output for {', '.join(missing)} "
                                  "(massive.csv, summary.json m_act)")
        else:
            verdict = _judge(numbers["gated_m_act"] * M_ACT_MIN_REDUCTION
                             <= numbers["baseline_m_act"],
                             numbers["gated_m_act"] < numbers["baseline_m_act"])
        rows.append(_Row(4, f"{base} vs {gated}", measured, verdict, numbers))
    return rows


def _fmt(value: float) -> str:
    """Three significant digits (whole numbers from 1000 up); n/a for what is missing."""
    if value is None or math.isnan(value):
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"
