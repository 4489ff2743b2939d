"""probe/families/ungated_qwen3_5.py and the `attn_output_gate: false` flag in qwen_next.py.

The ungated class is checked against transformers' own gated Qwen3.5, not against probe's code:
a stock model whose gate rows of q_proj are zero scales every attention output by sigmoid(0) =
1/2 exactly, so with o_proj doubled it computes what the ungated model with the same query rows
computes. Everything else (partial RoPE, QK-norm, the GDN layers) is shared.
"""
from __future__ import annotations

import pytest
import torch

import probe
from probe.core.errors import ProbeError
from probe.families import qwen_next
from probe.families.ungated_qwen3_5 import UngatedQwen3_5ForCausalLM
from tests import tiny

LOGIT_TOL = 1e-5


def _config(**overrides):
    from transformers import Qwen3_5TextConfig

    kw = dict(tiny.TINY, **tiny.LINEAR, rope_parameters=dict(tiny.QWEN3_5_ROPE), pad_token_id=0,
              bos_token_id=1, eos_token_id=2)
    config = Qwen3_5TextConfig(**{**kw, **overrides})
    config.attn_output_gate = False
    return config


@torch.no_grad()
def test_ungated_model_equals_stock_qwen3_5_with_a_constant_half_gate():
    from transformers import Qwen3_5ForCausalLM

    config = _config()
    torch.manual_seed(0)
    ungated = UngatedQwen3_5ForCausalLM(config).eval()
    stock = Qwen3_5ForCausalLM(config).eval()
    state = dict(ungated.state_dict())
    H, D = config.num_attention_heads, config.head_dim
    for i, kind in enumerate(config.layer_types):
        if kind != "full_attention":
            continue
        prefix = f"model.layers.{i}.self_attn."
        query = state[prefix + "q_proj.weight"].view(H, D, -1)                  # (H, D, hidden)
        # transformers' layout: per head [D query rows | D gate rows]; gate rows zero.
        state[prefix + "q_proj.weight"] = torch.cat([query, torch.zeros_like(query)], 1).reshape(2 * H * D, -1)
        state[prefix + "o_proj.weight"] = 2 * state[prefix + "o_proj.weight"]
    stock.load_state_dict(state)
    ids = torch.randint(3, config.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    a, b = ungated(ids).logits, stock(ids).logits
    assert torch.allclose(a, b, rtol=LOGIT_TOL, atol=LOGIT_TOL * float(b.abs().max()))
    # And the softmax layer really has no gate rows.
    assert ungated.model.layers[3].self_attn.q_proj.out_features == H * D


def test_flag_selects_the_class_and_the_gate():
    assert qwen_next.model_class(_config()) is UngatedQwen3_5ForCausalLM
    assert qwen_next.gate(None, _config()) is None
    gated = _config()
    gated.attn_output_gate = True
    assert qwen_next.model_class(gated) is None and qwen_next.gate(None, gated) == qwen_next.GATE


def test_flag_on_another_hybrid_is_refused():
    from transformers import Qwen3NextConfig

    config = Qwen3NextConfig(**tiny.TINY, **tiny.LINEAR, num_experts=0)
    config.attn_output_gate = False
    with pytest.raises(ProbeError, match="qwen3_5_text only"):
        qwen_next.model_class(config)


def test_saved_ungated_model_loads_as_ungated(tmp_path):
    torch.manual_seed(0)
    UngatedQwen3_5ForCausalLM(_config()).save_pretrained(tmp_path)
    loaded = probe.load(tmp_path)
    assert type(loaded.model).__name__ == "UngatedQwen3_5ForCausalLM" and loaded.layout.gate is None
