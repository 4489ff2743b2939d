"""The registry of model families probe knows, keyed by `config.model_type`.

An adapter says whether and how a family's attention output is gated, and which class loads
its checkpoints when transformers' own would not; everything else about the model is
discovered by `layout.discover_layout`. A family that needs more than a line here has a
module of its own: official.py (the paper's checkpoints), qwen_next.py, gemma.py, grafted.py (and
gpt_oss.py, for a family outside the registry whose attention needs a word).
To support a new gated architecture, add an `Adapter` here (or, without changing probe, pass a
`GateSpec` to `probe.analyze(gate=...)` / `--gate MODULE:LAYOUT:GRANULARITY` on the command line).

Adding a family touches: this file (and a module of its own when it needs more than a gate and
a class), a tiny case in tests/families/test_adapters.py CASES (test_every_registered_model_type_has_a_case
fails without one), a gold case in tests/run/test_pipeline_gold.py, and README's supported models.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..core.registry import unique
from .gates import GateSpec
from . import gemma, grafted, official, qwen_next


def no_gate(model, config) -> None:
    return None


def own_class(config) -> None:
    return None


@dataclass(frozen=True)
class Adapter:
    name: str                       # the family, as meta.json reports it
    model_types: tuple[str, ...]
    # (the model as built, its text config) -> how it reads its gate now; None: no gate
    gate: Callable[[object, object], GateSpec | None] = no_gate
    # config -> the class that loads it; None: transformers' AutoModelForCausalLM
    model_class: Callable[[object], type | None] = own_class
    note: str = ""


ADAPTERS = (
    Adapter("qwen3_next", qwen_next.MODEL_TYPES, qwen_next.gate, qwen_next.model_class, note=qwen_next.NOTE),
    Adapter("qwen3", ("qwen3",), official.gate, official.model_class,
            "Qwen3; with headwise_attn_output_gate / elementwise_attn_output_gate in config.json "
            "it is the paper's official layout"),
    Adapter("qwen3", ("qwen3_moe",)),
    Adapter("qwen2", ("qwen2", "qwen2_moe")),
    Adapter("llama", ("llama",)),
    Adapter("grafted_llama", grafted.MODEL_TYPES, grafted.gate, grafted.model_class, grafted.NOTE),
    Adapter("mistral", ("mistral", "mixtral")),
    Adapter("gemma", gemma.MODEL_TYPES, note=gemma.NOTE),
    Adapter("olmo2", ("olmo2",), note="OLMo 2: norms after attention and after the MLP (post-norm)"),
    Adapter("olmo_hybrid", ("olmo_hybrid",),
            note="OLMo-Hybrid: ungated softmax layers (post-norm, QK-norm) among Gated DeltaNet layers "
                 "(--gdn: q/k/v/a/b_proj, g_proj output gate, o_norm, o_proj; beta up to 2)"),
    Adapter("phi3", ("phi3",), note="Phi-3: q, k and v from one fused qkv_proj"),
    Adapter("gpt2", ("gpt2",)),
)


# Families transformers has that probe refuses by name, with the reason, rather than with the
# generic "not in the registry" line: what a user of such a model needs to know first.
REFUSED = {
    "kimi_linear": "Kimi Linear's KDA layers decay each key channel separately (a channel-wise decay, "
                   "not one scalar per head), so the exact per-key split of a Gated DeltaNet output "
                   "(docs/gdn.md) does not apply to them, and its MLA softmax layers bypass "
                   "transformers' attention interface, where probe reads attention",
}


def by_model_type(adapters) -> dict[str, Adapter]:
    """model_type -> its adapter; a model type two adapters claim is refused, naming both."""
    return unique(((t, a, f"ADAPTERS[{i}] (Adapter {a.name!r}, probe/families/registry.py)")
                   for i, a in enumerate(adapters) for t in a.model_types), "model_type")


BY_MODEL_TYPE = by_model_type(ADAPTERS)


def supported_model_types() -> list[str]:
    return sorted(BY_MODEL_TYPE)


def registered(model_type: str) -> Adapter | None:
    return BY_MODEL_TYPE.get(model_type)


def text_config(config):
    """Multimodal wrappers (Qwen3.5, Gemma 3) keep the language model's settings in text_config."""
    return getattr(config, "text_config", None) or config


def model_class(config):
    """The class that loads a checkpoint with this config; None: transformers' own."""
    adapter = BY_MODEL_TYPE.get(getattr(config, "model_type", None))
    return adapter.model_class(config) if adapter is not None else None
