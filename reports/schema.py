"""Names and column types of the run directory (docs/run-directory.md), in one place.

Every other module refers to these constants instead of spelling file or column names, so a
change of the format touches this file only.
"""

from __future__ import annotations

# Column kinds: "str" columns are kept verbatim (a token may be "NA" or ""), "int" and "float"
# are parsed with NaN for empty or "nan" cells.
TABLES: dict[str, dict[str, str]] = {
    "gates": {"model": "str", "layer": "int", "head": "int", "group": "str", "metric": "str",
              "value": "float"},
    "gate_hist": {"model": "str", "layer": "int", "head": "int", "bin_lo": "float",
                  "bin_hi": "float", "count": "float"},
    "first_token": {"model": "str", "layer": "int", "head": "int", "layer_type": "str",
                    "metric": "str", "value": "float"},
    "massive": {"model": "str", "layer": "int", "site": "str", "metric": "str", "value": "float"},
    "massive_top": {"model": "str", "layer": "int", "site": "str", "rank": "int",
                    "value": "float", "abs_value": "float", "sequence": "int", "position": "int",
                    "dim": "int", "token_id": "int", "token": "str"},
    "sparsity": {"model": "str", "layer": "int", "variant": "str", "threshold": "float",
                 "value": "float"},
    "attention_patterns": {"model": "str", "layer": "int", "query": "int", "key": "int",
                           "value": "float"},
    "training": {"model": "str", "step": "int", "tokens": "float", "lr": "float",
                 "train_loss": "float", "eval_loss": "float", "grad_norm": "float",
                 "spike": "bool"},
    "gates_by_token_type": {"model": "str", "layer": "int", "head": "int", "token_type": "str",
                            "metric": "str", "value": "float"},
    "interventions": {"model": "str", "intervention": "str", "layer": "int", "loss": "float",
                      "delta_loss": "float", "setting": "float", "zeroed": "float", "note": "str"},
    "first_token_buckets": {"model": "str", "layer": "int", "head": "int", "bucket_lo": "float",
                            "bucket_hi": "float", "value": "float", "n_queries": "float",
                            "uniform": "float"},
    # Written by examples/demo.py for trained checkpoints (probe.train.evaluate.inference_table).
    "inference": {"model": "str", "metric": "str", "length": "int", "value": "float"},
}

# Columns added to a table after its first release: a run written before them lacks them, and
# they read as empty ("" or NaN). Every other column of TABLES must be in the file.
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {"interventions": ("note",)}

META_FILE = "meta.json"
# meta.json's list of the tables written, {name: rows}: a deleted or cut-short CSV is found.
MANIFEST_KEY = "tables"
SUMMARY_FILE = "summary.json"

ATTENTION = "attention"
LINEAR_ATTENTION = "linear_attention"

# M-Act sites in the order of the decoder layer's data flow (paper Figure 6).
SITES = ("attn_out", "resid_mid", "mlp_out", "resid_post")
SITE_LABELS = {
    "attn_out": "attention output",
    "resid_mid": "residual after attention",
    "mlp_out": "MLP output",
    "resid_post": "layer output",
}

# Sparsity variants, from no gate to the dynamic gate (paper Figure 5).
VARIANTS = ("ungated", "mean_gate", "gated")
VARIANT_LABELS = {
    "ungated": "ungated O",
    "mean_gate": "O × mean gate (uniform control)",
    "gated": "O ⊙ g (dynamic gate)",
}
HEADLINE_THRESHOLDS = (1e-2, 1e-3)

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

# Built-in token types of gates_by_token_type.csv, in display order; user groups follow them.
TOKEN_TYPES = ("first", "special", "whitespace", "digits", "punctuation", "word_start",
               "word_piece", "other")

# Interventions of interventions.csv, in display order (`none` is the reference loss).
INTERVENTIONS = ("mean_gate", "gate_one", "gate_zero", "massive_zero")
INTERVENTION_LABELS = {
    "mean_gate": "gate → layer mean",
    "gate_one": "gate = 1 (ungated)",
    "gate_zero": "gate = 0 (attention off)",
    "massive_zero": "massive activations → 0",
}
ALL_LAYERS = -1  # the `layer` of an intervention applied to every layer at once

# Metrics of inference.csv (examples/demo.py) shown as a table, with their labels.
INFERENCE_METRICS = {
    "prefill_ms": "prefill (ms)",
    "decode_ms_per_token": "decode (ms / token)",
    "kv_cache_mb": "KV cache (MB)",
    "param_mb": "parameters (MB)",
    "peak_mem_mb": "peak memory (MB)",
    "threads": "CPU threads",
}
