"""Independent computations that probe's numbers are checked against.

None of this uses probe's own capture code: eager softmax attention from transformers
(`output_attentions=True`), SDPA outputs recorded by a separate attention back-end, and plain
forward hooks that keep whole tensors.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

RECORD = "probe_test_record"
_recorded: dict = {}


def _record_attention(module, query, key, value, attention_mask, **kwargs):
    out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    _recorded[module.layer_idx] = out.detach().clone()          # (B, T, H, D), pre-gate
    return out, weights


AttentionInterface.register(RECORD, _record_attention)
AttentionMaskInterface.register(RECORD, sdpa_mask)


def eager_attentions(model, input_ids, attention_mask=None):
    """Per-layer eager softmax attention (B, H, T, T), dict layer -> tensor."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids=input_ids, attention_mask=attention_mask, output_attentions=True,
                        use_cache=False)
    finally:
        model.set_attn_implementation(previous)
    return out


@contextmanager
def recorded(model, layout):
    """Record, for every attention layer: SDPA output, gate-module output, o_proj input,
    and for every layer: the four M-Act sites, all as full tensors."""
    _recorded.clear()
    rec = {"sdpa": _recorded, "gate_out": {}, "o_in": {}, "sites": {}}
    handles = []
    previous = model.config._attn_implementation
    model.set_attn_implementation(RECORD)

    def keep(store, key, take_input=False):
        def hook(module, args, output=None):
            x = args[0] if take_input else (output[0] if isinstance(output, tuple) else output)
            store[key] = x.detach().clone()
        return hook

    for p in layout.layers:
        i = p.index
        handles.append(p.mixer.register_forward_hook(keep(rec["sites"], (i, "attn_out"))))
        handles.append(p.post_attn_norm.register_forward_pre_hook(keep(rec["sites"], (i, "resid_mid"), True)))
        handles.append(p.mlp.register_forward_hook(keep(rec["sites"], (i, "mlp_out"))))
        handles.append(p.layer.register_forward_hook(keep(rec["sites"], (i, "resid_post"))))
        if p.o_proj is not None:
            handles.append(p.o_proj.register_forward_pre_hook(keep(rec["o_in"], i, True)))
        if p.gate_module is not None:
            handles.append(p.gate_module.register_forward_hook(keep(rec["gate_out"], i)))
    try:
        yield rec
    finally:
        for h in handles:
            h.remove()
        model.set_attn_implementation(previous)
