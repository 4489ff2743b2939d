"""One-screen reprs for what a notebook shows: a loaded model, its layout, a layer's parts.

The dataclass reprs printed every nn.Module they hold, i.e. the whole model, once per layer.
These name the modules by class and say what probe found instead.
"""
from __future__ import annotations

from collections import Counter


def _layer_summary(layers) -> str:
    """'3 linear_attention + 1 attention (attention layers [3])'."""
    counts = Counter(p.layer_type for p in layers)
    kinds = " + ".join(f"{n} {kind}" for kind, n in counts.items())
    attention = [p.index for p in layers if p.layer_type == "attention"]
    shown = attention if len(attention) <= 8 else [*attention[:4], "...", *attention[-2:]]
    return f"{kinds} (attention layers [{', '.join(map(str, shown))}])"


def _name(module) -> str | None:
    return None if module is None else type(module).__name__


class LayerPartsRepr:
    def __repr__(self) -> str:
        parts = {"mixer": _name(self.mixer), "post_attn_norm": _name(self.post_attn_norm),
                 "mlp": _name(self.mlp), "o_proj": _name(self.o_proj), "gate_module": _name(self.gate_module)}
        shown = ", ".join(f"{k}={v}" for k, v in parts.items() if v is not None)
        return f"LayerParts({self.index}, {self.layer_type}, {shown})"


class ModelLayoutRepr:
    def __repr__(self) -> str:
        gate = "none" if self.gate is None else \
            f"{self.gate_layout} (in {self.gate.module}, {self.gate.activation})"
        return (f"ModelLayout(family={self.family!r}, model_type={self.model_type!r}, gate={gate}, "
                f"heads={self.num_heads} (kv {self.num_kv_heads}) x {self.head_dim}, "
                f"{len(self.layers)} layers: {_layer_summary(self.layers)})")


class LoadedModelRepr:
    def __repr__(self) -> str:
        model = self.model
        params = next(model.parameters(), None)
        held = "no parameters" if params is None else \
            f"{sum(p.numel() for p in model.parameters()):,} parameters, " \
            f"{str(params.dtype).replace('torch.', '')} on {params.device}"
        return (f"LoadedModel({type(model).__name__}, {held}, path={self.path!r}, "
                f"tokenizer={_name(self.tokenizer)},\n  layout={self.layout!r})")
