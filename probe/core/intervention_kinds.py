"""The interventions probe can run, by name, and reading a user's choice of them (also what
reports/ reads interventions.csv by).

Apart from probe/run/interventions.py (which runs them, with torch and the model's hooks) so that
the options check a choice without importing what runs it (options -> interventions ->
capture -> options would be an import cycle, if only at call time).
"""
from __future__ import annotations

from .errors import ProbeError

INTERVENTIONS = ("mean_gate", "gate_one", "gate_zero", "massive_zero")
GATE_INTERVENTIONS = ("mean_gate", "gate_one", "gate_zero")
ALL_LAYERS = -1         # interventions.csv `layer` of an intervention applied in every layer at once


def parse_kinds(kinds) -> tuple[str, ...]:
    """None/True/"all" -> every intervention; "a,b" or a list -> those, in canonical order."""
    if kinds is None or kinds is True or kinds == "all":
        return INTERVENTIONS
    if isinstance(kinds, str):
        kinds = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(INTERVENTIONS))
    if unknown or not kinds:
        raise ProbeError(f"unknown intervention {', '.join(unknown) or '(none given)'}; "
                         f"use all or a comma list of {', '.join(INTERVENTIONS)}")
    return tuple(k for k in INTERVENTIONS if k in kinds)
