"""probe/train/evaluate.py: the inference measurements of trained arms."""
from __future__ import annotations

import warnings

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from probe.train.evaluate import latency


def test_latency_uses_the_cache_without_deprecation_warnings():
    """Prefill then decode through the model's KV cache, passed by the forward's own name for it
    (transformers 5.24 renamed past_key_values to cache and warns on the old name)."""
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, head_dim=8)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        result = latency(model, prompt_len=8, new_tokens=3, repeats=1)
    # 2 layers x (K and V) x 2 KV heads x 8 dims x (8 prompt + 3 decoded positions) x 4 bytes
    assert result["kv_cache_mb"] * 2 ** 20 == pytest.approx(2 * 2 * 2 * 8 * 11 * 4)


def test_a_hybrid_cache_counts_the_gdn_states():
    """A Qwen3.5 hybrid's cache: the softmax layer's keys and values grow with the tokens; each
    GDN layer holds a conv state (conv_dim x kernel) and a recurrent state (value heads x d_k x d_v)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(0)
    config = Qwen3_5TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                               linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                               linear_value_head_dim=8, linear_conv_kernel_dim=4,
                               rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                "partial_rotary_factor": 0.25, "mrope_section": [1, 0, 0]})
    result = latency(Qwen3_5ForCausalLM(config).eval(), prompt_len=8, new_tokens=3, repeats=1)
    softmax = 2 * 2 * 8 * 11 * 4                       # K and V x 2 KV heads x 8 dims x 11 positions x 4 bytes
    conv = (2 * 2 * 8 + 4 * 8) * 4 * 4                 # conv_dim (q, k, v channels) x kernel x 4 bytes
    recurrent = 4 * 8 * 8 * 4                          # value heads x d_k x d_v x 4 bytes
    assert result["kv_cache_mb"] * 2 ** 20 == pytest.approx(softmax + 3 * (conv + recurrent))
