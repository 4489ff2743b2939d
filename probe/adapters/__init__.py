"""Per-family knowledge: which model types probe supports and where their gates live."""
from .families import FAMILIES, Family, family_for, official_gate, supported_model_types
from .layout import LayerParts, ModelLayout, discover_layout

__all__ = ["FAMILIES", "Family", "LayerParts", "ModelLayout", "discover_layout", "family_for",
           "official_gate", "supported_model_types"]
