"""Per-family knowledge: which model types probe supports, where their gates live, which class
loads them (registry.py), and what a family needs beyond that, one module each: official.py
(the paper's checkpoints: detect, class, reorder), qwen_next.py, gemma.py, gpt_oss.py; and
attention_terms.py, what they hand the attention back-end (which asks there, naming no family)."""
from .describe import UNREGISTERED, describe, resolve_gate, warn_if_gate_declared_away
from .layout import LayerParts, ModelLayout, discover_layout
from .official import is_official, is_reordered
from .registry import (ADAPTERS, Adapter, adapter_for, model_class, registered, supported_model_types,
                       text_config)

__all__ = ["ADAPTERS", "Adapter", "LayerParts", "ModelLayout", "UNREGISTERED", "adapter_for", "describe",
           "discover_layout", "is_official", "is_reordered", "model_class", "registered", "resolve_gate",
           "supported_model_types", "text_config", "warn_if_gate_declared_away"]
