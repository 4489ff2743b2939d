"""The Hugging Face hooks of Gated DeltaNet layers: one `linear_attn.hook_gdn` event per layer
and forward pass, carrying what the layer's kernel was given and what it returned.

Per GDN layer (probe/families/gdn.py finds the parts), forward hooks keep the projections'
outputs (in_proj_qkvz + in_proj_ba on Qwen3-Next, in_proj_qkv + in_proj_b + in_proj_a on
Qwen3.5, q/k/v/b/a_proj on OLMo-Hybrid), the output norm's call (its inputs: the kernel output o and the gate logits z; its
output y) and out_proj's output. When out_proj has run, the layer's kernel inputs are formed
from them as the module forms them (transformers' Qwen3NextGatedDeltaNet.forward): the causal
depthwise conv1d + activation over [q | k | v], beta = sigmoid(b) (doubled where the layer
allows negative eigenvalues), g = -exp(A_log) *
softplus(a + dt_bias), q and k L2-normalised in float32 (eps 1e-6) and q scaled by 1/sqrt(d_k),
q and k repeated to the value heads. The event carries them; nothing is kept after it.
q, k and v are formed only when a metric reads them (the per-key terms, under --anatomy): the
conv1d they need is about a third of what --gdn alone would add to the forward (docs/gdn.md,
"Cost"), and beta, g, z and the outputs need none of it.

q, k and v are re-formed here rather than read inside the kernel, because the kernel is a free
function the module calls (and may be flash-linear-attention's): the metric checks every pass
that its per-key terms add up to the kernel's own output o, which these hooks read from the
model (metrics/gdn/).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..families.gdn import FUSED, SPLIT, GDNParts, gdn_parts
from ..core.events import GDN


class GDNCall:
    """One GDN layer's kernel inputs and outputs on one forward pass (value heads Hv).

    q, k and v are formed on first access, from the projections the hooks kept (`_form`), and
    then kept: valid only while the event is being handled, as every tensor of an event."""

    def __init__(self, *, beta, g, z, o, y, out, norm_weight, eps, out_weight, out_bias, form_qkv):
        self.beta = beta                # (B, T, Hv) float32: sigmoid(b) (x 2 with OLMo-Hybrid's negative eigenvalues)
        self.g = g                      # (B, T, Hv) float32: the log decay
        self.z = z                      # (B, T, Hv, dv) the output-gate logits, the model's dtype
        self.o = o                      # (B, T, Hv, dv) the kernel's output (the norm's input)
        self.y = y                      # (B, T, Hv, dv) the norm's output (out_proj's input)
        self.out = out                  # (B, T, C) out_proj's output (the layer's attention branch)
        self.norm_weight = norm_weight  # (dv,)
        self.eps = eps
        self.out_weight = out_weight    # (C, Hv * dv)
        self.out_bias = out_bias        # (C,) or None
        self._form_qkv = form_qkv
        self._qkv = None

    def _kernel_qkv(self) -> tuple:
        if self._qkv is None:
            self._qkv = self._form_qkv()
        return self._qkv

    @property
    def q(self) -> torch.Tensor:
        """(B, T, Hv, dk) float32, L2-normalised and scaled by 1/sqrt(dk)."""
        return self._kernel_qkv()[0]

    @property
    def k(self) -> torch.Tensor:
        """(B, T, Hv, dk) float32, L2-normalised."""
        return self._kernel_qkv()[1]

    @property
    def v(self) -> torch.Tensor:
        """(B, T, Hv, dv) float32."""
        return self._kernel_qkv()[2]


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """transformers' l2norm (the kernel's, in float32): x * rsqrt(sum(x^2) + eps)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def causal_conv(mixed: torch.Tensor, conv: torch.nn.Conv1d, activation: str) -> torch.Tensor:
    """(B, T, C) -> (B, T, C): the depthwise causal conv1d and its activation, as transformers'
    torch `causal_conv1d_fn`."""
    from transformers.activations import ACT2FN

    T = mixed.shape[1]
    w = conv.weight
    x = F.conv1d(mixed.transpose(1, 2).to(w.dtype), w, conv.bias, padding=w.shape[-1] - 1,
                 groups=w.shape[0])[:, :, :T]
    return ACT2FN[activation](x).to(mixed.dtype).transpose(1, 2)


