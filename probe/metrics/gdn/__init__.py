"""Gated DeltaNet layers, declared (the `gdn` option, --gdn): the linear-attention layers of
hybrids (Qwen3-Next, Qwen3.5), measured exactly. The reducers: stats.py (per token) and keys.py
(per-key terms, decompose.py); the metric: reduce.py; the hooks: probe/capture/gdn.py;
docs/gdn.md says what each number is.

    gdn_gates.csv        per layer, value head, quantity and token group: the output gate
                         SiLU(z) (quantity gate_silu: a SiLU gate, not a sigmoid one), the write
                         strength beta = sigmoid(b) and the decay exp(g): count, mean, std, min,
                         max, frac_lt_* (of |value|), frac_gt_*; for the decay also mean_g and
                         half_life = ln 0.5 / mean g, in tokens
    gdn_gate_hist.csv    their histograms (50 bins; gate_silu over [-0.5, 4.5), clamped)
    gdn_top_beta.csv     the tokens written in hardest: the largest beta per layer and head
    gdn_sparsity.csv     share of |x| below each threshold: the kernel output o (pre_gate), the
                         normed output w * rmsnorm(o) the gate multiplies (normed), that times the
                         layer's mean SiLU(z) (mean_gate, the control) and out_proj's input (gated)
    gdn_head_norms.csv   per head the mean |o|, |w * rmsnorm(o)| and |y| (before and after the gate)
    gdn_keys.csv         per layer and head: the key-0 share of each query's output (mean over
                         queries t >= 1, and over all), its signed projection, the state shares
                         phi of key 0, of the largest other key and of the last 64 keys
    gdn_key0_buckets.csv the key-0 share by query position (powers of two)
    gdn_check.csv        how closely the per-key terms add up to the layer's own output, per layer:
                         the kernel output, the output gate's, out_proj's; and sum(phi) - 1
"""
from __future__ import annotations

from ...core.events import GDN
from ..base import Declaration

QUANTITIES = ("gate_silu", "beta", "decay")
CHECK_SITES = ("kernel_output", "gate_output", "out_proj", "state_share_sum")
SPARSITY_VARIANTS = ("pre_gate", "normed", "mean_gate", "gated")

DECLARATION = Declaration(
    name="gdn", metric="GatedDeltaNet", order=9,
    events={GDN: "update"},
    tables={
        "gdn_gates": {"model": "str", "layer": "int", "head": "int", "quantity": "str", "group": "str",
                      "metric": "str", "value": "float"},
        "gdn_gate_hist": {"model": "str", "layer": "int", "head": "int", "quantity": "str",
                          "bin_lo": "float", "bin_hi": "float", "count": "float"},
        "gdn_top_beta": {"model": "str", "layer": "int", "head": "int", "rank": "int", "sequence": "int",
                         "position": "int", "token_id": "int", "token": "str", "beta": "float"},
        "gdn_sparsity": {"model": "str", "layer": "int", "variant": "str", "threshold": "float",
                         "value": "float"},
        "gdn_head_norms": {"model": "str", "layer": "int", "head": "int", "group": "str", "tokens": "int",
                           "pre": "float", "normed": "float", "post": "float", "ratio_of_means": "float"},
        "gdn_keys": {"model": "str", "layer": "int", "head": "int", "metric": "str", "value": "float"},
        "gdn_key0_buckets": {"model": "str", "layer": "int", "head": "int", "bucket_lo": "float",
                             "bucket_hi": "float", "value": "float", "n_queries": "float"},
        "gdn_check": {"model": "str", "layer": "int", "site": "str", "max_rel_error": "float",
                      "tolerance": "float", "passed": "bool"},
        # --gdn --anatomy: the share of each query's output every key carries (received.py), by
        # key position bucket, by token (pooled over heads), and the secondary state sinks.
        "gdn_received": {"model": "str", "layer": "int", "head": "int", "key_lo": "int", "key_hi": "float",
                         "queries": "int", "score": "float"},
        "gdn_received_by_token": {"model": "str", "layer": "int", "rank": "int", "token_id": "int",
                                  "token": "str", "cells": "int", "score": "float"},
        "gdn_state_sinks": {"model": "str", "layer": "int", "head": "int", "rank": "int", "sequence": "int",
                            "position": "int", "token_id": "int", "token": "str", "score": "float"},
    },
    summary_keys=("gdn",),
    summary_order=7,
    meta_keys=("gdn", "gdn_refused"),
    option="gdn",
    counts={"gdn_gate_hist": ("count",), "gdn_key0_buckets": ("n_queries",)},
)
