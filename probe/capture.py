"""One context manager that installs every probe hook and removes all of them on exit.

    with Capture(model, layout) as cap:
        with cap.batch(input_ids, valid, seq_index):
            model(input_ids)
    cap.gates[3].mean()

Hooks read activations and fold them into reducers at once; no activation is kept. What is
hooked:
- gate logits:          output of the gate module (q_proj in the Qwen layouts)
- pre-gate output O:    the `probe` attention back-end (attention.py), with P[t, 0] from lse
- gated output:         input of o_proj
- M-Act sites:          attention branch output, the residual stream after attention (the
                        input of the norm before the MLP, or of the MLP in post-norm layers,
                        adapters.layout.residual_after_attention), MLP output, decoder layer output
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from . import attention
from .adapters import ModelLayout
from .reducers import THRESHOLDS, FirstTokenStats, GateStats, LossStats, MaxAbsStats, SparsityStats

SITES = ("attn_out", "resid_mid", "mlp_out", "resid_post")


@dataclass
class Batch:
    """Where each row of the current forward pass comes from."""

    input_ids: torch.Tensor          # (B, T)
    valid: torch.Tensor              # (B, T) bool: positions that count (real tokens, padding on
                                     # the right is False; so is a sliding window's context)
    seq_index: torch.Tensor          # (B,) index of each row in the dataset

    def __post_init__(self):
        self.all_valid = bool(self.valid.all())
        B, T = self.input_ids.shape
        pos = torch.arange(T, device=self.input_ids.device).expand(B, T)
        seq = self.seq_index[:, None].expand(B, T)
        self.pos, self.seq, self.tok = self.rows(pos), self.rows(seq), self.rows(self.input_ids)
        self.rest_valid = self.valid[:, 1:]
        self._where = {self.input_ids.device: (self.seq, self.pos, self.tok)}

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...) keeping valid positions only."""
        return x.reshape(-1, *x.shape[2:]) if self.all_valid else x[self.valid.to(x.device)]

    def rest_rows(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> valid rows at positions >= 1."""
        x = x[:, 1:]
        return x.reshape(-1, *x.shape[2:]) if self.all_valid else x[self.rest_valid.to(x.device)]

    def where(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(seq, pos, tok) of the valid rows, on `device` (cached: layers may sit on several GPUs)."""
        if device not in self._where:
            self._where[device] = (self.seq.to(device), self.pos.to(device), self.tok.to(device))
        return self._where[device]


def _first(output):
    return output[0] if isinstance(output, (tuple, list)) else output


class Capture:
    def __init__(self, model: nn.Module, layout: ModelLayout, *, top_k: int = 3, token_groups=None,
                 thresholds=THRESHOLDS):
        """thresholds: the sparsity thresholds, counted exactly as the pass goes (reducers.py)."""
        self.model, self.layout = model, layout
        H = layout.num_heads
        attn_layers = layout.attention_layers
        self.first_token = {i: FirstTokenStats(H) for i in attn_layers}
        self.sparsity = {i: SparsityStats(thresholds=thresholds) for i in attn_layers}
        self.gates = {i: GateStats(H) for i in attn_layers} if layout.gated else {}
        # Gate scores by token type (token_types.TokenGroups), fed from the same gate hook.
        self.token_groups = token_groups
        self.gates_by_token = ({i: token_groups.reducer(H) for i in attn_layers}
                               if layout.gated and token_groups is not None else {})
        self.massive = {(p.index, s): MaxAbsStats(top_k) for p in layout.layers for s in SITES}
        self.loss = LossStats()
        self._mixer_layer = {id(p.mixer): p.index for p in layout.layers}
        self._handles: list = []
        self._batch: Batch | None = None
        self._previous_impl = None

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
        if attention._observer is not None:
            raise RuntimeError("another probe Capture is already active")
        self._previous_impl = self.model.config._attn_implementation
        self.model.set_attn_implementation(attention.NAME)
        attention.set_observer(self)
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
                hook(p.o_proj.register_forward_pre_hook(reading(self._gated_output_hook(i))))
            if p.gate_module is not None:
                hook(p.gate_module.register_forward_hook(reading(self._gate_hook(i))))

    def _uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if attention._observer is self:
            attention.set_observer(None)
        if self._previous_impl is not None:
            self.model.set_attn_implementation(self._previous_impl)
            self._previous_impl = None

    @contextmanager
    def batch(self, input_ids: torch.Tensor, valid: torch.Tensor | None = None,
              seq_index: torch.Tensor | None = None):
        """Declare where the rows of the next forward pass come from."""
        B = input_ids.shape[0]
        valid = torch.ones_like(input_ids, dtype=torch.bool) if valid is None else valid.bool()
        seq_index = torch.arange(B, device=input_ids.device) if seq_index is None else seq_index
        self._batch = Batch(input_ids, valid.to(input_ids.device), seq_index.to(input_ids.device))
        try:
            yield self._batch
        finally:
            self._batch = None

    # -- hooks ---------------------------------------------------------------------------------
    def _massive(self, layer: int, site: str, h: torch.Tensor) -> None:
        b = self._batch
        if b is None or h.dim() != 3:
            return
        self.massive[(layer, site)].follow(h.device).update(b.rows(h), *b.where(h.device))

    def _site_output_hook(self, layer: int, site: str):
        def hook(module, args, output):
            self._massive(layer, site, _first(output))
        return hook

    def _site_input_hook(self, layer: int, site: str):
        def hook(module, args):
            self._massive(layer, site, args[0])
        return hook

    def _gate_hook(self, layer: int):
        L = self.layout

        def hook(module, args, output):
            b = self._batch
            if b is None:
                return
            scores = L.gate.scores(output, L.num_heads, L.num_kv_heads, L.head_dim)  # (B, T, H, Dg)
            first = scores[:, 0] if b.all_valid else scores[:, 0][b.valid[:, 0].to(scores.device)]
            self.gates[layer].follow(scores.device).update(first, b.rest_rows(scores))
            if self.gates_by_token:
                _, pos, tok = b.where(scores.device)
                self.gates_by_token[layer].follow(scores.device).update(
                    b.rows(scores), self.token_groups.membership(tok, pos))
        return hook

    def _gated_output_hook(self, layer: int):
        def hook(module, args):
            b = self._batch
            if b is not None:
                x = args[0] if b.all_valid else b.rows(args[0])
                self.sparsity[layer].follow(x.device).gated.update(x)     # |x| from the bits
        return hook

    @torch.no_grad()
    def on_attention(self, module, query, key, out, lse, mask, scale, softcap=None) -> None:
        """Called by the `probe` attention back-end. out (B, H, T, D), lse (B, H, T)."""
        b = self._batch
        layer = self._mixer_layer.get(id(module), getattr(module, "layer_idx", None))
        if b is None or layer not in self.first_token:
            return
        p0 = attention.first_key_probability(query, key, lse, mask, scale, softcap=softcap)  # (B, H, T)
        # A query counts only where its output row is finite: after an inf activation the CPU
        # kernel returns NaN rows for every query, some of them beside a finite lse.
        finite = None if bool(torch.isfinite(out).all()) else torch.isfinite(out).all(-1).all(1)  # (B, T)
        self.first_token[layer].follow(p0.device).update(p0, None if b.all_valid else b.valid.to(p0.device),
                                                         attention.uniform_first_key(mask, p0.shape[-1], p0.device),
                                                         finite=finite)
        # The histogram ignores layout, so without padding no (B, T) row selection is needed;
        # (B, T, H, D) is the kernels' memory order, so this view is contiguous: no copy.
        x = out.transpose(1, 2)
        x = x if b.all_valid else b.rows(x)
        self.sparsity[layer].follow(x.device).ungated.update(x)        # |x| from the bits

    @torch.no_grad()
    def observe_logits(self, logits: torch.Tensor) -> None:
        b = self._batch
        self.loss.follow(logits.device).update(logits, b.input_ids, b.valid)

    def reducers(self) -> list:
        """Every reducer, in an order that is the same in every process (for collectives)."""
        out = []
        for store in (self.first_token, self.sparsity, self.gates, self.gates_by_token, self.massive):
            out += [store[key] for key in sorted(store)]
        return out + [self.loss]

    def to(self, device) -> "Capture":
        """Move every reducer's state (for example to the CPU once a GPU pass is over)."""
        for r in self.reducers():
            r.to(device)
        return self
