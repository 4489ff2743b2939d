"""The events of one pass: their names and what each carries (probe/capture/bus.py delivers them).

A source turns a model's forward pass into these events, per decoder layer L (names in the
TransformerLens style; `blocks.L.` is implied by the layer argument):

    attn.hook_gate        gate scores, after the activation          (B, T, H, Dg)
    attn.hook_first_key   attention probability on key 0, P[t, 0]    (B, H, T)
                          extra: uniform (B|1, T) or None, what uniform attention over each
                          query's visible keys puts on key 0 (None: plain causal, 1 / (t + 1));
                          finite (B, H, T) or None, where each head's attention output row is finite
    attn.hook_sdpa        pre-gate attention output O                (B, T, H, D)
    attn.hook_attention   the attention call itself: query           (B, H, T, D)
                          extra: key, value (B, KV, S, D) post-RoPE; out (B, H, T, D) pre-gate;
                          lse (B, H, T) float32, the kernel's log-sum-exp (gpt-oss: with the
                          per-head sink logit in it); mask None / SlidingWindow / (B|1, 1, T, S);
                          scale; softcap (Gemma 2) or None. Emitted only when a metric listens
                          (sink anatomy): nothing is computed for it
    attn.hook_z           the input of o_proj (after the gate)       (B, T, H * D)
    hook_attn_out, hook_resid_mid, hook_mlp_out, hook_resid_post
                          the four M-Act sites                       (B, T, C)
    hook_logits           the model's logits (layer None)            (B, T, V)
    linear_attn.hook_gdn  a Gated DeltaNet layer's kernel output o     (B, T, Hv, Dv)
                          extra: call, its kernel inputs and outputs (capture/gdn.py GDNCall);
                          emitted only when a metric listens (--gdn)

Sources: capture.Capture (Hugging Face forward hooks, and the `probe` attention back-end,
which gives P[t, 0] from the kernel's log-sum-exp: no T x T matrix) and bridge.BridgeCapture
(a TransformerLens bridge's own hook points). Metrics (probe/metrics/) subscribe with
`Pass.on(event, fn)` (probe/capture/bus.py); fn(layer, x, batch, **extra) folds x into reducers and
keeps nothing.

This module holds names only and imports nothing: the metrics import it, and the bus, which
builds the metrics, imports both (no circle).
"""
from __future__ import annotations

GATE = "attn.hook_gate"
FIRST_KEY = "attn.hook_first_key"
SDPA = "attn.hook_sdpa"
ATTENTION = "attn.hook_attention"
Z = "attn.hook_z"
SITES = ("attn_out", "resid_mid", "mlp_out", "resid_post")      # M-Act sites, paper Figure 6
SITE_EVENTS = {site: f"hook_{site}" for site in SITES}
LOGITS = "hook_logits"
GDN = "linear_attn.hook_gdn"
EVENTS = (GATE, FIRST_KEY, SDPA, ATTENTION, Z, *SITE_EVENTS.values(), LOGITS, GDN)
