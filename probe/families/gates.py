"""Where a model's attention-output gate lives and how to read its scores.

A gate multiplies each head's attention output before the output projection:
`Y = concat_h(act(gate_logits_h) * O_h) W_O`. probe reads the gate logits from the
module that produces them and never recomputes the gate itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.errors import ProbeError

LAYOUTS = ("interleaved", "grouped", "plain")
GRANULARITIES = ("elementwise", "headwise")


def two_sigmoid(logits: torch.Tensor) -> torch.Tensor:
    """2 * sigmoid: a gate in (0, 2) that is exactly 1 at logit 0 (grafted gates start there)."""
    return 2.0 * torch.sigmoid(logits)


ACTIVATIONS = {
    "sigmoid": torch.sigmoid,
    "softplus": torch.nn.functional.softplus,
    "2sigmoid": two_sigmoid,
}
SCALED_SIGMOIDS = {1.0: "sigmoid", 2.0: "2sigmoid"}
# The top of each activation's score range, where gate_hist.csv's bins end: a sigmoid's (0, 1),
# 2 * sigmoid's (0, 2); softplus is unbounded: its bins end at 4 and the last one takes every
# score above (softplus(4) = 4.02: a gate four times its input is past any use as a gate).
SCORE_TOP = {"sigmoid": 1.0, "2sigmoid": 2.0, "softplus": 4.0}


def scaled_sigmoid_name(scale: float) -> str:
    """The activation scale * sigmoid, by its name in ACTIVATIONS (scale 1 or 2)."""
    if scale not in SCALED_SIGMOIDS:
        raise ProbeError(f"a gate scale of {scale:g} is not supported; use 1 (sigmoid) or 2 (2 * sigmoid)")
    return SCALED_SIGMOIDS[scale]


@dataclass(frozen=True)
class GateSpec:
    """How to find one attention layer's gate logits.

    module: path of the module whose output carries the logits, relative to the attention
        module (`q_proj` for the Qwen layouts, a separate projection elsewhere).
    layout:
        interleaved  q_proj output viewed as (..., H, D + Dg): per head [D query | Dg gate]
                     (Qwen3-Next, Qwen3.5: elementwise, Dg = D).
        grouped      q_proj output viewed as (..., KV, -1): per KV head [G*D queries | G*Dg
                     gates] (the paper's official checkpoints).
        plain        the module output is the gate logits alone, (..., H*Dg).
    granularity: `elementwise` (one gate per head dimension) or `headwise` (one per head).
    activation: `sigmoid` (the paper), `softplus`, or `2sigmoid` (2 * sigmoid: grafted gates).
    """

    module: str = "q_proj"
    layout: str = "interleaved"
    granularity: str = "elementwise"
    activation: str = "sigmoid"

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ProbeError(f"unknown gate layout {self.layout!r}; use one of {', '.join(LAYOUTS)}")
        if self.granularity not in GRANULARITIES:
            raise ProbeError(
                f"unknown gate granularity {self.granularity!r}; use one of {', '.join(GRANULARITIES)}"
            )
        if self.activation not in ACTIVATIONS:
            raise ProbeError(
                f"unknown gate activation {self.activation!r}; use one of {', '.join(ACTIVATIONS)}"
            )

    @property
    def name(self) -> str:
        return f"{self.layout}_{self.granularity}"

    def gate_dim(self, head_dim: int) -> int:
        return head_dim if self.granularity == "elementwise" else 1

    def logits(self, out: torch.Tensor, heads: int, kv_heads: int, head_dim: int) -> torch.Tensor:
        """Gate logits (B, T, H, Dg) carved out of the gate module's output (B, T, C)."""
        lead = out.shape[:-1]
        dg = self.gate_dim(head_dim)
        if self.layout == "interleaved":
            # per head [D query | Dg gate]: Dg = D (Qwen3-Next) or 1 (headwise variant)
            return out.view(*lead, heads, head_dim + dg)[..., head_dim:]
        if self.layout == "grouped":
            group = heads // kv_heads
            per_kv = out.view(*lead, kv_heads, group * (head_dim + dg))
            return per_kv[..., group * head_dim:].reshape(*lead, heads, dg)
        return out.view(*lead, heads, dg)

    def scores(self, out: torch.Tensor, heads: int, kv_heads: int, head_dim: int) -> torch.Tensor:
        """Gate scores act(logits), (B, T, H, Dg), in float32 whatever the model dtype."""
        # Contiguous first: the model applies the activation to a contiguous copy, and torch's
        # vectorised kernels can differ by one ulp between strided and contiguous inputs.
        logits = self.logits(out, heads, kv_heads, head_dim).float().contiguous()
        return ACTIVATIONS[self.activation](logits)

    @classmethod
    def parse(cls, text: str) -> "GateSpec":
        """Parse the CLI form `MODULE:LAYOUT:GRANULARITY[:ACTIVATION]`, e.g. `g_proj:plain:headwise`."""
        parts = text.split(":")
        if not 3 <= len(parts) <= 4:
            raise ProbeError(
                f"cannot read gate spec {text!r}; write MODULE:LAYOUT:GRANULARITY[:ACTIVATION], "
                "for example q_proj:interleaved:elementwise:sigmoid or g_proj:plain:headwise"
            )
        return cls(*parts)
