"""A built model's layout: its family's adapter, or the gate the user declared, plus discovery."""
from __future__ import annotations

import warnings

from torch import nn

from ..core.errors import ProbeError, flag
from .gates import GateSpec
from .layout import ModelLayout, discover_layout
from .registry import REFUSED, registered, text_config
from .unregistered import ungated_note

UNREGISTERED = "unregistered"


def resolve_gate(model: nn.Module, config, model_type: str,
                 gate: GateSpec | str | None) -> tuple[str, GateSpec | None]:
    """The family name and gate spec for a model; a user-declared gate wins. An architecture
    outside the registry is "unregistered" (describe decides from its layout)."""
    if isinstance(gate, str):
        gate = None if gate == "none" else GateSpec.parse(gate)
        return "declared", gate
    if gate is not None:
        return "declared", gate
    adapter = registered(model_type)
    if adapter is None:
        return UNREGISTERED, None
    return adapter.name, adapter.gate(model, config)


def describe(model: nn.Module, gate: GateSpec | str | None = None, *, user_declared: bool = False) -> ModelLayout:
    """Find the hookable parts of an already-built model."""
    config = text_config(model.config)
    model_type = getattr(model.config, "model_type", "?")
    if user_declared or gate is not None:
        family, spec = resolve_gate(model, config, model_type, gate if gate is not None else "none")
    else:
        family, spec = resolve_gate(model, config, model_type, None)
    if family == UNREGISTERED and model_type in REFUSED:
        raise ProbeError(f"architecture {model_type!r} is not supported: {REFUSED[model_type]}")
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head")
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd")
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer")
    layout = discover_layout(model, family=family, model_type=model_type, num_layers=layers,
                             num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, gate=spec)
    if family == UNREGISTERED:
        layout.note = ungated_note(model, model_type, [p.mixer for p in layout.layers if p.layer_type == "attention"],
                                   num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim)
        warnings.warn(layout.note)
    return layout


def warn_if_gate_declared_away(model: nn.Module, layout: ModelLayout, gate) -> None:
    """--gate none (gate="none") on a checkpoint whose layout shows a gate: warn, since its gate
    scores, the mean-gate control and the gate interventions then go unmeasured. A gate shows
    through the registry (the architecture has one) or a q_proj wider than its heads (the
    gated layouts put the gate logits there: 2 x heads x head_dim, or heads more)."""
    if not (isinstance(gate, str) and gate.strip() == "none"):
        return
    adapter = registered(layout.model_type)
    spec = adapter.gate(model, text_config(model.config)) if adapter is not None else None
    if spec is not None:
        why = f"its architecture ({layout.model_type}) has a {spec.granularity} gate in {spec.module}"
    else:
        q = layout.num_heads * layout.head_dim
        widths = sorted({getattr(getattr(p.mixer, "q_proj", None), "out_features", q) for p in layout.layers
                         if p.layer_type == "attention"} & {2 * q, q + layout.num_heads})
        if not widths:
            return
        why = (f"q_proj gives {widths[0]} outputs for {layout.num_heads} heads of {layout.head_dim} "
               "(a gate in q_proj adds the extra ones)")
    warnings.warn(f"{flag('gate', 'none')} but this checkpoint shows a gate: {why}; gate scores, "
                  "the mean-gate control and gate interventions are not measured. Leave the option "
                  f"out to measure the gate, or declare it with {flag('gate', 'MODULE:LAYOUT:GRANULARITY')}")
