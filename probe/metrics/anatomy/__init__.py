"""Sink anatomy, declared: attention received by every key position and token, secondary sinks,
value drains and the gate against sink attention, written only with the `anatomy` option. The
kernel: received.py; the reducer: stats.py; the metric: reduce.py."""
from __future__ import annotations

from ...core.events import ATTENTION, GATE
from ..base import Declaration

# Queries a key needs before its received-attention score can name a secondary sink (fewer read
# high from recency; the measurement is in reduce.py). Reports mark the key buckets below it and
# read it from meta.json's anatomy_sink_min_queries.
SINK_MIN_QUERIES = 128

DECLARATION = Declaration(
    name="anatomy", metric="Anatomy", order=6,
    events={ATTENTION: "update", GATE: "keep_gate"},
    tables={
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
    },
    summary_keys=("anatomy",),
    summary_order=4,
    meta_keys=("anatomy", "anatomy_min_queries", "anatomy_sink_min_queries"),
    option="anatomy",
)
