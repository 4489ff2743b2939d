"""probe on TransformerLens 4.x: the hooks of a `TransformerBridge` that emit the pass's events.

    bridge = probe.capture.bridge.build_bridge("path/to/checkpoint")   # or TransformerBridge.boot_transformers
    analysis = probe.analyze(bridge, texts=["..."])           # source.BridgeSource

TransformerLens recomputes every softmax-attention layer as an explicit T x T pattern, so here
F-Attn is read straight from `hook_pattern[..., 0]`. The hooks (`run_with_hooks`) emit the same
events as the Hugging Face source (probe/core/events.py) and the same metrics fold them into their
reducers; no activation cache is kept. Hook points used, per layer L, and the events they give:

    blocks.L.attn.hook_q_gate      gate logits (B, T, H*D)        -> attn.hook_gate (sigmoid scores)
    blocks.L.attn.hook_pattern     attention (B, H, T, T)         -> attn.hook_first_key (key 0)
    blocks.L.attn.hook_v           values (B, T, KV*D)            -> with the pattern: attn.hook_sdpa
    blocks.L.attn.hook_z           o_proj input (after the gate)  -> attn.hook_z
    blocks.L.hook_attn_out / linear_attn.hook_out, hook_resid_mid, hook_mlp_out, hook_resid_post
                                                                  -> the four M-Act site events

The paper's official checkpoints pack q_proj per KV head; TransformerLens reads it per query
head and computes wrong logits there unless the rows are reordered first
(`reorder_official_q_proj`, done by `build_bridge`). A bridge over the raw layout is refused.

Options of `probe.analyze` on a bridge (source.BridgeSource; tests/capture/test_bridge.py checks every
field of AnalysisOptions):
  honoured   data, texts, tokenizer, name, seq_len, batch_size, bos, per_document,
             max_sequences, max_length, stride, on_long (sliding windows, probe/data/sequences.py), text_field,
             thresholds, display_len, progress, seed, command, token_groups
             (gates_by_token_type, fed from hook_q_gate), resamples
  checked    dtype, device: when given, must name what the bridge already holds (it is not
             converted or moved here; pipeline.check_model_as_is); anything else is refused
  refused    the options of source.HF_ONLY (gate, device_map, interventions, exact_control,
             anatomy, partial / resume / checkpoint_seconds, rope_scaling, past_positions,
             loss_by_position): they need the Hugging Face path (pass the checkpoint path or
             the HF model instead)
"""
from __future__ import annotations

import warnings
from pathlib import Path

import torch

from .attention import expand_kv
from .bus import Pass
from ..core.events import FIRST_KEY, GATE, SDPA, SITE_EVENTS, Z
from ..core.errors import ProbeError, flag
from ..families.gates import ACTIVATIONS
from ..load.loader import LoadedModel, describe, load, text_config
from ..families.official import checkpoint_gate, granularity, is_official, is_reordered
from ..load.reorder import reorder_official_q_proj
from ..core.options import AnalysisOptions

__all__ = ["BridgeCapture", "build_bridge", "check_bridge", "hook_names", "is_bridge", "reorder_official_q_proj"]

SITE_HOOKS = {
    "attn_out": "blocks.{i}.hook_attn_out",
    "resid_mid": "blocks.{i}.hook_resid_mid",
    "mlp_out": "blocks.{i}.hook_mlp_out",
    "resid_post": "blocks.{i}.hook_resid_post",
}
# Hybrid models: the token mixer of a linear-attention block has no hook_attn_out alias.
LINEAR_ATTN_OUT = "blocks.{i}.linear_attn.hook_out"


def is_bridge(obj) -> bool:
    """A TransformerLens `TransformerBridge` (checked without importing transformer_lens)."""
    return (type(obj).__module__.startswith("transformer_lens.") and hasattr(obj, "run_with_hooks")
            and hasattr(obj, "original_model"))


# -- building and checking bridges ------------------------------------------------------------

