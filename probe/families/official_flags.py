"""The official checkpoints' config flags, read without transformers' Qwen3 modeling.

The released checkpoints are `model_type` "qwen3" with `headwise_attn_output_gate` or
`elementwise_attn_output_gate` in config.json. official_qwen3.py sizes q_proj by the flag and
probe.families.official decides from it which class loads a checkpoint: both read it here, so
that neither imports the other to know it.
"""
from __future__ import annotations

MODEL_TYPE = "qwen3"


def granularity(config) -> str | None:
    """"headwise" / "elementwise" from the official gate flags in config.json; None without one."""
    if getattr(config, "headwise_attn_output_gate", False):
        return "headwise"
    if getattr(config, "elementwise_attn_output_gate", False):
        return "elementwise"
    return None
