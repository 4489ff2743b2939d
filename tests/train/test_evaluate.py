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