def _split(parts: GDNParts, kept: dict) -> tuple:
    """(pieces, b, a): [q | k | v] before the conv as a tuple of (B, T, n) tensors to be joined on
    the last dimension, and the beta and decay logits (B, T, Hv), from the projections' outputs."""
    if parts.projection == FUSED:
        q, k, v, _, b, a = parts.mixer.fix_query_key_value_ordering(kept["in_proj_qkvz"], kept["in_proj_ba"])
        return tuple(x.reshape(*x.shape[:2], -1) for x in (q, k, v)), b, a
    if parts.projection == SPLIT:
        return (kept["q_proj"], kept["k_proj"], kept["v_proj"]), kept["b_proj"], kept["a_proj"]
    return (kept["in_proj_qkv"],), kept["in_proj_b"], kept["in_proj_a"]


def beta_and_decay(parts: GDNParts, b: torch.Tensor, a: torch.Tensor) -> tuple:
    """(beta, g), each (B, T, Hv) float32, as the module forms them from b and a."""
    m = parts.mixer
    B, T = b.shape[:2]
    beta = b.reshape(B, T, parts.num_v_heads).sigmoid().float() * parts.beta_scale
    g = -m.A_log.float().exp() * F.softplus(a.reshape(B, T, parts.num_v_heads).float() + m.dt_bias)
    return beta, g


def kernel_qkv(parts: GDNParts, pieces: tuple) -> tuple:
    """(q, k, v) as the kernel receives them, from [q | k | v] before the conv (`_split`)."""
    nk, nv, dk, dv = parts.num_k_heads, parts.num_v_heads, parts.head_k_dim, parts.head_v_dim
    mixed = pieces[0] if len(pieces) == 1 else torch.cat(pieces, -1)       # (B, T, 2 nk dk + nv dv)
    B, T = mixed.shape[:2]
    mixed = causal_conv(mixed, parts.mixer.conv1d, parts.activation)
    q, k, v = torch.split(mixed, [nk * dk, nk * dk, nv * dv], dim=-1)
    q, k = (x.reshape(B, T, nk, dk).float() for x in (q, k))
    v = v.reshape(B, T, nv, dv).float()
    q, k = l2norm(q), l2norm(k)
    q = q * dk ** -0.5
    if parts.group > 1:
        q, k = (x.repeat_interleave(parts.group, dim=2) for x in (q, k))
    return q, k, v


def install(cap, add, reading) -> dict[int, str]:
    """Hooks on every GDN layer of cap.layout that probe can read, each handle passed to `add`;
    `reading` wraps each hook (no_grad). Returns layer -> why, for the layers it cannot read."""
    refused = {}
    for p in cap.layout.layers:
        if p.layer_type != "linear_attention":
            continue
        parts = gdn_parts(p.mixer)
        if isinstance(parts, str):
            refused[p.index] = parts
            continue
        kept: dict = {}
        for name in parts.projections:
            add(getattr(p.mixer, name).register_forward_hook(reading(_keep(kept, name))))
        add(parts.norm.register_forward_hook(reading(_keep_norm(kept))))
        add(parts.out.register_forward_hook(reading(_emit(cap, p.index, parts, kept))))
    return refused


def _keep(kept: dict, name: str):
    def hook(module, args, output):
        kept[name] = output
    return hook


def _keep_norm(kept: dict):
    def hook(module, args, output):
        kept["o"], kept["z"], kept["y"] = args[0], args[1], output
    return hook


def _emit(cap, layer: int, parts: GDNParts, kept: dict):
    def hook(module, args, output):
        try:
            if cap._batch is None or "o" not in kept:
                return
            out = output[0] if isinstance(output, (tuple, list)) else output
            B, T = out.shape[:2]
            if any(kept[n].shape[:2] != (B, T) for n in parts.projections):
                return                                    # a cached decode step: not a pass of probe's
            pieces, b, a = _split(parts, kept)
            beta, g = beta_and_decay(parts, b, a)
            Hv, dv = parts.num_v_heads, parts.head_v_dim
            norm = parts.norm
            call = GDNCall(beta=beta, g=g, z=kept["z"].reshape(B, T, Hv, dv),
                           o=kept["o"].reshape(B, T, Hv, dv), y=kept["y"].reshape(B, T, Hv, dv), out=out,
                           norm_weight=norm.weight,
                           eps=float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))),
                           out_weight=module.weight, out_bias=module.bias,
                           form_qkv=lambda: kernel_qkv(parts, pieces))
            cap.emit(GDN, layer, call.o, call=call)
        finally:
            kept.clear()
    return hook
