"""Decoders outside the registry: analysed as ungated when their layout shows no gate.

A gated attention output needs gate logits from somewhere: a q projection wider than the
queries (the Qwen layouts), or a module of its own (g_proj, gate_proj ...). A decoder whose
q projection has exactly H*D rows and whose attention holds no module named like a gate has
neither, so it is measured as a baseline, with a note saying so. Anything else is ambiguous
and refused: a gate probe did not read would make every number silently wrong.
"""
from __future__ import annotations

from torch import nn

from ..core.errors import ProbeError, flag

Q_NAMES = ("q_proj", "query", "wq", "to_q")
FUSED_QKV_NAMES = ("qkv_proj", "c_attn", "query_key_value", "Wqkv", "qkv")


def declare() -> str:
    """What to do about a decoder probe cannot read alone, in the user's terms (flag)."""
    return (f"declare its gate with {flag('gate', 'MODULE:LAYOUT:GRANULARITY[:ACTIVATION]')} "
            f"(e.g. g_proj:plain:elementwise), or {flag('gate', 'none')} if it has none")


def rows(module: nn.Module | None) -> int | None:
    return getattr(module, "out_features", None) or getattr(module, "nf", None)


def ungated_note(model: nn.Module, model_type: str, attention: list[nn.Module], *, num_heads: int,
                 num_kv_heads: int, head_dim: int) -> str:
    """The note for an unregistered decoder that shows no gate; ProbeError when it may have one."""
    unknown = f"architecture {model_type!r} is not in probe's registry"
    if not getattr(type(model), "_supports_attention_backend", False):
        raise ProbeError(f"{unknown}, and {type(model).__name__} does not run its attention through "
                         "transformers' attention interface, where probe reads attention; " + declare())
    queries = num_heads * head_dim
    for i, attn in enumerate(attention):
        gates = [name for name, _ in attn.named_modules() if "gate" in name.rsplit(".", 1)[-1].lower()]
        if gates:
            raise ProbeError(f"{unknown} and layer {i}'s attention holds a module named {gates[0]!r}, "
                             "which may gate its output; " + declare())
        q = next((getattr(attn, n) for n in Q_NAMES if isinstance(getattr(attn, n, None), nn.Module)), None)
        fused = next((getattr(attn, n) for n in FUSED_QKV_NAMES if isinstance(getattr(attn, n, None), nn.Module)), None)
        if q is not None:
            width, expected = rows(q), queries
        elif fused is not None:
            width, expected = rows(fused), (num_heads + 2 * num_kv_heads) * head_dim
        else:
            raise ProbeError(f"{unknown} and probe finds no query projection in layer {i}'s attention "
                             f"({type(attn).__name__}) to tell whether it carries gate logits; " + declare())
        if width != expected:
            raise ProbeError(f"{unknown} and layer {i}'s query projection has {width} rows where "
                             f"{num_heads} heads x {head_dim} need {expected}: the extra rows may be "
                             "gate logits; " + declare())
    return (f"{unknown}; its layout shows no attention-output gate (query projection of "
            f"{num_heads} x {head_dim} rows, no gate module), so it is analysed as ungated. "
            "If it has a gate, declare it with --gate")
