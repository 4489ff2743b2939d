"""The Hugging Face source: forward hooks and the `probe` attention back-end emit the pass's
events (probe/core/events.py), and every hook is removed on exit.

    with Capture(model, layout) as cap:
        with cap.batch(input_ids, valid, seq_index):
            model(input_ids)
    cap.gates[3].mean()

Hooks read activations and the metrics fold them into reducers at once; no activation is
kept. Where each event comes from:
- attn.hook_gate:       output of the gate module (q_proj in the Qwen layouts), through the
                        layout's gate activation
- attn.hook_first_key:  the `probe` attention back-end (attention.py): P[t, 0] from the lse
- attn.hook_sdpa:       the same back-end's output (pre-gate O)
- attn.hook_attention:  the same back-end's call (query, key, value, out, lse, mask, ...), only
                        when a metric listens (--anatomy)
- attn.hook_z:          input of o_proj
- linear_attn.hook_gdn: Gated DeltaNet layers' projections, output norm and out_proj (gdn.py),
                        only when a metric listens (--gdn)
- hook_attn_out ...:    attention branch output, the residual stream after attention (the
                        input of the norm before the MLP, or of the MLP in post-norm layers,
                        adapters.layout.residual_after_attention), MLP output, decoder layer output
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.modules import module as module_hooks

from . import attention, gdn
from ..families.layout import ModelLayout
from .bus import Pass
from ..core.events import ATTENTION, FIRST_KEY, GATE, GDN, SDPA, SITE_EVENTS, SITES, Z  # noqa: F401  (SITES: re-exported)
from ..core.options import AnalysisOptions
from ..metrics.anatomy.received import RECEIVED
from ..metrics import kernels
from ..metrics.bins import BINNED
from ..metrics.head_norms.reduce import NORMS


def _first(output):
    return output[0] if isinstance(output, (tuple, list)) else output


# What an ungated layer's o_proj input reads from the attention output's event (Pass.emit keep):
# per batch row counts of |x| and per-head norms, the same for O (B, T, H, D) and z (B, T, H * D).
CARRIED = (BINNED, NORMS)


def _total(x: torch.Tensor) -> float:
    """x's elements summed in float64 (no overflow of float16 / bfloat16 sums; a NaN or inf
    reaches it): compiled where x is contiguous float32 on the CPU (metrics/kernels.py), else
    torch's sum. Either way the same elements in the same memory give the same sum, bit for bit."""
    if kernels.usable(x) and x.is_contiguous():
        return kernels.float64_sum(x)
    return float(x.sum(dtype=torch.float64))


def _same_values(z: torch.Tensor, o: torch.Tensor, total: float) -> bool:
    """Whether the o_proj input z holds the attention output o's values, as they were when o was
    emitted (total: o's float64 sum then): the same memory, read in the same order, and the same
    sum now, bit for bit. The sum sees in-place changes made by the model's own code (a scaling
    of the output); hooks on o_proj that run before probe's are ruled out apart
    (Capture._reads_first), since a permutation keeps the sum."""
    return (z.is_contiguous() and z.dtype == o.dtype and z.device == o.device and z.numel() == o.numel()
            and z.data_ptr() == o.data_ptr() and _total(z.view(o.shape)) == total)


