"""Rewrite the official grouped gate layout into the per-head layout TransformerLens reads.

The paper's checkpoints pack `q_proj` per KV head; TransformerLens 4.x reads it per query head.
`reorder_official_q_proj(model)` permutes the rows in place so that a bridge built from the
model afterwards computes the model's own logits (probe.families.official says how, and why).

The reordered model is meant for building a bridge in memory. Do not `save_pretrained` it:
the checkpoint would no longer be in the official format.
"""
from __future__ import annotations

from torch import nn

from ..families.describe import describe
from ..families.official import grouped_to_interleaved, is_official, is_reordered, reorder_q_proj
from .loader import LoadedModel

__all__ = ["grouped_to_interleaved", "is_official", "is_reordered", "reorder_official_q_proj"]


def reorder_official_q_proj(model: nn.Module | LoadedModel) -> nn.Module:
    """Rewrite an official gated Qwen3 model (`probe.load` of the paper's checkpoint, or its
    `.model`) in place so that TransformerLens reads its gate correctly; returns the same model.

    Logits are unchanged. Calling it twice is harmless. The model must not yet be wrapped in a
    TransformerBridge (build the bridge afterwards, e.g. with `probe.capture.bridge.build_bridge`).
    """
    loaded = model if isinstance(model, LoadedModel) else None
    model = loaded.model if loaded is not None else model
    if reorder_q_proj(model) and loaded is not None:
        loaded.layout = describe(model)       # the HF path reads the gate in the new order
    return model