def build_bridge(model, *, tokenizer=None):
    """A TransformerBridge around a checkpoint directory, a `probe.load` result or a HF model.

    Offline: no hub access and no tokenizer files needed. The paper's official checkpoints get
    their q_proj rows reordered first (in place) and the Qwen3 adapter with the per-head gate.
    The bridge takes the model over (TransformerLens swaps its submodules): to also run probe's
    Hugging Face path, load a second copy.
    """
    from transformer_lens.model_bridge.sources._bridge_builder import (
        build_bridge_config_from_hf,
        build_bridge_from_module,
    )

    if isinstance(model, (str, Path)):
        model = load(model)
    if isinstance(model, LoadedModel):
        tokenizer = tokenizer if tokenizer is not None else model.tokenizer
        model = model.model
    if is_bridge(model):
        raise ProbeError("build_bridge got a TransformerBridge already; pass it to probe.analyze as it is")
    config = model.config
    if is_official(text_config(config)):
        reorder_official_q_proj(model)
        tl_config = build_bridge_config_from_hf(config, "Qwen3ForCausalLM", "external",
                                                next(model.parameters()).dtype)
        tl_config.gated_q_proj = True     # read q_proj per head as [query | gate], as for Qwen3-Next
        return build_bridge_from_module(model, "Qwen3ForCausalLM", tl_config=tl_config, tokenizer=tokenizer)
    archs = getattr(config, "architectures", None) or [type(model).__name__]
    return build_bridge_from_module(model, archs[0], hf_config=config, tokenizer=tokenizer)


def check_bridge(bridge) -> None:
    """Refuse, in one line, a bridge whose numbers would not be the model's."""
    if not is_bridge(bridge):
        raise ProbeError(f"expected a TransformerLens TransformerBridge, got {type(bridge).__name__}")
    config = text_config(bridge.original_model.config)
    if is_official(config) and not is_reordered(bridge.original_model):
        heads, kv = config.num_attention_heads, config.num_key_value_heads
        headwise = granularity(config) == "headwise"
        if headwise or heads != kv:       # elementwise with G = 1: both layouts are the same rows
            gran = "headwise" if headwise else "elementwise"
            raise ProbeError(
                f"this TransformerBridge wraps the paper's official {gran} gate layout (q_proj grouped "
                f"per KV head, {heads} query / {kv} KV heads), which TransformerLens misreads (wrong "
                "logits); call probe.capture.bridge.reorder_official_q_proj(model) before building the bridge, "
                "or build it with probe.capture.bridge.build_bridge(checkpoint)")
    if getattr(bridge, "compatibility_mode", False):
        warnings.warn("the bridge is in compatibility mode: with processed weights (folded norms, "
                      "centred residual stream) M-Act is not the model's own activation")


def bridge_layout(bridge):
    """probe's ModelLayout for the bridged HF model, and the gate width to read per head."""
    hf = bridge.original_model
    layout = describe(hf)
    gate_dim = layout.head_dim
    if is_reordered(hf):                  # report the checkpoint's own layout, as the HF path does
        layout.gate = checkpoint_gate(text_config(hf.config))
        gate_dim = layout.gate.gate_dim(layout.head_dim)   # headwise: 1 of the D copies of one logit
    if layout.gate is not None and layout.gate.activation != "sigmoid":
        raise ProbeError(f"TransformerLens applies a sigmoid gate; this model's gate is {layout.gate.activation}")
    return layout, gate_dim


def hook_names(bridge) -> list[str]:
    """The hook points probe reads on this bridge, in the order it registers them."""
    check_bridge(bridge)
    layout, gate_dim = bridge_layout(bridge)
    return [name for name, _ in BridgeCapture(bridge, layout, gate_dim=gate_dim).fwd_hooks]


# -- capture ----------------------------------------------------------------------------------