class Capture(Pass):
    def __init__(self, model: nn.Module, layout: ModelLayout, options: AnalysisOptions | None = None, *,
                 token_groups=None, vocab_size: int | None = None, sequences: int | None = None,
                 token_ids=None, **overrides):
        """options: the AnalysisOptions of the pass, whole (its thresholds: the sparsity sweep,
        counted exactly as the pass goes, metrics/sparsity/; anatomy: also sink anatomy,
        metrics/anatomy/; loss_by_position), default every field's default, with `overrides`
        of its fields (Capture(model, layout, anatomy=True, vocab_size=V)), checked.
        token_groups: the TokenGroups table of gates_by_token_type (pipeline.token_group_table);
        vocab_size: sink anatomy's token table's size; sequences: the dataset's row count;
        token_ids: every token id of the data, when known (the token tables then have a row per
        id of the data instead of one per id of the vocabulary)."""
        o = AnalysisOptions.of(options, **overrides)
        super().__init__(layout, o, vocab_size=vocab_size, sequences=sequences, token_groups=token_groups,
                         token_ids=token_ids)
        self.model = model
        self._mixer_layer = {id(p.mixer): p.index for p in layout.layers}
        self._handles: list = []
        self._observing = None
        self._attention_output = None   # (layer, O (B, T, H, D), its float64 sum): the last SDPA
                                        # event of an ungated layer
        self._ungated = {p.index for p in layout.layers if p.gate_module is None and p.o_proj is not None}
        self._z_hooks: dict[int, int] = {}      # id(o_proj) -> this capture's pre-hook's handle id
        self.display = None         # a display.DisplayPatterns the source sets: read off this pass

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "Capture":
        try:
            self._install()
        except BaseException:
            self._uninstall()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._uninstall()

    def _install(self) -> None:
        # The back-end tells this capture (and no other) of this model's attention calls.
        observing = attention.observing(self.model, self)
        observing.__enter__()
        self._observing = observing
        hook = self._handles.append
        # Hooks only read: under no_grad, so that a forward with autograd on (a notebook user
        # who forgot inference_mode) does not chain every batch's graph into the reducers.
        reading = torch.no_grad()
        for p in self.layout.layers:
            i = p.index
            hook(p.mixer.register_forward_hook(reading(self._site_output_hook(i, "attn_out"))))
            if p.resid_mid is not None:
                hook(p.resid_mid.register_forward_pre_hook(reading(self._site_input_hook(i, "resid_mid"))))
            if p.mlp is not None:
                hook(p.mlp.register_forward_hook(reading(self._site_output_hook(i, "mlp_out"))))
            hook(p.layer.register_forward_hook(reading(self._site_output_hook(i, "resid_post"))))
            if p.o_proj is not None:
                handle = p.o_proj.register_forward_pre_hook(reading(self._gated_output_hook(i)))
                self._z_hooks[id(p.o_proj)] = handle.id
                hook(handle)
            if p.gate_module is not None:
                hook(p.gate_module.register_forward_hook(reading(self._gate_hook(i))))
        if self.wants(GDN):                   # Gated DeltaNet layers (--gdn): capture/gdn.py
            gdn.install(self, hook, reading)

    def _uninstall(self) -> None:
        self._attention_output = None
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._observing is not None:
            observing, self._observing = self._observing, None
            observing.__exit__(None, None, None)

    # -- hooks ---------------------------------------------------------------------------------
    def _site_output_hook(self, layer: int, site: str):
        event = SITE_EVENTS[site]

        def hook(module, args, output):
            self.emit(event, layer, _first(output))
        return hook

    def _site_input_hook(self, layer: int, site: str):
        event = SITE_EVENTS[site]

        def hook(module, args):
            self.emit(event, layer, args[0])
        return hook

    def _gate_hook(self, layer: int):
        L = self.layout

        def hook(module, args, output):
            if self._batch is not None and self.wants(GATE):
                self.emit(GATE, layer, L.gate.scores(output, L.num_heads, L.num_kv_heads, L.head_dim))  # (B, T, H, Dg)
        return hook

    def _gated_output_hook(self, layer: int):
        def hook(module, args):
            z = args[0]
            seen, self._attention_output = self._attention_output, None
            if (seen is not None and seen[0] == layer and self._reads_first(module)
                    and _same_values(z, seen[1], seen[2])):
                self.emit(Z, layer, z, same_as=seen[1])
            else:
                self.forget_kept()
                self.emit(Z, layer, z)
        return hook

    def _reads_first(self, o_proj) -> bool:
        """Whether this capture's hook is the first code to see o_proj's input: no forward
        pre-hook on o_proj before it and no global one (such a hook may change the input in
        place, for example patch heads between sequences, which leaves its sum as it was)."""
        hooks = getattr(o_proj, "_forward_pre_hooks", None)
        first = next(iter(hooks), None) if hooks else None
        return first == self._z_hooks.get(id(o_proj)) and not module_hooks._global_forward_pre_hooks

    def _observed_layer(self, module) -> int | None:
        """The layer of an attention module whose calls feed this pass's metrics now, else None."""
        layer = self._mixer_layer.get(id(module), getattr(module, "layer_idx", None))
        return layer if self._batch is not None and layer in self.first_token else None

    def received_wanted(self, module) -> dict | None:
        """Asked by the `probe` back-end before it computes the attention of `module`: when sink
        anatomy will read the attention every key of this call receives, the valid queries of the
        batch ({"valid": (B, T) bool, or None for all}), so that the back-end makes those column
        sums with the output (probe/metrics/anatomy/fused.py) instead of the metric making them
        again after it; None when no metric reads them."""
        if self._observed_layer(module) is None or not self.wants(ATTENTION):
            return None
        return {"valid": None if self._batch.all_valid else self._batch.valid}

    @torch.no_grad()
    def on_attention(self, module, query, key, out, lse, mask, scale, softcap=None, value=None,
                     received=None) -> None:
        """Called by the `probe` attention back-end. query (B, H, T, D), key / value (B, KV, S, D),
        out (B, H, T, D), lse (B, H, T); received: the call's ReceivedAttention when the back-end
        made it with the output (received_wanted)."""
        layer = self._observed_layer(module)
        if layer is None:
            return
        if self.display is not None:
            self.display.observe(layer, self._batch, query, key, lse, mask, scale, softcap)
        p0 = attention.first_key_probability(query, key, lse, mask, scale, softcap=softcap)  # (B, H, T)
        # A query counts only where its output row is finite: after an inf activation the CPU
        # kernel returns NaN rows for every query, some of them beside a finite lse.
        # One sum answers "all finite" (a NaN or inf reaches it); only a sum that is not finite
        # (those, or finite values overflowing it) pays for the element-wise check.
        o = out.transpose(1, 2)               # (B, T, H, D): the kernels' memory order, a view
        total = _total(o)
        finite = None if math.isfinite(total) else torch.isfinite(out).all(-1)  # (B, H, T)
        self.emit(FIRST_KEY, layer, p0, uniform=attention.uniform_first_key(mask, p0.shape[-1], p0.device),
                  finite=finite)
        # Where the layer has no gate, o_proj receives O itself, reshaped: the Z event then reads
        # what the metrics derived from O (its bins, its head norms) instead of deriving it again.
        carry = layer in self._ungated and finite is None and o.is_contiguous() and self.wants(Z)
        self._attention_output = (layer, o, total) if carry else None
        self.emit(SDPA, layer, o, keep=CARRIED if carry else ())
        if self.wants(ATTENTION):             # sink anatomy only: no work for it otherwise
            if received is not None:          # what shared_received_attention would make, made already
                self._batch.provide(RECEIVED, query, received)
            self.emit(ATTENTION, layer, query, key=key, value=value, out=out, lse=lse, mask=mask,
                      scale=scale, softcap=softcap)
