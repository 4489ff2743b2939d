"""The registry of model families probe knows, keyed by `config.model_type`.

A family says whether and how its attention output is gated; everything else about the
model is discovered by `layout.discover_layout`. To support a new gated architecture, add a
`Family` here (or, without changing probe, pass a `GateSpec` to `probe.analyze(gate=...)` /
`--gate MODULE:LAYOUT:GRANULARITY` on the command line).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import ProbeError, flag
from ..gates import GateSpec


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    gate: Callable[[object], GateSpec | None]  # config -> gate spec (None: no gate)
    note: str = ""


def _qwen_next_gate(config) -> GateSpec:
    return GateSpec("q_proj", "interleaved", "elementwise", "sigmoid")


def official_gate(config) -> GateSpec | None:
    """The paper's checkpoints: model_type qwen3 plus a gate flag in config.json."""
    if getattr(config, "probe_q_proj_layout", None) == "interleaved":
        # probe.reorder.reorder_official_q_proj rewrote q_proj per head (headwise gates repeated).
        return GateSpec("q_proj", "interleaved", "elementwise", "sigmoid")
    if getattr(config, "headwise_attn_output_gate", False):
        return GateSpec("q_proj", "grouped", "headwise", "sigmoid")
    if getattr(config, "elementwise_attn_output_gate", False):
        return GateSpec("q_proj", "grouped", "elementwise", "sigmoid")
    return None


def _no_gate(config) -> None:
    return None


FAMILIES = (
    Family("qwen3_next", ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                          "qwen3_5_moe_text", "qwen4_exp"), _qwen_next_gate,
           "Qwen3-Next / Qwen3.5: elementwise gate interleaved per head in q_proj; hybrid layers"),
    Family("qwen3", ("qwen3", "qwen3_moe"), official_gate,
           "Qwen3; with headwise_attn_output_gate / elementwise_attn_output_gate in config.json "
           "it is the paper's official layout"),
    Family("qwen2", ("qwen2", "qwen2_moe"), _no_gate),
    Family("llama", ("llama",), _no_gate),
    Family("mistral", ("mistral", "mixtral"), _no_gate),
    Family("gemma", ("gemma", "gemma2", "gemma3_text", "gemma3"), _no_gate,
           "Gemma 1-3; Gemma 2 / 3 put norms on both sides of attention and MLP (sandwich norms)"),
    Family("olmo2", ("olmo2",), _no_gate, "OLMo 2: norms after attention and after the MLP (post-norm)"),
    Family("phi3", ("phi3",), _no_gate),
    Family("gpt2", ("gpt2",), _no_gate),
)
BY_MODEL_TYPE = {t: f for f in FAMILIES for t in f.model_types}


def supported_model_types() -> list[str]:
    return sorted(BY_MODEL_TYPE)


def registered(model_type: str) -> Family | None:
    return BY_MODEL_TYPE.get(model_type)


def family_for(model_type: str) -> Family:
    family = BY_MODEL_TYPE.get(model_type)
    if family is None:
        raise ProbeError(
            f"unsupported architecture {model_type!r}; probe knows {', '.join(supported_model_types())}. "
            f"For another model declare its gate with {flag('gate', metavar='MODULE:LAYOUT:GRANULARITY[:ACTIVATION]')} "
            f"(e.g. g_proj:plain:elementwise), or {flag('gate', 'none')} for a model without one"
        )
    return family
