"""Qwen3.5 without the output gate on its softmax layers: the control arm of a trained hybrid.

transformers' Qwen3.5 always builds the paper's gate into its softmax layers (q_proj emits
[D query | D gate] rows per head). The serving engines read a config flag for the ungated
variant, `attn_output_gate` (default true; vLLM's and SGLang's Qwen3-Next and Qwen3.5 code), and
probe reads the same flag: a `qwen3_5_text` config with `attn_output_gate: false` loads with the
class here, whose softmax layers' q_proj emits only the H x D query rows and whose output is not
scaled. Everything else (the Gated DeltaNet layers, partial RoPE, zero-centred RMSNorm, QK-norm,
MLP) is transformers' own Qwen3.5 code, so the gated and ungated arms differ in the gate alone.
"""
from __future__ import annotations

from torch import nn
from transformers import Qwen3_5ForCausalLM
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5Attention, apply_rotary_pos_emb

from .attend import attend


class UngatedQwen3_5Attention(Qwen3_5Attention):
    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        heads = config.num_attention_heads
        self.q_proj = nn.Linear(config.hidden_size, heads * self.head_dim, bias=config.attention_bias)

    def forward(self, hidden_states, position_embeddings, attention_mask, cache=None, **kwargs):
        lead = hidden_states.shape[:-1]                               # (B, T)
        hidden_shape = (*lead, -1, self.head_dim)
        query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)  # (B, H, T, D)
        key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)    # (B, KV, T, D)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        # Qwen3.5's own rotation: partial RoPE on the first rotary_dim dimensions of each head.
        attn_output, attn_weights = attend(self, query_states, key_states, value_states, position_embeddings,
                                           attention_mask, cache, rotate=apply_rotary_pos_emb, **kwargs)
        attn_output = attn_output.reshape(*lead, -1).contiguous()     # (B, T, H*D), no gate
        return self.o_proj(attn_output), attn_weights


class UngatedQwen3_5ForCausalLM(Qwen3_5ForCausalLM):
    """Qwen3.5's text model with plain (ungated) softmax attention layers."""

    def __init__(self, config):
        super().__init__(config)
        for idx, layer in enumerate(self.model.layers):
            if config.layer_types[idx] == "full_attention":
                layer.self_attn = UngatedQwen3_5Attention(config, idx)
        self.post_init()
