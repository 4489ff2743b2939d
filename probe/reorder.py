"""Rewrite the official grouped gate layout into the per-head layout TransformerLens reads.

The paper's checkpoints pack `q_proj` per KV head: viewed as (KV, -1, hidden), each group holds
[G*D query rows | G*Dg gate rows], G = H / KV, Dg = 1 (headwise) or D (elementwise).
TransformerLens 4.x (`gated_q_proj`, as for Qwen3-Next) reads `q_proj` per query head as
[D query rows | D gate rows]. The two orders agree only when G = 1 and the gate is elementwise;
otherwise a bridge silently computes wrong logits (elementwise) or fails (headwise).

`reorder_official_q_proj(model)` permutes the rows into the per-head order (a headwise gate row
is repeated D times: sigmoid of the same logit on every dimension is the same gate) and switches
each attention module to a forward that reads that order, so the Hugging Face model computes
the same logits as before, and a bridge built from it afterwards computes them too.

The reordered model is meant for building a bridge in memory. Do not `save_pretrained` it:
the checkpoint would no longer be in the official format.
"""
from __future__ import annotations

import torch
from torch import nn

from .errors import ProbeError
from .load import LoadedModel, describe
from .models.official_qwen3 import OfficialGatedQwen3Attention, official_gate_granularity

# Set on the config by reorder_official_q_proj: how q_proj is laid out now, and what the gate was.
LAYOUT_ATTR = "probe_q_proj_layout"
ORIGINAL_ATTR = "probe_gate_reordered_from"


def is_official(config) -> bool:
    """The paper's checkpoint format: model_type qwen3 with a gate flag."""
    return getattr(config, "model_type", None) == "qwen3" and official_gate_granularity(config) is not None


def is_reordered(config) -> bool:
    return getattr(config, LAYOUT_ATTR, None) == "interleaved"


def grouped_to_interleaved(t: torch.Tensor, heads: int, kv_heads: int, head_dim: int,
                           gate_dim: int) -> torch.Tensor:
    """q_proj weight (rows, hidden) or bias (rows,) from grouped-per-KV to per-head [query|gate].

    In: rows = KV * (G*D + G*Dg). Out: rows = H * 2D, head h = kv*G + j at rows h*2D ... h*2D+2D.
    """
    group = heads // kv_heads
    rest = t.shape[1:]
    grouped = t.reshape(kv_heads, group * (head_dim + gate_dim), *rest)
    query = grouped[:, : group * head_dim].reshape(heads, head_dim, *rest)            # (H, D, ...)
    gate = grouped[:, group * head_dim:].reshape(heads, gate_dim, *rest)             # (H, Dg, ...)
    gate = gate.expand(heads, head_dim, *rest)                                        # Dg=1 -> D copies
    return torch.cat([query, gate], dim=1).reshape(heads * 2 * head_dim, *rest).contiguous()


class InterleavedGatedQwen3Attention(OfficialGatedQwen3Attention):
    """The official gated attention, reading q_proj per head as [D query | D gate] rows.

    Only the split differs; the forward (and so the numbers) is the official one.
    """

    def split_query_gate(self, projected: torch.Tensor):
        # (B, T, H, 2D) -> queries (B, T, H, D) and gate logits (B, T, H, D)
        per_head = projected.view(*projected.shape[:-1], self.num_heads, 2 * self.head_dim)
        query, gate = per_head.split([self.head_dim, self.head_dim], dim=-1)
        return query, gate


def _attention_modules(model: nn.Module) -> list[nn.Module]:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ProbeError(f"reorder_official_q_proj expects a Hugging Face causal LM with model.layers, "
                         f"not a {type(model).__name__}; reorder before building the bridge")
    return [getattr(layer, "self_attn", None) for layer in layers]


@torch.no_grad()
def reorder_official_q_proj(model: nn.Module) -> nn.Module:
    """Rewrite an official gated Qwen3 model (`probe.load` of the paper's checkpoint, or its
    `.model`) in place so
    that TransformerLens reads its gate correctly; returns the same model.

    Logits are unchanged. Calling it twice is harmless. The model must not yet be wrapped in a
    TransformerBridge (build the bridge afterwards, e.g. with `probe.bridge.build_bridge`).
    """
    loaded = model if isinstance(model, LoadedModel) else None
    model = loaded.model if loaded is not None else model
    config = model.config
    if is_reordered(config):
        return model
    if not is_official(config):
        raise ProbeError(f"reorder_official_q_proj applies to the paper's official checkpoints "
                         f"(model_type qwen3 with a gate flag); this is {getattr(config, 'model_type', '?')!r}")
    granularity = official_gate_granularity(config)
    attns = _attention_modules(model)
    if not all(isinstance(a, OfficialGatedQwen3Attention) for a in attns):
        kinds = sorted({type(a).__name__ for a in attns})
        raise ProbeError(f"expected the official gated attention in every layer (load the checkpoint with "
                         f"probe.load), found {', '.join(kinds)}; reorder before building the bridge")
    for attn in attns:
        H, KV, D, Dg = attn.num_heads, attn.num_kv_heads, attn.head_dim, attn.gate_dim
        old = attn.q_proj
        new = nn.Linear(old.in_features, 2 * H * D, bias=old.bias is not None,
                        device=old.weight.device, dtype=old.weight.dtype)
        new.weight.copy_(grouped_to_interleaved(old.weight, H, KV, D, Dg))
        if old.bias is not None:
            new.bias.copy_(grouped_to_interleaved(old.bias, H, KV, D, Dg))
        new.requires_grad_(old.weight.requires_grad)
        attn.q_proj = new
        attn.__class__ = InterleavedGatedQwen3Attention
    setattr(config, LAYOUT_ATTR, "interleaved")
    setattr(config, ORIGINAL_ATTR, f"grouped_{granularity}")
    if loaded is not None:
        loaded.layout = describe(model)
    return model
