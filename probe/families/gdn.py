"""Gated DeltaNet (GDN) layers: where their parts are, found once per layer.

Qwen3-Next, Qwen3.5 (and its MoE), Qwen4-Exp and OLMo-Hybrid run transformers'
`Qwen3NextGatedDeltaNet` or a copy of it as `linear_attn` (layout.py names such layers
"linear_attention"). Per token it projects q, k, v, the output-gate logits z, the write logits b
and the decay logits a; q, k and v pass through a causal depthwise conv1d and SiLU; then

    beta = sigmoid(b)                                  write strength, per value head
    g    = -exp(A_log) * softplus(a + dt_bias)         log decay, per value head (exp(g) in (0, 1))
    o    = gated delta rule over (q, k, v, g, beta)    q and k L2-normalised, q scaled by 1/sqrt(d_k)
    y    = norm.weight * rmsnorm(o) * SiLU(z)          RMSNormGated: the norm before the gate
    out  = out_proj(y)

(transformers' modeling_qwen3_next.py; the Gated DeltaNet paper, arXiv 2412.06464). Three layouts:
Qwen3-Next fuses the projections (`in_proj_qkvz`, `in_proj_ba`, its channels grouped per key
head and put in order by the module's own `fix_query_key_value_ordering`); Qwen3.5 keeps them
apart (`in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`); OLMo-Hybrid keeps every one apart
(`q_proj`, `k_proj`, `v_proj`, `a_proj`, `b_proj`, the gate logits from `g_proj`) and names its
norm and output projection `o_norm` and `o_proj`; with `linear_allow_neg_eigval` it doubles
beta (beta = 2 sigmoid(b), in (0, 2): the delta rule's eigenvalues may turn negative), which
leaves the per-key split exact. With more value heads than key heads, each key head serves
`num_v_heads // num_k_heads` consecutive value heads.

`gdn_parts(mixer)` returns a `GDNParts`, or a string saying why probe cannot read the layer (an
unknown layout or kernel): such a layer is refused in one line, never measured as if it were
something else.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

FUSED = "fused"            # Qwen3-Next: in_proj_qkvz, in_proj_ba
SEPARATE = "separate"      # Qwen3.5: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
SPLIT = "split"            # OLMo-Hybrid: q_proj, k_proj, v_proj, b_proj, a_proj (and g_proj, o_norm, o_proj)

_PROJECTIONS = {FUSED: ("in_proj_qkvz", "in_proj_ba"), SEPARATE: ("in_proj_qkv", "in_proj_b", "in_proj_a"),
                SPLIT: ("q_proj", "k_proj", "v_proj", "b_proj", "a_proj")}
_COMMON = ("conv1d", "A_log", "dt_bias")
_SIZES = ("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim")


@dataclass(frozen=True)
class GDNParts:
    """One GDN layer's modules and sizes (the mixer's own attributes)."""

    mixer: nn.Module
    projection: str                 # FUSED or SEPARATE
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    activation: str                 # the conv's activation (silu)
    norm_name: str = "norm"         # the RMSNormGated (o_norm on OLMo-Hybrid)
    out_name: str = "out_proj"      # the output projection (o_proj on OLMo-Hybrid)
    beta_scale: float = 1.0         # beta = beta_scale * sigmoid(b) (2 with OLMo-Hybrid's negative eigenvalues)

    @property
    def group(self) -> int:
        """Value heads per key head."""
        return self.num_v_heads // self.num_k_heads

    @property
    def projections(self) -> tuple[str, ...]:
        return _PROJECTIONS[self.projection]

    @property
    def norm(self) -> nn.Module:
        return getattr(self.mixer, self.norm_name)

    @property
    def out(self) -> nn.Module:
        return getattr(self.mixer, self.out_name)


def gdn_parts(mixer: nn.Module) -> GDNParts | str:
    """The parts of a Gated DeltaNet mixer, or why it is not one probe can read."""
    kind = type(mixer).__name__
    if all(hasattr(mixer, n) for n in ("in_proj_qkvz", "in_proj_ba")):
        projection = FUSED
        if not callable(getattr(mixer, "fix_query_key_value_ordering", None)):
            return f"{kind} fuses its projections but has no fix_query_key_value_ordering to split them"
    elif all(hasattr(mixer, n) for n in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")):
        projection = SEPARATE
    elif all(hasattr(mixer, n) for n in ("q_proj", "k_proj", "v_proj", "a_proj", "b_proj", "g_proj")):
        projection = SPLIT
    else:
        return (f"{kind} has neither in_proj_qkvz / in_proj_ba (Qwen3-Next), in_proj_qkv / in_proj_z / "
                "in_proj_b / in_proj_a (Qwen3.5) nor q_proj / k_proj / v_proj / a_proj / b_proj / g_proj "
                "(OLMo-Hybrid): not a Gated DeltaNet layout probe knows")
    names = dict(norm_name="o_norm", out_name="o_proj") if projection == SPLIT else {}
    missing = [n for n in (*_COMMON, names.get("norm_name", "norm"), names.get("out_name", "out_proj"), *_SIZES)
               if not hasattr(mixer, n)]
    if missing:
        return f"{kind} lacks {', '.join(missing)}: not a Gated DeltaNet layout probe knows"
    sizes = {n: int(getattr(mixer, n)) for n in _SIZES}
    if sizes["num_v_heads"] % sizes["num_k_heads"]:
        return f"{kind}: {sizes['num_v_heads']} value heads are not a multiple of {sizes['num_k_heads']} key heads"
    if tuple(mixer.A_log.shape) != (sizes["num_v_heads"],):
        return f"{kind}: A_log of shape {tuple(mixer.A_log.shape)} is not one decay per value head " \
               "(a channel-wise decay, as Kimi Linear's KDA, is not the gated delta rule probe decomposes)"
    norm = getattr(mixer, names.get("norm_name", "norm"))
    if getattr(norm, "activation", "silu") != "silu" or not hasattr(norm, "weight"):
        return f"{kind}: its output norm {type(norm).__name__} is not RMSNormGated with a SiLU gate"
    beta_scale = 2.0 if getattr(mixer, "allow_neg_eigval", False) else 1.0
    return GDNParts(mixer, projection, **sizes, activation=str(getattr(mixer, "activation", "silu")),
                    beta_scale=beta_scale, **names)


def describe_refused(refused: dict[int, str]) -> str:
    """One line naming the GDN layers probe measures nothing of, and why (layer -> reason)."""
    by_reason: dict[str, list[int]] = {}
    for layer, why in sorted(refused.items()):
        by_reason.setdefault(why, []).append(layer)
    parts = [f"layer{'s' if len(ls) > 1 else ''} {', '.join(map(str, ls))}: {why}" for why, ls in by_reason.items()]
    return "linear-attention layers not measured (" + "; ".join(parts) + ")"
