"""First-token attention (F-Attn), declared: per attention layer and head the attention
probability on key 0 (first_token.csv), by query position (first_token_buckets.csv), summary.json's
F-Attn, its uniform reference and the sink rate. The reducers: reduce.py."""
from __future__ import annotations

from ...core.events import FIRST_KEY
from ..base import Declaration

SINK_EPSILON = 0.3      # F-Attn above which a head counts as a sink (summary.json sink_rate)

DECLARATION = Declaration(
    name="first_token", metric="FirstToken", order=0,
    events={FIRST_KEY: "update"},
    tables={
        "first_token": {"model": "str", "layer": "int", "head": "int", "layer_type": "str",
                        "metric": "str", "value": "float"},
        "first_token_buckets": {"model": "str", "layer": "int", "head": "int", "bucket_lo": "float",
                                "bucket_hi": "float", "value": "float", "n_queries": "float",
                                "uniform": "float"},
    },
    summary_keys=("f_attn", "f_attn_paper", "f_attn_uniform", "sink_rate", "sink_epsilon"),
    summary_order=1,
    layer_keys={"f_attn": None},
    layer_order=0,
    meta_keys=("f_attn_dropped_queries", "sink_epsilon"),
    counts={"first_token_buckets": ("n_queries",)},
)
