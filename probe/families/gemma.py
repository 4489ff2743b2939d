"""Gemma 1-3: sandwich norms and attention-logit soft-capping; no gate.

Gemma 2 / 3 put norms on both sides of attention and of the MLP (sandwich norms), so the
residual stream after attention is the input of `pre_feedforward_layernorm`, not of
`post_attention_layernorm` (layout.residual_after_attention looks for it first).
Gemma 2 soft-caps its attention logits, softcap * tanh(s / softcap) of the scaled scores:
transformers passes the cap to the attention back-end as the `softcap` keyword, and has no
SDPA path for it (its model class says so; probe.load then takes eager outside probe's passes).
"""
from __future__ import annotations

MODEL_TYPES = ("gemma", "gemma2", "gemma3_text", "gemma3")
NOTE = "Gemma 1-3; Gemma 2 / 3 put norms on both sides of attention and MLP (sandwich norms)"


def softcap(attention_kwargs: dict) -> float | None:
    """The logit cap transformers hands the attention back-end (Gemma 2); None: no capping."""
    return attention_kwargs.get("softcap")