class BridgeCapture(Pass):
    """The TransformerLens source: a bridge's hook points emit the pass's events (events.py).

    Nothing is installed on the model: `forward(ids)` passes the hooks to `run_with_hooks`,
    which removes them when the call returns (also on an exception).
    """

    def __init__(self, bridge, layout, options: AnalysisOptions | None = None, *, gate_dim: int | None = None,
                 token_groups=None, sequences: int | None = None):
        """options: the AnalysisOptions of the pass, whole (default every field's default); the
        options this source refuses (source.HF_ONLY) are never set here."""
        o = AnalysisOptions() if options is None else options
        super().__init__(layout, o, sequences=sequences, token_groups=token_groups)
        self.bridge = bridge
        self.gate_dim = layout.head_dim if gate_dim is None else gate_dim
        self._values: dict[int, torch.Tensor] = {}      # one layer's V, until its pattern fires
        self.fwd_hooks = self._hooks()

    def __enter__(self) -> "BridgeCapture":            # hooks live only inside run_with_hooks
        return self

    def __exit__(self, *exc) -> None:
        self._values.clear()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """One forward pass through the bridge with every probe hook; returns the logits."""
        try:
            return self.bridge.run_with_hooks(input_ids, fwd_hooks=self.fwd_hooks, return_type="logits")
        finally:
            self._values.clear()

    # -- which hook points --------------------------------------------------------------------
    def _hooks(self) -> list[tuple[str, object]]:
        names = self.bridge.hook_dict
        hooks, missing = [], []

        def want(name, fn, required=True):
            if name in names:
                hooks.append((name, fn))
            elif required:
                missing.append(name)

        for p in self.layout.layers:
            i = p.index
            for site, pattern in SITE_HOOKS.items():
                name = pattern.format(i=i)
                if site == "attn_out" and name not in names and p.layer_type == "linear_attention":
                    name = LINEAR_ATTN_OUT.format(i=i)
                want(name, self._emitter(SITE_EVENTS[site], i), required=site == "resid_post")
            if p.layer_type != "attention":
                continue
            attn = f"blocks.{i}.attn."
            want(attn + "hook_v", self._value_hook(i))
            want(attn + "hook_pattern", self._pattern_hook(i))
            want(attn + "hook_z", self._emitter(Z, i))
            if self.layout.gated:
                want(attn + "hook_q_gate", self._gate_hook(i))
        if missing:
            raise ProbeError(f"this TransformerBridge has no hook point {missing[0]} "
                             f"({len(missing)} missing); probe needs hook_pattern, hook_v, hook_z, "
                             "hook_resid_post and, for gated models, hook_q_gate")
        return hooks

    # -- hooks: fn(activation, hook) -> None leaves the activation as it is ---------------------
    def _emitter(self, event: str, layer: int):
        def hook(x, hook):
            self.emit(event, layer, x)
        return hook

    def _gate_hook(self, layer: int):
        L = self.layout

        def hook(x, hook):
            if self._batch is None:
                return
            logits = x.reshape(*x.shape[:2], L.num_heads, L.head_dim)[..., : self.gate_dim]
            self.emit(GATE, layer, ACTIVATIONS[L.gate.activation](logits.float().contiguous()))   # (B, T, H, Dg)
        return hook

    def _value_hook(self, layer: int):
        def hook(x, hook):
            self._values[layer] = x
        return hook

    def _pattern_hook(self, layer: int):
        L = self.layout

        def hook(pattern, hook):                                                  # (B, H, T, S)
            if self._batch is None:
                return
            self.emit(FIRST_KEY, layer, pattern[..., 0])
            v = self._values.pop(layer, None)
            if v is None:
                return
            B, T = v.shape[:2]
            v = v.reshape(B, T, -1, L.head_dim).transpose(1, 2)                   # (B, KV, T, D)
            out = torch.matmul(pattern, expand_kv(v, pattern.shape[1]))           # (B, H, T, D) pre-gate
            self.emit(SDPA, layer, out.transpose(1, 2))                           # (B, T, H, D)
        return hook

    def check_fired(self) -> None:
        """After the pass: every hook probe relies on must have seen data."""
        for layer, stats in self.first_token.items():
            if int(stats.n_all) == 0:
                raise ProbeError(f"blocks.{layer}.attn.hook_pattern never fired; this bridge does not "
                                 "expose its attention pattern")
        for layer, stats in self.gates.items():
            if int(stats.count.sum()) == 0:
                raise ProbeError(f"blocks.{layer}.attn.hook_q_gate never fired; the bridge does not apply "
                                 "the gate from q_proj (processed weights, or built without gated_q_proj)")
