"""The parts of a decoder that probe hooks, found once per model.

Every supported family is a decoder whose layers hold a token mixer (softmax attention or, in
hybrid models, linear attention), an MLP, norms, and a residual stream between them. Where the
norms sit differs by family, and with it where the residual stream after attention can be read
(`residual_after_attention`). `ModelLayout` records where those parts are so that the capture
code never needs to know about families.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch.nn as nn

from ..core.errors import ProbeError
from ..core.reprs import LayerPartsRepr, ModelLayoutRepr
from .gates import GateSpec


@dataclass(repr=False)
class LayerParts(LayerPartsRepr):                  # a one-screen repr (reprs.py)
    index: int
    layer_type: str                 # "attention" or "linear_attention"
    layer: nn.Module                # the decoder layer: its output is the residual after the MLP
    mixer: nn.Module                # self_attn / linear_attn: its output is the attention branch
    post_attn_norm: nn.Module | None  # the norm before the MLP (pre-norm and sandwich-norm layers)
    mlp: nn.Module | None
    o_proj: nn.Module | None        # its input is the gated attention output (attention layers)
    gate_module: nn.Module | None   # its output carries the gate logits (gated attention layers)
    resid_mid: nn.Module | None = None  # its input is the residual stream after attention


@dataclass(repr=False)
class ModelLayout(ModelLayoutRepr):                  # a one-screen repr (reprs.py)
    family: str
    model_type: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    gate: GateSpec | None
    layers: list[LayerParts] = field(default_factory=list)
    note: str = ""                  # how the layout was decided, when the registry did not say

    @property
    def gated(self) -> bool:
        return self.gate is not None

    @property
    def gate_layout(self) -> str:
        return self.gate.name if self.gate else "none"

    @property
    def attention_layers(self) -> list[int]:
        return [p.index for p in self.layers if p.layer_type == "attention"]


def get_submodule(root: nn.Module, path: str) -> nn.Module | None:
    try:
        return root.get_submodule(path)
    except AttributeError:
        return None


def first_submodule(root: nn.Module, names: tuple[str, ...]) -> nn.Module | None:
    for name in names:
        module = get_submodule(root, name)
        if module is not None:
            return module
    return None


LAYER_LIST_PATHS = (
    "model.layers", "model.language_model.layers", "language_model.model.layers",
    "transformer.h", "model.decoder.layers", "gpt_neox.layers", "transformer.blocks",
)
ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention")
LINEAR_ATTENTION_NAMES = ("linear_attn",)
O_PROJ_NAMES = ("o_proj", "c_proj", "out_proj", "dense", "wo")
# Gemma 2 / 3 put a norm on the attention output too (sandwich norms); their pre-MLP norm, whose
# input is the residual after attention, is pre_feedforward_layernorm, so it is looked for first.
POST_ATTN_NORM_NAMES = ("pre_feedforward_layernorm", "post_attention_layernorm", "ln_2", "post_attention_norm",
                        "ffn_norm")
MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe")
PRE_ATTN_NORM_NAMES = ("input_layernorm", "ln_1", "attention_norm", "pre_attention_layernorm")
POST_MLP_NORM_NAMES = ("post_feedforward_layernorm", "post_mlp_layernorm")


def residual_after_attention(layer: nn.Module, mlp: nn.Module | None) -> tuple[nn.Module | None, nn.Module | None]:
    """(the norm before the MLP, the module whose input is the residual stream after attention, from where the layer's
    norms sit:
    - pre-norm (Llama, Qwen, GPT-2, ...): x + attn(norm(x)) feeds the norm before the MLP;
    - sandwich norms (Gemma 2 / 3): x + norm(attn(norm(x))) feeds pre_feedforward_layernorm
      (post_attention_layernorm there normalises the attention branch: its input is not the stream);
    - post-norm (OLMo 2): x + norm(attn(x)) feeds the MLP itself; no norm reads the stream, and
      post_attention_layernorm's input is the raw attention output).
    Post-norm layers have no norm before the MLP: (None, mlp)."""
    pre_attn = first_submodule(layer, PRE_ATTN_NORM_NAMES)
    post_mlp = first_submodule(layer, POST_MLP_NORM_NAMES)
    if pre_attn is None and post_mlp is not None:
        return None, mlp
    norm = first_submodule(layer, POST_ATTN_NORM_NAMES)
    return norm, norm


def find_layers(model: nn.Module, num_layers: int) -> nn.ModuleList:
    layers = first_submodule(model, LAYER_LIST_PATHS)
    if isinstance(layers, nn.ModuleList) and len(layers) == num_layers:
        return layers
    # Fall back to the one ModuleList whose length is the layer count.
    candidates = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == num_layers]
    if len(candidates) == 1:
        return candidates[0]
    raise ProbeError(
        f"cannot find the {num_layers} decoder layers in {type(model).__name__}; "
        "this architecture needs an adapter (see probe/families/registry.py)"
    )


def discover_layout(model: nn.Module, *, family: str, model_type: str, num_layers: int,
                    num_heads: int, num_kv_heads: int, head_dim: int,
                    gate: GateSpec | None) -> ModelLayout:
    layout = ModelLayout(family, model_type, num_heads, num_kv_heads, head_dim, gate)
    for i, layer in enumerate(find_layers(model, num_layers)):
        attn = first_submodule(layer, ATTENTION_NAMES)
        linear = first_submodule(layer, LINEAR_ATTENTION_NAMES) if attn is None else None
        if attn is None and linear is None:
            raise ProbeError(f"layer {i} of {type(model).__name__} has no attention module probe knows")
        mixer = attn if attn is not None else linear
        gate_module = None
        if attn is not None and gate is not None:
            gate_module = get_submodule(attn, gate.module)
            if gate_module is None:
                raise ProbeError(
                    f"gate module {gate.module!r} not found in layer {i}'s attention "
                    f"({type(attn).__name__}); check the gate spec"
                )
        mlp = first_submodule(layer, MLP_NAMES)
        pre_mlp_norm, resid_mid = residual_after_attention(layer, mlp)
        layout.layers.append(LayerParts(
            index=i,
            layer_type="attention" if attn is not None else "linear_attention",
            layer=layer,
            mixer=mixer,
            post_attn_norm=pre_mlp_norm,
            mlp=mlp,
            o_proj=first_submodule(attn, O_PROJ_NAMES) if attn is not None else None,
            gate_module=gate_module,
            resid_mid=resid_mid,
        ))
    return layout
