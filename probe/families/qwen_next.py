"""Qwen3-Next, Qwen3.5 and Qwen4-Exp: the paper's gate as released in later Qwen models.

Their softmax-attention layers gate the output elementwise with a sigmoid, the gate logits
interleaved per head in q_proj: viewed as (..., H, 2D), each head holds [D query | D gate].
The other layers are Gated DeltaNet linear attention (`linear_attn`; layout.py tells the two
apart by module name), so these are hybrids: only the softmax layers have gates and F-Attn.
Qwen3.5 and Qwen4-Exp are also released as multimodal wrappers: their language model's
settings sit in `config.text_config` and its layers at `model.language_model.layers`, and a
causal LM saved from them writes the text model's type (`qwen3_5_text`, `qwen4_exp_text`).

Qwen4-Exp adds two things probe measures as the model computes them, without special code:
its softmax layers attend only to the keys a token indexer selects (the selection reaches
probe's attention back-end inside the mask, so F-Attn is over the keys attended to), and its
residual stream is `hc_count` streams wide (hyper-connections): M-Act at `resid_post` is the
largest activation over all of them, and no module reads the residual between attention and
MLP, so `resid_mid` is not measured there.

`attn_output_gate: false` in a `qwen3_5_text` config (the flag vLLM and SGLang read) marks a
Qwen3.5 whose softmax layers have no gate: probe loads it with ungated_qwen3_5.py's class and
reads it as ungated (probe train's hybrid-none arm is one). The flag on another of these types
is refused: transformers has no ungated class for them and probe builds none.
"""
from __future__ import annotations

from ..core.errors import ProbeError
from .gates import GateSpec

MODEL_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text",
               "qwen4_exp", "qwen4_exp_text")
GATE = GateSpec("q_proj", "interleaved", "elementwise", "sigmoid")
NOTE = "Qwen3-Next / Qwen3.5 / Qwen4-Exp: elementwise gate interleaved per head in q_proj; hybrid layers"


UNGATED_TYPE = "qwen3_5_text"


def gated(config) -> bool:
    """False for a config with `attn_output_gate: false` (the serving engines' flag)."""
    return bool(getattr(config, "attn_output_gate", True))


def gate(model, config) -> GateSpec | None:
    return GATE if gated(config) else None


def model_class(config):
    """None (transformers' own class) unless the softmax layers are ungated."""
    if gated(config):
        return None
    if getattr(config, "model_type", None) != UNGATED_TYPE:
        raise ProbeError(f"attn_output_gate false is supported for {UNGATED_TYPE} only, not "
                         f"{getattr(config, 'model_type', '?')!r}: transformers builds the gate into "
                         "these models' softmax layers and probe has no ungated class for them")
    from .ungated_qwen3_5 import UngatedQwen3_5ForCausalLM

    return UngatedQwen3_5ForCausalLM
