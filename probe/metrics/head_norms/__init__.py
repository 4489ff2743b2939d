"""Per-head attention-output norm before and after the gate, declared: what the gate does to the
size of each head's contribution, per layer, head and token type (head_norms.csv), and
summary.json's head_norm_ratio (all, and per layer). The reducers: reduce.py.

For head h at position t: pre = ||O[t, h]||, the pre-gate attention output (attn.hook_sdpa),
post = ||(g * O)[t, h]||, the same head's slice of the o_proj input (attn.hook_z). Without a gate
the two are the same vector: the ratio is 1 exactly.
"""
from __future__ import annotations

from ...core.events import SDPA, Z
from ..base import Declaration

ALL = "all"             # head_norms.csv token_type of the rows over every token

DECLARATION = Declaration(
    name="head_norms", metric="HeadNorms", order=8,
    events={SDPA: "keep_pre", Z: "update"},
    tables={"head_norms": {"model": "str", "layer": "int", "head": "int", "token_type": "str",
                           "tokens": "int", "pre": "float", "post": "float", "ratio_of_means": "float",
                           "mean_ratio": "float"}},
    summary_keys=("head_norm_ratio",),
    summary_order=5,
    layer_keys={"head_norm_ratio": None},
    layer_order=4,
)
