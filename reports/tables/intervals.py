"""The 95% intervals beside the summary table's numbers (summary.json *_lo / *_hi), and the note
for runs that have none (written before per_sequence.csv)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from probe.reports.runs import Runs

# Summary columns that carry an interval in summary.json.
INTERVAL_KEYS = ("mean_gate", "m_act", "f_attn", "sink_rate", "loss", "perplexity")


def with_intervals(display: pd.DataFrame, runs: Runs, formats: Mapping[str, Callable[[Any], str]]) -> pd.DataFrame:
    """`display` (strings, one row per model) with " [lo, hi]" after each number that has one."""
    out = display.copy()
    for model in runs.models:
        summary = runs.summary[model]
        for key in INTERVAL_KEYS:
            lo, hi = summary.get(f"{key}_lo"), summary.get(f"{key}_hi")
            if key in out.columns and isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
                fmt = formats.get(key, str)
                out.loc[model, key] = f"{out.loc[model, key]} [{fmt(lo)}, {fmt(hi)}]"
    return out


def interval_notes(runs: Runs) -> list[str]:
    """One line for the runs without intervals, saying why."""
    missing = [m for m in runs.models if runs.rows("per_sequence", m).empty]
    if not missing:
        return []
    return [f"No intervals for {', '.join(missing)} (no per_sequence.csv: analysed before probe kept it)."]


def interval_caption(runs: Runs) -> str:
    """How the brackets were made (from the runs' summary.json `intervals`), or nothing."""
    kinds = {(d.get("resamples"), d.get("seed")) for d in (runs.summary[m].get("intervals") or {} for m in runs.models)
             if d.get("method")}
    if not kinds:
        return ""
    resamples = ", ".join(str(r) for r, _ in sorted(kinds, key=str))
    grouped = [m for m in runs.models if (runs.summary[m].get("intervals") or {}).get("documents")]
    over = "sequences" if not grouped else (
        "sequences (documents for " + ", ".join(grouped) + ": the sliding windows of a document drawn together)")
    return (f"Brackets: 95% percentile bootstrap intervals over {over} "
            f"({resamples} resamples, fixed seed); F-Attn, mean gate and loss pool tokens over the "
            "resampled sequences (ratios of sums). M-Act's is the bootstrap of a maximum, biased low: "
            "its upper end cannot exceed the largest value seen. " + few_sequences(runs))


FEW_SEQUENCES = 10      # below this, a bootstrap over sequences says little about the spread


def few_sequences(runs: Runs) -> str:
    """A warning for the runs whose intervals rest on fewer than FEW_SEQUENCES sequences: a
    resample of 2 sequences has 3 distinct outcomes, so an interval can be as narrow as one
    sequence's value or end at the estimate itself."""
    counts = {m: (runs.summary[m].get("intervals") or {}).get("sequences") for m in runs.models}
    few = {m: n for m, n in counts.items() if isinstance(n, int) and 0 < n < FEW_SEQUENCES}
    if not few:
        return ""
    listed = ", ".join(f"{m} ({n})" for m, n in few.items())
    return (f"Few sequences behind the brackets of {listed}: a bootstrap over fewer than "
            f"{FEW_SEQUENCES} sequences understates the spread (a bracket may have no width, or end "
            "at the estimate); analyse more sequences (--max-sequences) before reading them. ")
