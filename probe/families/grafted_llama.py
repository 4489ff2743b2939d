"""A Llama-family decoder with an attention-output gate grafted on (`model_type` grafted_llama).

`probe graft` (probe/train/graft.py) turns an ungated pretrained Llama (SmolLM2, ...) into this: every
attention layer gets `gate_proj: Linear(hidden, H * Dg)` on the layer's attention input (the
input-layernorm output, what q/k/v read), and the SDPA output of each head is multiplied by
`scale * sigmoid(gate_proj(x))` before o_proj, as the paper's G1 gate (Dg = 1 headwise, D
elementwise). Everything else is transformers' Llama code and the base's weights, untouched.

With scale 2 and gate_proj zero (weights and bias) every gate is 2 * sigmoid(0) = 1.0 exactly,
so the grafted model computes the base's logits bit for bit (the identity graft, as the official
repository's issue 10 describes it). config.json records the graft in `graft`:
{"base": ..., "gate": "headwise" | "elementwise", "init": ..., "scale": 1 | 2}.

The classes are registered with transformers' Auto classes (register()), which probe does as soon
as transformers is imported after `import probe` (probe/__init__.py), so that
`AutoModelForCausalLM.from_pretrained(DIR)` reads a grafted folder with no flags.
"""
from __future__ import annotations

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaAttention

from .gates import ACTIVATIONS, scaled_sigmoid_name
from .attend import attend

MODEL_TYPE = "grafted_llama"
GATES = ("headwise", "elementwise")
SCALES = (1.0, 2.0)


@strict
class GraftedLlamaConfig(LlamaConfig):
    model_type = MODEL_TYPE
    # {"base": str, "gate": "headwise" | "elementwise", "init": str, "scale": 1 | 2}
    graft: dict | None = None

    def __post_init__(self, **kwargs):
        if self.graft is None:
            self.graft = {"base": None, "gate": "headwise", "init": "identity", "scale": 2.0}
        super().__post_init__(**kwargs)

    @property
    def gate_granularity(self) -> str:
        return self.graft["gate"]

    @property
    def gate_activation(self) -> str:
        """The name of scale * sigmoid in probe.families.gates.ACTIVATIONS."""
        return scaled_sigmoid_name(float(self.graft["scale"]))


class GraftedLlamaAttention(LlamaAttention):
    def __init__(self, config: GraftedLlamaConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.num_heads = config.num_attention_heads
        self.gate_dim = self.head_dim if config.gate_granularity == "elementwise" else 1
        self.gate_proj = nn.Linear(config.hidden_size, self.num_heads * self.gate_dim, bias=True)
        # The same function probe's GateSpec applies to the logits it reads: the scores it
        # reports are the factors the model multiplies by, bit for bit.
        self.gate_act = ACTIVATIONS[config.gate_activation]

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
        lead = hidden_states.shape[:-1]                                   # (B, T)
        hidden_shape = (*lead, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)   # (B, H, T, D)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)     # (B, KV, T, D)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        attn_output, attn_weights = attend(self, query_states, key_states, value_states, position_embeddings,
                                           attention_mask, cache, **kwargs)
        # attn_output (B, T, H, D); gate (B, T, H, Dg), Dg = 1 broadcasts over the head's dims.
        gate = self.gate_act(self.gate_proj(hidden_states).view(*lead, self.num_heads, self.gate_dim))
        attn_output = (attn_output * gate).reshape(*lead, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class GraftedLlamaForCausalLM(LlamaForCausalLM):
    config_class = GraftedLlamaConfig

    def __init__(self, config: GraftedLlamaConfig):
        super().__init__(config)
        for idx, layer in enumerate(self.model.layers):
            layer.self_attn = GraftedLlamaAttention(config, idx)
        self.post_init()


def register() -> None:
    """Make transformers' AutoConfig / AutoModelForCausalLM read model_type grafted_llama."""
    from transformers import AutoConfig, AutoModelForCausalLM

    AutoConfig.register(MODEL_TYPE, GraftedLlamaConfig, exist_ok=True)
    AutoModelForCausalLM.register(GraftedLlamaConfig, GraftedLlamaForCausalLM, exist_ok=True)


register()
