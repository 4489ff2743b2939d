"""Planted secondary sinks: random q, k, v with a sink planted at one key, the received-attention
kernel run on them, padding masks, and a tiny model with a planted sink token (the fixture
planted)."""
from __future__ import annotations

import math
import pytest
import torch
from probe.capture import attention


B, H, HKV, T, D = 2, 4, 2, 37, 16


SINK = 5            # the planted secondary sink


SCALE = D ** -0.5


def run_kernel(q, k, v, mask, softcap=None, sinks=None):
    out, lse = attention.attention_with_lse(q, k, v, mask, SCALE, softcap)
    if sinks is not None:
        out, lse = attention.add_sink(out, lse, sinks)
    return out, lse


def padding_mask(lengths, T, window=None, additive=False):
    """The (B, 1, T, T) mask transformers builds for right padding (causal, key valid), and valid."""
    valid = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]              # (B, T)
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (s <= t) if window is None else (s <= t) & (s > t - window)
    mask = (allowed[None] & valid[:, None, :])[:, None]                              # (B, 1, T, T)
    if additive:
        mask = torch.zeros(mask.shape).masked_fill(~mask, -math.inf)
    return mask, valid


PLANT_TOKEN, PLANT_DIM, HF_T, HF_WINDOW = 7, 5, 40, 8


@pytest.fixture(scope="module")
def planted():
    """Qwen2, 4 query / 2 KV heads, layer 0 full attention, layer 1 a sliding window of 8. In
    layer 0 every query head has a bias along the slowest RoPE pair (dimension 7 of each head,
    turned by 0.013 rad over 40 positions) and only PLANT_TOKEN has a key there, so every head
    of layer 0 attends to wherever that token sits: a secondary sink away from position 0."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      use_sliding_window=True, sliding_window=HF_WINDOW, max_window_layers=1,
                      initializer_range=0.2)
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb[:, PLANT_DIM] = 0.0
        emb[PLANT_TOKEN] = 0.0
        emb[PLANT_TOKEN, PLANT_DIM] = 1.0                # RMS-normed: 8 in that dimension
        att = model.model.layers[0].self_attn
        for kv in range(2):
            att.k_proj.weight[kv * 16 + 7] = 0.0
            att.k_proj.weight[kv * 16 + 7, PLANT_DIM] = 1.0
            att.k_proj.bias[kv * 16 + 7] = 0.0
        for h in range(4):
            att.q_proj.bias[h * 16 + 7] = 4.0           # logit on the plant about 4 * 8 / 4 = 8
    return model
