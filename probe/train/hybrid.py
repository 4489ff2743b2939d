"""The hybrid arms: a tiny Qwen3.5 text model, three Gated DeltaNet layers to one softmax layer.

`hybrid-gated` is transformers' Qwen3.5 as released: its softmax layers carry the paper's
elementwise gate inside q_proj ([D query | D gate] rows per head). `hybrid-none` is the same
model with `attn_output_gate: false` in its config, the flag vLLM and SGLang read for the
ungated variant; probe loads it with probe.families.ungated_qwen3_5 (q_proj emits the queries
only). Both are saved as `model_type` "qwen3_5_text", so `probe.load` reads them like a causal
LM saved from a released Qwen3.5.

Shape (from the tiny arms' Shape): every fourth layer is softmax attention (Qwen3.5's
`full_attention_interval` 4), with the arms' heads, KV heads and head dimension, QK-norm and
partial RoPE on a quarter of each head (Qwen3.5's `partial_rotary_factor`). The GDN layers have
`kv_heads` key heads and `heads` value heads of `head_dim` each (Qwen3.5's 1 : 2 grouping) and a
causal conv1d of width 4. Matched parameters: the gate adds `width * heads * head_dim` weights
per softmax layer; transformers' Qwen3.5 has one MLP width for every layer, so the gated arm
pays for its gates by round(gates / (3 * width * layers)) MLP columns in every layer.
"""
from __future__ import annotations

from ..core.errors import ProbeError
from .config import HYBRID_ARMS, Shape

INTERVAL = 4                # Qwen3.5: one softmax layer after every three GDN layers
CONV_KERNEL = 4
PARTIAL_ROTARY = 0.25


def layer_types(layers: int) -> list[str]:
    if layers < INTERVAL:
        raise ProbeError(f"a hybrid arm needs at least {INTERVAL} layers (three Gated DeltaNet layers to "
                         f"one softmax layer); got --layers {layers}")
    return ["linear_attention" if (i + 1) % INTERVAL else "full_attention" for i in range(layers)]


def gate_params(arm: str, shape: Shape) -> int:
    """Gate weights of the whole model: one elementwise gate row per query row of each softmax layer."""
    if arm == "hybrid-none":
        return 0
    return layer_types(shape.layers).count("full_attention") * shape.width * shape.heads * shape.head_dim


def intermediate_size(arm: str, shape: Shape) -> int:
    cut = round(gate_params(arm, shape) / (3 * shape.width * shape.layers))
    size = shape.intermediate - cut
    if size < 1:
        raise ProbeError(f"the MLP width {shape.intermediate} is too small to pay for the {arm} gate "
                         f"({cut} columns); raise --width or the MLP ratio")
    return size


def rope_parameters(shape: Shape) -> dict:
    # Text-only positions are the same on all three M-RoPE axes, so the sections only have to
    # add up to the rotated half (head_dim * 0.25 / 2); split as Qwen3.5's [11, 11, 10] of 32.
    half = int(shape.head_dim * PARTIAL_ROTARY) // 2
    if half < 1:
        raise ProbeError(f"head dimension {shape.head_dim} is too small for Qwen3.5's partial RoPE")
    section = [half - 2 * (half // 3), half // 3, half // 3]
    return {"rope_type": "default", "rope_theta": shape.rope_theta, "partial_rotary_factor": PARTIAL_ROTARY,
            "mrope_section": section, "mrope_interleaved": True}


def model_config(arm: str, shape: Shape, *, bos_token_id: int, eos_token_id: int, pad_token_id: int):
    from transformers import Qwen3_5TextConfig

    if arm not in HYBRID_ARMS:
        raise ProbeError(f"unknown hybrid arm {arm!r}; use one of {', '.join(HYBRID_ARMS)}")
    if not shape.qk_norm:
        raise ProbeError("--no-qk-norm does not apply to the hybrid arms: Qwen3.5 always normalises q and k")
    if shape.heads % shape.kv_heads:
        raise ProbeError(f"--heads {shape.heads} is not a multiple of the KV heads {shape.kv_heads}")
    config = Qwen3_5TextConfig(
        vocab_size=shape.vocab_size, hidden_size=shape.width,
        intermediate_size=intermediate_size(arm, shape), num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
        layer_types=layer_types(shape.layers),
        linear_num_key_heads=shape.kv_heads, linear_num_value_heads=shape.heads,
        linear_key_head_dim=shape.head_dim, linear_value_head_dim=shape.head_dim,
        linear_conv_kernel_dim=CONV_KERNEL,
        max_position_embeddings=shape.max_positions, rope_parameters=rope_parameters(shape),
        initializer_range=shape.init_std, rms_norm_eps=1e-6, tie_word_embeddings=True,
        attention_bias=False, attention_dropout=0.0,
        bos_token_id=bos_token_id, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
    )
    # The serving engines' flag for a Qwen3.5 without the output gate (probe.families.qwen_next).
    config.attn_output_gate = arm == "hybrid-gated"
    config.architectures = ["Qwen3_5ForCausalLM"]
    return config


def model_class(config):
    from transformers import Qwen3_5ForCausalLM

    from ..families import qwen_next

    return qwen_next.model_class(config) or Qwen3_5ForCausalLM


def expected_parameters(arm: str, shape: Shape) -> int:
    """The parameter count of a hybrid arm, from the shape alone (no model is built)."""
    w, h, kv, d = shape.width, shape.heads, shape.kv_heads, shape.head_dim
    key_dim, value_dim = kv * d, h * d                  # GDN: kv key heads, h value heads
    conv_dim = 2 * key_dim + value_dim
    gdn = (w * conv_dim + w * value_dim + 2 * w * h     # in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
           + conv_dim * CONV_KERNEL + 2 * h + d         # depthwise conv1d, dt_bias, A_log, RMSNormGated
           + value_dim * w)                             # out_proj
    softmax = w * h * d + 2 * w * kv * d + h * d * w + 2 * d        # q, k, v, o, q_norm, k_norm
    mlp = 3 * w * intermediate_size(arm, shape)
    types = layer_types(shape.layers)
    layers = sum(gdn if t == "linear_attention" else softmax for t in types)
    return (shape.vocab_size * w + layers + gate_params(arm, shape)
            + shape.layers * (mlp + 2 * w) + w)         # tied embedding, MLPs and norms, final norm
