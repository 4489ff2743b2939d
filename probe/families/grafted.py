"""Grafted Llama (`model_type` grafted_llama, made by `probe graft`): an ungated pretrained Llama
with a separate gate projection added to every attention layer (probe/families/grafted_llama.py).

The gate logits are `self_attn.gate_proj`'s output alone, (..., H * Dg) (the plain layout), and
the model multiplies each head's SDPA output by scale * sigmoid(logits): scale 2 (`2sigmoid`,
the identity graft, every gate 1 at zero logits) or 1 (`sigmoid`, the paper's gate). config.json
says which in `graft` ({"base", "gate", "init", "scale"}).
"""
from __future__ import annotations

from .gates import GateSpec, scaled_sigmoid_name

MODEL_TYPES = ("grafted_llama",)
NOTE = "Llama with a grafted attention-output gate (probe graft): separate gate_proj, scale * sigmoid"


def gate(model, config) -> GateSpec:
    graft = config.graft
    return GateSpec("gate_proj", "plain", graft["gate"], scaled_sigmoid_name(float(graft["scale"])))


def model_class(config):
    from .grafted_llama import GraftedLlamaForCausalLM

    return GraftedLlamaForCausalLM
