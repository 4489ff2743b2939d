"""The paper's side of each claim, as text: its Table 4 values and Figure 5's sparsity shares."""

from __future__ import annotations

from collections.abc import Callable

from probe.reports.claims.reference import FIGURE5, TABLE4


TABLE4_INDEX = {"mean gate": 1, "M-Act": 2, "F-Attn": 3}  # positions in TABLE4's rows


def table4(column: str, fmt: Callable[[float], str]) -> str:
    """One column of the paper's Table 4: "baseline 1053 → elementwise 94, headwise 98"."""
    index = TABLE4_INDEX[column]
    # "baseline (no gate)" -> "baseline", "elementwise gate (G1)" -> "elementwise"
    values = [(row[0].split()[0], row[index]) for row in TABLE4 if row[index] is not None]
    baseline = [f"{name} {fmt(value)}" for name, value in values if name == "baseline"]
    gated = ", ".join(f"{name} {fmt(value)}" for name, value in values if name != "baseline")
    return " → ".join([*baseline, gated])


def paper_sparsity(threshold: float) -> str:
    shares = FIGURE5[threshold]
    return (f"τ = {threshold:g}: ungated {shares['ungated']:g} < mean-gate control "
            f"{shares['mean_gate']:g} < dynamic gate {shares['gated']:g} (Figure 5)")
