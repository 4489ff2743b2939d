"""Trained hybrids for the GDN tests: the shipped `hybrid-gated` arm (a Qwen3.5 text model that
`probe train` trained, examples/checkpoints) and the same weights as a Qwen3-Next model.

Qwen3-Next fuses the GDN projections that Qwen3.5 keeps apart, grouped by key head:
in_proj_qkvz holds, for each key head i, [q_i | k_i | v of its value heads | z of its value heads],
and in_proj_ba [b of its value heads | a of them] (transformers' fix_query_key_value_ordering
undoes this). Everything else (embedding, norms, the conv, MLPs, the gated softmax layer) has the
same names and shapes, and Qwen3.5's interleaved M-RoPE on text positions is Qwen3-Next's partial
RoPE. So the converted model computes the same function; test_gdn.py checks its logits against
the arm's before using it.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

ARM = Path(__file__).parents[2] / "examples" / "checkpoints" / "hybrid-gated"
TRAINED_KINDS = ("trained_qwen3_5", "trained_qwen3_next")


def fused_projections(sd: dict, prefix: str, nk: int, nv: int, dk: int, dv: int) -> dict:
    """One GDN layer's Qwen3.5 in_proj_qkv / _z / _b / _a weights as Qwen3-Next's in_proj_qkvz
    (nk (2 dk + 2 r dv), hidden) and in_proj_ba (nk 2r, hidden), r = nv / nk value heads per key head."""
    r = nv // nk
    qkv, z = sd[prefix + "in_proj_qkv.weight"], sd[prefix + "in_proj_z.weight"]
    q, k, v = torch.split(qkv, [nk * dk, nk * dk, nv * dv])
    b, a = sd[prefix + "in_proj_b.weight"], sd[prefix + "in_proj_a.weight"]
    qkvz = torch.cat([torch.cat([q[i * dk:(i + 1) * dk], k[i * dk:(i + 1) * dk],
                                 v[i * r * dv:(i + 1) * r * dv], z[i * r * dv:(i + 1) * r * dv]]) for i in range(nk)])
    ba = torch.cat([torch.cat([b[i * r:(i + 1) * r], a[i * r:(i + 1) * r]]) for i in range(nk)])
    return {prefix + "in_proj_qkvz.weight": qkvz, prefix + "in_proj_ba.weight": ba}


def as_qwen3_next(arm: Path, out: Path) -> Path:
    """Save the Qwen3.5 hybrid at `arm` as a Qwen3-Next checkpoint (dense MLPs) at `out`, with its
    tokenizer files."""
    import transformers as tf

    source = tf.Qwen3_5ForCausalLM.from_pretrained(arm)
    c = source.config
    config = tf.Qwen3NextConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, layer_types=list(c.layer_types),
        num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim, linear_conv_kernel_dim=c.linear_conv_kernel_dim,
        linear_key_head_dim=c.linear_key_head_dim, linear_value_head_dim=c.linear_value_head_dim,
        linear_num_key_heads=c.linear_num_key_heads, linear_num_value_heads=c.linear_num_value_heads,
        num_experts=0, rms_norm_eps=c.rms_norm_eps, tie_word_embeddings=c.tie_word_embeddings,
        rope_parameters=dict(rope_type="default", rope_theta=c.rope_parameters["rope_theta"],
                             partial_rotary_factor=c.rope_parameters["partial_rotary_factor"]),
        bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id)
    sd = dict(source.state_dict())
    for i, kind in enumerate(c.layer_types):
        if kind == "linear_attention":
            prefix = f"model.layers.{i}.linear_attn."
            fused = fused_projections(sd, prefix, c.linear_num_key_heads, c.linear_num_value_heads,
                                      c.linear_key_head_dim, c.linear_value_head_dim)
            for name in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"):
                del sd[prefix + name + ".weight"]
            sd.update(fused)
    target = tf.Qwen3NextForCausalLM(config)
    missing, unexpected = target.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)   # lm_head: tied
    target.tie_weights()
    out.mkdir(parents=True, exist_ok=True)
    target.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(arm / name, out / name)
    return out


def trained_checkpoint(kind: str, root: Path) -> Path:
    """The checkpoint of a TRAINED_KINDS kind (the Qwen3-Next one converted into `root` once)."""
    if kind == "trained_qwen3_5":
        return ARM
    out = root / "trained_qwen3_next"
    return out if (out / "config.json").exists() else as_qwen3_next(ARM, out)
