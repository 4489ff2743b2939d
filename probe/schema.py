"""The run directory's tables (docs/run-directory.md): name -> column -> kind, and the values
that key their rows.

One declaration for the writer and the reader: each metric in probe/metrics/ takes its
`TABLES` from here and writes them, reports/ reads run directories against `TABLES`. This
module imports nothing (no torch), so that `import reports` and `probe report` do not load
the libraries that run a model (tests/reports/test_runs.py checks it).

Kinds: "str" kept verbatim (a token may be "NA" or ""), "int" / "float" parsed with NaN for
empty or "nan" cells, "bool". A run that lacks a table's column is refused.
"""
from __future__ import annotations

# The run directory's two JSON files; meta.json lists the tables written, {name: rows}, under
# MANIFEST_KEY, so that a reader finds a deleted or cut-short CSV.
META_FILE = "meta.json"
SUMMARY_FILE = "summary.json"
MANIFEST_KEY = "tables"

# -- first_token.py: F-Attn ------------------------------------------------------------------
SINK_EPSILON = 0.3      # F-Attn above which a head counts as a sink (summary.json sink_rate)
# Queries a key needs before its received-attention score can name a secondary sink (fewer read
# high from recency; the measurement is in probe/metrics/anatomy.py). Reports mark the key
# buckets below it and read it from meta.json's anatomy_sink_min_queries.
SINK_MIN_QUERIES = 128
FIRST_TOKEN = {
    "first_token": {"model": "str", "layer": "int", "head": "int", "layer_type": "str",
                    "metric": "str", "value": "float"},
    "first_token_buckets": {"model": "str", "layer": "int", "head": "int", "bucket_lo": "float",
                            "bucket_hi": "float", "value": "float", "n_queries": "float",
                            "uniform": "float"},
}

# -- sparsity.py: the attention output below each threshold -----------------------------------
HEADLINE_THRESHOLDS = (1e-2, 1e-3)      # repeated in summary.json
VARIANTS = ("ungated", "mean_gate", "gated")                 # sparsity.csv `variant`
SPARSITY = {"sparsity": {"model": "str", "layer": "int", "variant": "str", "threshold": "float",
                         "value": "float"}}

# -- gates.py: gate scores ---------------------------------------------------------------------
GATES = {
    "gates": {"model": "str", "layer": "int", "head": "int", "group": "str", "metric": "str",
              "value": "float"},
    "gate_hist": {"model": "str", "layer": "int", "head": "int", "bin_lo": "float",
                  "bin_hi": "float", "count": "float"},
}

# -- token_types.py: gate scores by token type -------------------------------------------------
# The built-in token types (probe/token_types.py classifies them), gates_by_token_type.csv
# `token_type` before the user's groups.
TOKEN_TYPES = ("first", "special", "whitespace", "digits", "punctuation", "word_start", "word_piece", "other")
GATES_BY_TOKEN_TYPE = {"gates_by_token_type": {"model": "str", "layer": "int", "head": "int",
                                               "token_type": "str", "metric": "str", "value": "float"}}

# -- massive.py: M-Act -------------------------------------------------------------------------
SITES = ("attn_out", "resid_mid", "mlp_out", "resid_post")      # massive.csv `site`, paper Figure 6
MASSIVE = {
    "massive": {"model": "str", "layer": "int", "site": "str", "metric": "str", "value": "float"},
    "massive_top": {"model": "str", "layer": "int", "site": "str", "rank": "int",
                    "value": "float", "abs_value": "float", "sequence": "int", "position": "int",
                    "dim": "int", "token_id": "int", "token": "str"},
}

# -- anatomy.py: sink anatomy, written only with the anatomy option ----------------------------
ANATOMY = {
    "received_by_position": {"model": "str", "layer": "int", "head": "int", "key_lo": "int",
                             "key_hi": "float", "cells": "int", "queries": "int", "score": "float",
                             "pooled": "float", "sink_rate": "float"},
    "received_by_token": {"model": "str", "layer": "int", "rank": "int", "token_id": "int",
                          "token": "str", "cells": "int", "score": "float", "sink_share": "float"},
    "secondary_sinks": {"model": "str", "layer": "int", "head": "int", "sequence": "int",
                        "position": "int", "token_id": "int", "token": "str", "score": "float"},
    "value_drains": {"model": "str", "layer": "int", "head": "int", "sink_keys": "int",
                     "queries": "int", "value_norm_ratio": "float", "norm_share": "float",
                     "projection_share": "float"},
    "gate_sink": {"model": "str", "layer": "int", "head": "int", "attention_lo": "float",
                  "attention_hi": "float", "queries": "int", "attention": "float", "gate": "float",
                  "gate_std": "float"},
}

# -- per_sequence.py: per-sequence sums, counts and maxima of the headline numbers ------------
# What the bootstrap intervals (probe/intervals/) resample. `layer` -1 and `head` -1: not per
# layer / head; `key`: the M-Act site or the sparsity variant; `threshold`: the sparsity
# threshold, or LOW_GATE for gate_low (docs/run-directory.md lists the quantities).
LOW_GATE = 0.1          # gate scores below it: the share of claim 1 (gates.csv frac_lt_0.1)
PER_SEQUENCE = {"per_sequence": {"model": "str", "sequence": "int", "layer": "int", "head": "int",
                                 "quantity": "str", "key": "str", "threshold": "float", "value": "float"}}

# -- written by other parts of probe, not by a metric of the pass ------------------------------
OTHER_TABLES: dict[str, dict[str, str]] = {
    # The display prompt's head-averaged attention (analyze.display_patterns, bridge.display_patterns).
    "attention_patterns": {"model": "str", "layer": "int", "query": "int", "key": "int", "value": "float"},
    # probe train's log (probe/train), copied into trained runs.
    "training": {"model": "str", "step": "int", "tokens": "float", "lr": "float", "train_loss": "float",
                 "eval_loss": "float", "grad_norm": "float", "spike": "bool"},
    # The loss under interventions (probe/interventions.py).
    "interventions": {"model": "str", "intervention": "str", "layer": "int", "loss": "float",
                      "delta_loss": "float", "setting": "float", "zeroed": "float", "note": "str"},
    # Written by examples/demo.py for trained checkpoints (probe.train.evaluate.inference_table).
    "inference": {"model": "str", "metric": "str", "length": "int", "value": "float"},
    # Continued training measured at each saved step (examples/grafts/experiment.py): loss,
    # f_attn, f_attn_sink_layers, sink_rate, m_act, mean_gate per (model, step).
    "trajectory": {"model": "str", "step": "int", "tokens": "int", "metric": "str", "value": "float"},
}

# Every table of the run directory, in the order of probe.metrics.METRICS, then the others
# (tests/test_metrics.py checks that the metrics write exactly these).
TABLES: dict[str, dict[str, str]] = {**FIRST_TOKEN, **SPARSITY, **GATES, **GATES_BY_TOKEN_TYPE, **MASSIVE,
                                     **ANATOMY, **PER_SEQUENCE, **OTHER_TABLES}
# Tables a metric writes only when an option asks for it: table -> the option. A run without
# them is complete; one that has such a table must have all of its columns, as any other.
OPTIONAL_TABLES: dict[str, str] = {t: "anatomy" for t in ANATOMY}
