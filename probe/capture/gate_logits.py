"""Where a declared gate's logits sit in its module's output, and hooks that overwrite them.

Interventions write gate *logits* (never scores), so the model's own code applies the
activation: a wrongly declared layout changes the wrong numbers, which `probe check` detects.
"""
from __future__ import annotations

import math

import torch

from ..core.errors import ProbeError
from ..families.gates import GateSpec
from .hooks import first_output, replace_first


def gate_channels(spec: GateSpec, width: int, heads: int, kv_heads: int, head_dim: int) -> torch.Tensor:
    """Which channel of the gate module's output holds each gate logit: (H, Dg) long.

    Found by carving the logits out of a row of channel numbers with the spec itself, so it is
    right for every layout `GateSpec.logits` knows. Raises ProbeError when the layout does not
    fit the module's output width (e.g. headwise declared on an elementwise checkpoint).
    """
    dg = spec.gate_dim(head_dim)
    try:
        channels = spec.logits(torch.arange(width).view(1, width), heads, kv_heads, head_dim)[0]
        if channels.shape == (heads, dg):
            return channels
    except RuntimeError:
        pass
    need = heads * dg if spec.layout == "plain" else heads * (head_dim + dg)
    raise ProbeError(
        f"the gate layout {spec.name} does not fit {spec.module}: its output has {width} "
        f"channels, the layout needs {need} ({heads} heads, {kv_heads} KV heads, head_dim "
        f"{head_dim}); the gate is declared wrongly for this checkpoint (probe check CHECKPOINT "
        "names the layouts that fit)")


def validate_gate(layout) -> None:
    """Refuse, in one line, a gate layout that cannot be carved out of its module's output."""
    if layout.gate is None:
        return
    for p in layout.layers:
        width = getattr(p.gate_module, "out_features", None)
        if width is not None:
            gate_channels(layout.gate, width, layout.num_heads, layout.num_kv_heads, layout.head_dim)


def gate_logit(activation: str, score: float) -> float:
    """The logit whose activation is `score` (+-inf for scores 1 and 0 under the sigmoid)."""
    if activation == "sigmoid":
        if score >= 1.0:
            return math.inf
        if score <= 0.0:
            return -math.inf
        return math.log(score) - math.log1p(-score)
    if activation == "2sigmoid":
        return gate_logit("sigmoid", score / 2.0)
    if activation == "softplus":
        if score <= 0.0:
            return -math.inf
        return score + math.log(-math.expm1(-score))      # log(exp(s) - 1), stable
    raise ProbeError(f"cannot force a {activation} gate to a value; no inverse is known")


def set_gate_logits(layout, logits: dict[int, float]) -> list:
    """Hooks that overwrite the gate logits of the given layers with constants."""
    spec = layout.gate
    if spec is None:
        raise ProbeError("this model has no attention-output gate to intervene on")
    regs = []
    for p in layout.layers:
        if p.index not in logits or p.gate_module is None:
            continue
        value = logits[p.index]
        cache: dict[int, torch.Tensor] = {}

        def hook(module, args, output, value=value, cache=cache):
            out = first_output(output)
            width = out.shape[-1]
            if width not in cache:
                cache[width] = gate_channels(spec, width, layout.num_heads, layout.num_kv_heads,
                                             layout.head_dim).reshape(-1).to(out.device)
            out = out.clone()
            out[..., cache[width]] = value
            return replace_first(output, out)
        regs.append((p.gate_module, "forward", hook))
    return regs
