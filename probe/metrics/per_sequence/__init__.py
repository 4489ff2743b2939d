"""Per-sequence sums, counts and maxima of the headline numbers, declared (per_sequence.csv):
what the bootstrap intervals of probe/intervals/ resample, and summary.json's *_lo / *_hi. The
reducers: reduce.py."""
from __future__ import annotations

from ...core.events import FIRST_KEY, GATE, SDPA, SITE_EVENTS, Z
from ..base import Declaration

# `layer` -1 and `head` -1: not per layer / head; `key`: the M-Act site or the sparsity variant;
# `threshold`: the sparsity threshold, or LOW_GATE for gate_low (docs/run-directory.md lists the
# quantities).
LOW_GATE = 0.1          # gate scores below it: the share of claim 1 (gates.csv frac_lt_0.1)

DECLARATION = Declaration(
    name="per_sequence", metric="PerSequence", order=7,
    events={FIRST_KEY: "update_first_key", GATE: "update_gate", SDPA: "update_ungated", Z: "update_gated",
            **{event: f"update_{site}" for site, event in SITE_EVENTS.items()}},
    tables={"per_sequence": {"model": "str", "sequence": "int", "layer": "int", "head": "int",
                             "quantity": "str", "key": "str", "threshold": "float", "value": "float"}},
    summary_keys=(*(f"{k}_{side}" for k in ("f_attn", "f_attn_uniform", "sink_rate", "mean_gate", "m_act",
                                            "loss", "perplexity") for side in ("lo", "hi")), "intervals"),
    summary_order=6,
)
