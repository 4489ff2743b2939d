"""The trained model: a small pre-norm Qwen3 decoder in the layout of the paper's checkpoints.

Every arm is a transformers Qwen3 (RMSNorm pre-norm, RoPE, QK-norm, GQA, SwiGLU MLP, tied
embeddings) saved with `model_type` "qwen3" and the official flags `headwise_attn_output_gate` /
`elementwise_attn_output_gate`, so `probe.load` reads it exactly as it reads the released
checkpoints. The gated arms use `OfficialGatedQwen3ForCausalLM` (q_proj also emits the gate
logits, grouped per KV head); the baseline is a stock `Qwen3ForCausalLM`.
With `--no-qk-norm` (config `use_qk_norm` false, the official flag) every arm, the baseline
included, is built by `OfficialGatedQwen3ForCausalLM`, whose q_norm/k_norm are then Identity
(stock Qwen3 cannot switch QK-norm off); `probe.load` takes the same class for such a config.

Matched parameter budget (as in the paper): the gate adds `hidden * H` (headwise) or
`hidden * H * D` (elementwise) weights per layer; the SwiGLU MLP has `3 * hidden * I`, so each
gated arm's intermediate width I is lowered by round(gate / (3 * hidden)). The totals then match
to within `3 * hidden / 2` weights per layer.
"""
from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from ..core.errors import ProbeError
from ..families import official
from . import hybrid
from .config import ARMS, HYBRID_ARMS, Shape, siblings

MATCH_TOLERANCE = 0.01


def gate_params_per_layer(arm: str, shape: Shape) -> int:
    if arm == "none":
        return 0
    per_head = 1 if arm == "headwise" else shape.head_dim
    return shape.width * shape.heads * per_head      # no q_proj bias (qkv_bias false, as released)


def intermediate_size(arm: str, shape: Shape) -> int:
    if arm in HYBRID_ARMS:
        return hybrid.intermediate_size(arm, shape)
    cut = round(gate_params_per_layer(arm, shape) / (3 * shape.width))
    size = shape.intermediate - cut
    if size < 1:
        raise ProbeError(f"the MLP width {shape.intermediate} is too small to pay for the {arm} gate "
                         f"({cut} columns); raise --width or the MLP ratio")
    return size


def model_config(arm: str, shape: Shape, *, bos_token_id: int, eos_token_id: int,
                 pad_token_id: int) -> Qwen3Config:
    if arm in HYBRID_ARMS:
        return hybrid.model_config(arm, shape, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                                   pad_token_id=pad_token_id)
    if arm not in ARMS:
        raise ProbeError(f"unknown arm {arm!r}; use one of {', '.join(ARMS)} or all")
    if shape.heads % shape.kv_heads:
        raise ProbeError(f"--heads {shape.heads} is not a multiple of the KV heads {shape.kv_heads}")
    config = Qwen3Config(
        vocab_size=shape.vocab_size, hidden_size=shape.width,
        intermediate_size=intermediate_size(arm, shape), num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim, max_position_embeddings=shape.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": shape.rope_theta},
        initializer_range=shape.init_std, rms_norm_eps=1e-6, tie_word_embeddings=True,
        attention_bias=False, attention_dropout=0.0, use_sliding_window=False,
        bos_token_id=bos_token_id, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
        # The official checkpoints' own flags: probe.load reads the gate layout from them.
        headwise_attn_output_gate=arm == "headwise",
        elementwise_attn_output_gate=arm == "elementwise",
        use_qk_norm=shape.qk_norm, qkv_bias=False,
    )
    config.architectures = ["Qwen3ForCausalLM"]     # as in the released config.json files
    return config


def build_model(config: Qwen3Config, seed: int) -> torch.nn.Module:
    """A freshly initialised model; the same seed and config give the same weights."""
    torch.manual_seed(seed)
    if config.model_type != "qwen3":                        # the hybrid arms (Qwen3.5)
        model = hybrid.model_class(config)(config)
        model.config.architectures = ["Qwen3_5ForCausalLM"]
        return model
    # The class probe.load takes for this config: the official one for a gate flag, and for the
    # baseline without QK-norm (stock Qwen3 always has it; the official class honours use_qk_norm).
    cls = official.model_class(config) or Qwen3ForCausalLM
    model = cls(config)
    model.config.architectures = ["Qwen3ForCausalLM"]
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (the tied embedding counts once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def expected_parameters(arm: str, shape: Shape) -> int:
    """The parameter count of an arm, from the shape alone (no model is built)."""
    if arm in HYBRID_ARMS:
        return hybrid.expected_parameters(arm, shape)
    w, h, kv, d = shape.width, shape.heads, shape.kv_heads, shape.head_dim
    attn = w * h * d + 2 * w * kv * d + h * d * w             # q, k, v, o
    attn += 2 * d if shape.qk_norm else 0                       # q_norm, k_norm
    mlp = 3 * w * intermediate_size(arm, shape)
    per_layer = attn + gate_params_per_layer(arm, shape) + mlp + 2 * w   # + two RMSNorms
    return shape.vocab_size * w + shape.layers * per_layer + w           # tied embedding, final norm


def check_matched(shape: Shape, arms=ARMS) -> dict[str, int]:
    """Parameter counts per arm; ProbeError if any differs from its baseline's (none, or
    hybrid-none for the hybrid arms) by more than 1%."""
    counts = {arm: expected_parameters(arm, shape) for arm in arms}
    base = expected_parameters(siblings(arms[0])[0], shape)
    for arm, n in counts.items():
        if abs(n - base) > MATCH_TOLERANCE * base:
            raise ProbeError(f"the {arm} arm has {n} parameters against the baseline's {base} "
                             f"(more than {MATCH_TOLERANCE:.0%} apart); widen the MLP")
    return counts
