"""The paper's official gated checkpoints: how to tell them, which class loads them, and how to
reorder their q_proj rows for TransformerLens. The one place that decides "is this official".

The released checkpoints are `model_type` "qwen3" with `headwise_attn_output_gate` or
`elementwise_attn_output_gate` in config.json. Their `q_proj` also emits the gate logits, packed
per KV head: viewed as (KV, -1, hidden), each group holds [G*D query rows | G*Dg gate rows],
G = H / KV, Dg = 1 (headwise) or D (elementwise). Stock Qwen3 cannot load them, and it ignores
the official `use_qk_norm: false`; both take probe.families.official_qwen3's classes.

TransformerLens 4.x (`gated_q_proj`, as for Qwen3-Next) reads `q_proj` per query head as
[D query rows | D gate rows]. The two orders agree only when G = 1 and the gate is elementwise;
otherwise a bridge silently computes wrong logits (elementwise) or fails (headwise).
`reorder_q_proj` permutes the rows into the per-head order (a headwise gate row is repeated D
times: sigmoid of the same logit on every dimension is the same gate) and switches each
attention module to the class that reads that order, so the logits do not change. Whether a
model was reordered is read from its attention modules (`is_reordered`), never from a flag.

transformers' Qwen3 modeling is imported only when a model is built or rewritten here.
"""
from __future__ import annotations

import torch
from torch import nn

from ..core.errors import ProbeError
from .gates import GateSpec
from .official_flags import MODEL_TYPE, granularity


def is_official(config) -> bool:
    """The paper's checkpoint format: model_type qwen3 with a gate flag."""
    return getattr(config, "model_type", None) == MODEL_TYPE and granularity(config) is not None


def model_class(config):
    """The class that loads this qwen3 config, when transformers' own would be wrong: a gate flag
    (q_proj also holds the gate rows), or `use_qk_norm: false`, which stock Qwen3 would ignore and
    normalise q and k with freshly initialised weights. None: transformers' own class."""
    if getattr(config, "model_type", None) != MODEL_TYPE:
        return None
    if granularity(config) is None and getattr(config, "use_qk_norm", True):
        return None
    from .official_qwen3 import OfficialGatedQwen3ForCausalLM

    return OfficialGatedQwen3ForCausalLM


def checkpoint_gate(config) -> GateSpec | None:
    """The gate as the checkpoint stores it: grouped per KV head."""
    if not is_official(config):
        return None
    return GateSpec("q_proj", "grouped", granularity(config), "sigmoid")


# After reorder_q_proj: per head [D query | D gate] rows, a headwise logit repeated D times.
REORDERED_GATE = GateSpec("q_proj", "interleaved", "elementwise", "sigmoid")


def gate(model: nn.Module, config) -> GateSpec | None:
    """The gate as `model` reads it now: grouped, or per head once reorder_q_proj rewrote it."""
    spec = checkpoint_gate(config)
    if spec is not None and is_reordered(model):
        return REORDERED_GATE
    return spec


def _text_config(model: nn.Module):
    config = model.config
    return getattr(config, "text_config", None) or config


def is_reordered(model: nn.Module) -> bool:
    """Whether the official model's attention reads q_proj in per-head order (reorder_q_proj).
    Read from the modules themselves, which also finds them inside a TransformerBridge."""
    if not is_official(_text_config(model)):
        return False
    from .official_qwen3 import InterleavedGatedQwen3Attention

    return any(isinstance(m, InterleavedGatedQwen3Attention) for m in model.modules())


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


def _attention_modules(model: nn.Module) -> list[nn.Module]:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ProbeError(f"reorder_official_q_proj expects a Hugging Face causal LM with model.layers, "
                         f"not a {type(model).__name__}; reorder before building the bridge")
    return [getattr(layer, "self_attn", None) for layer in layers]


@torch.no_grad()
def reorder_q_proj(model: nn.Module) -> bool:
    """Rewrite an official gated Qwen3 model's q_proj rows in place into per-head order (logits
    unchanged). Returns whether anything was rewritten (False: it was already)."""
    from .official_qwen3 import InterleavedGatedQwen3Attention, OfficialGatedQwen3Attention

    config = model.config
    if not is_official(config):
        raise ProbeError(f"reorder_official_q_proj applies to the paper's official checkpoints "
                         f"(model_type qwen3 with a gate flag); this is {getattr(config, 'model_type', '?')!r}")
    if is_reordered(model):
        return False
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
    return True
