"""The paper's official gated checkpoints, loaded natively on transformers 5.

The released checkpoints (model_type `qwen3` plus `headwise_attn_output_gate` or
`elementwise_attn_output_gate` in config.json) ship a modeling file that does not import on
transformers >= 5. Their weights differ from a stock Qwen3 only in `q_proj`, which also emits
the gate logits, grouped per KV head: viewed as (..., KV, -1), each group holds
[G*D query rows | G*Dg gate rows] with G = H / KV and Dg = 1 (headwise) or D (elementwise).
This module subclasses transformers' Qwen3 so that everything else (RoPE, QK-norm, masks,
caches, attention back-ends) is transformers' own code. Which checkpoints take these classes,
and the row reordering for TransformerLens, are decided in probe.families.official.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

from .attend import attend
from .official_flags import granularity as official_gate_granularity


def adapt_official_config(config: Qwen3Config) -> Qwen3Config:
    """Map the official config's names onto transformers' Qwen3 names."""
    # The official code uses one flag, qkv_bias, for q/k/v and o_proj biases: transformers
    # calls the same thing attention_bias.
    if hasattr(config, "qkv_bias"):
        config.attention_bias = bool(config.qkv_bias)
    return config


class OfficialGatedQwen3Attention(Qwen3Attention):
    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__(config, layer_idx)
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.num_heads, self.num_kv_heads = heads, kv_heads
        self.gate_dim = self.head_dim if official_gate_granularity(config) == "elementwise" else 1
        self.q_proj = nn.Linear(
            config.hidden_size, heads * (self.head_dim + self.gate_dim), bias=config.attention_bias
        )
        if not getattr(config, "use_qk_norm", True):
            self.q_norm, self.k_norm = nn.Identity(), nn.Identity()

    def split_query_gate(self, projected: torch.Tensor):
        """q_proj output (B, T, rows) -> queries (B, T, H, D) and gate logits (B, T, H, Dg).

        The one place that knows the row layout: InterleavedGatedQwen3Attention overrides it
        for the per-head order, so both layouts share the forward below.
        """
        lead = projected.shape[:-1]
        group = self.num_heads // self.num_kv_heads
        # (B, T, KV, G*D + G*Dg): each KV group holds its G query heads, then their G gates.
        grouped = projected.view(*lead, self.num_kv_heads, -1)
        query, gate = grouped.split([group * self.head_dim, group * self.gate_dim], dim=-1)
        return (query.reshape(*lead, self.num_heads, self.head_dim),
                gate.reshape(*lead, self.num_heads, self.gate_dim))

    def forward(self, hidden_states, position_embeddings, attention_mask, cache=None, **kwargs):
        lead = hidden_states.shape[:-1]                          # (B, T)
        query, gate = self.split_query_gate(self.q_proj(hidden_states))

        hidden_shape = (*lead, -1, self.head_dim)
        query_states = self.q_norm(query).transpose(1, 2)        # (B, H, T, D)
        key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        attn_output, attn_weights = attend(self, query_states, key_states, value_states, position_embeddings,
                                           attention_mask, cache, **kwargs)
        # attn_output (B, T, H, D): the gate (Dg = 1 or D) scales each head or each element.
        attn_output = attn_output * torch.sigmoid(gate)
        attn_output = attn_output.reshape(*lead, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class InterleavedGatedQwen3Attention(OfficialGatedQwen3Attention):
    """The official gated attention, reading q_proj per head as [D query | D gate] rows (the
    order probe.families.official.reorder_q_proj writes). Only the split differs; the forward
    (and so the numbers) is the official one.
    """

    def split_query_gate(self, projected: torch.Tensor):
        # (B, T, H, 2D) -> queries (B, T, H, D) and gate logits (B, T, H, D)
        per_head = projected.view(*projected.shape[:-1], self.num_heads, 2 * self.head_dim)
        query, gate = per_head.split([self.head_dim, self.head_dim], dim=-1)
        return query, gate


class OfficialGatedQwen3ForCausalLM(Qwen3ForCausalLM):
    """Qwen3 with the official output gate; loads the released checkpoints as they are.

    Without a gate flag the attention stays transformers' own; `use_qk_norm: false` (the
    official config's flag, which stock Qwen3 ignores) then only removes q_norm/k_norm.
    """

    def __init__(self, config: Qwen3Config):
        adapt_official_config(config)
        super().__init__(config)
        gated = official_gate_granularity(config) is not None
        for idx, layer in enumerate(self.model.layers):
            if gated:
                layer.self_attn = OfficialGatedQwen3Attention(config, idx)
            elif not getattr(config, "use_qk_norm", True):
                layer.self_attn.q_norm, layer.self_attn.k_norm = nn.Identity(), nn.Identity()
        self.post_init()
