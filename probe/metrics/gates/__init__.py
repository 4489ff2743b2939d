"""Gate scores, declared: per layer and head, first token vs the rest (gates.csv), their
histogram (gate_hist.csv) and summary.json's mean gate. The reducers: reduce.py."""
from __future__ import annotations

from ...core.events import GATE
from ..base import Declaration

# gates.csv's `group`: every position, position 0, the positions after it
GATE_GROUPS = ("all", "first", "rest")

DECLARATION = Declaration(
    name="gates", metric="Gates", order=2,
    events={GATE: "update"},
    tables={
        "gates": {"model": "str", "layer": "int", "head": "int", "group": "str", "metric": "str",
                  "value": "float"},
        "gate_hist": {"model": "str", "layer": "int", "head": "int", "bin_lo": "float",
                      "bin_hi": "float", "count": "float"},
    },
    summary_keys=("mean_gate",),
    summary_order=0,
    layer_keys={"mean_gate": None},
    layer_order=1,
    counts={"gate_hist": ("count",)},
)
