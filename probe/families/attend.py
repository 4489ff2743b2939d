"""The attention step the gated models share with transformers' Llama and Qwen3: RoPE on queries
and keys, the KV cache, then whichever attention back-end the config names (eager, SDPA, ...).
The models differ only before it (how q, k, v and the gate logits are projected) and after it
(how the gate scales the output)."""
from __future__ import annotations

# Llama's and Qwen3's modeling files hold the same code for these (Qwen3's is generated from it).
from transformers.models.llama.modeling_llama import (
    ALL_ATTENTION_FUNCTIONS,
    apply_rotary_pos_emb,
    eager_attention_forward,
)


def attend(module, query_states, key_states, value_states, position_embeddings, attention_mask,
           cache=None, rotate=apply_rotary_pos_emb, **kwargs):
    """(attn_output (B, T, H, D), attn_weights) of query_states (B, H, T, D) and key/value states
    (B, KV, T, D), as `module`'s own transformers forward computes them. rotate: the family's
    RoPE (Qwen3.5's rotates only part of each head)."""
    cos, sin = position_embeddings
    query_states, key_states = rotate(query_states, key_states, cos, sin)
    if cache is not None:
        key_states, value_states = cache.update(key_states, value_states, module.layer_idx, kwargs=kwargs)
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(module.config._attn_implementation,
                                                      eager_attention_forward)
    return attention(
        module, query_states, key_states, value_states, attention_mask,
        dropout=0.0 if not module.training else module.attention_dropout,
        scaling=module.scaling, sliding_window=getattr(module, "sliding_window", None), **kwargs,
    )
