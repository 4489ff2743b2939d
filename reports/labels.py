"""Names, column types and labels of the run directory (docs/run-directory.md) for reports/.

The tables and their columns are those the metrics write (probe/results/schema.py, which imports no
torch: reading runs does not load it); this module adds what the reports show of them. Every other module of reports/ refers to
these constants instead of spelling file or column names.
"""

from __future__ import annotations

# Every table of the run directory, name -> column -> kind, as the metrics that write them
# declare it: "str" columns are kept verbatim (a token may be "NA" or ""), "int" and "float" are
# parsed with NaN for empty or "nan" cells. A run that lacks a column is refused.
# meta.json and summary.json, and meta.json's list of the tables written (MANIFEST_KEY).
from probe.results.schema import (GATE_GROUPS, HEADLINE_THRESHOLDS, MANIFEST_KEY, META_FILE, OPTIONAL_TABLES,
                                  SINK_EPSILON, SINK_MIN_QUERIES, SITES, SUMMARY_FILE, TABLES, TOKEN_TYPES,
                                  VARIANTS)
from probe.core.intervention_kinds import ALL_LAYERS, INTERVENTIONS  # noqa: E402,F401

ATTENTION = "attention"
LINEAR_ATTENTION = "linear_attention"

# M-Act sites (SITES) in the order of the decoder layer's data flow (paper Figure 6).
SITE_LABELS = {
    "attn_out": "attention output",
    "resid_mid": "residual after attention",
    "mlp_out": "MLP output",
    "resid_post": "layer output",
}

# Sparsity variants (VARIANTS), from no gate to the dynamic gate (paper Figure 5).
VARIANT_LABELS = {
    "ungated": "ungated O",
    "mean_gate": "O × mean gate (uniform control)",
    "gated": "O ⊙ g (dynamic gate)",
}

# Gate saturation metrics of gates.csv, low end first.
SATURATION_METRICS = ("frac_lt_0.01", "frac_lt_0.1", "frac_lt_0.5", "frac_gt_0.9",
                      "frac_gt_0.99")
SATURATION_LABELS = {
    "frac_lt_0.01": "< 0.01",
    "frac_lt_0.1": "< 0.1",
    "frac_lt_0.5": "< 0.5",
    "frac_gt_0.9": "> 0.9",
    "frac_gt_0.99": "> 0.99",
}

# Built-in token types of gates_by_token_type.csv (TOKEN_TYPES) in display order; user groups follow.

# Interventions of interventions.csv (INTERVENTIONS, in display order; `none` is the reference
# loss; ALL_LAYERS the `layer` of one applied to every layer at once), and their labels.
INTERVENTION_LABELS = {
    "mean_gate": "gate → layer mean",
    "gate_one": "gate = 1 (ungated)",
    "gate_zero": "gate = 0 (attention off)",
    "massive_zero": "massive activations → 0",
}

# Metrics of inference.csv (examples/demo.py) shown as a table, with their labels.
INFERENCE_METRICS = {
    "prefill_ms": "prefill (ms)",
    "decode_ms_per_token": "decode (ms / token)",
    "kv_cache_mb": "KV / state cache (MB)",     # GDN layers: conv and recurrent states
    "param_mb": "parameters (MB)",
    "peak_mem_mb": "peak memory (MB)",
    "threads": "CPU threads",
}
