"""Tiny models whose attention takes a family's extra softmax terms: Gemma 2 (soft-capped logits)
and gpt-oss (per-head sinks)."""
from __future__ import annotations

import torch


CAP = 0.5  # small enough that capping changes random-init scores visibly


def _gemma2():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    model = Gemma2ForCausalLM(Gemma2Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=16, attn_logit_softcapping=CAP)).eval()
    with torch.no_grad():                   # random-init scores are ~0.01: make them reach the cap
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    return model
