"""Key ablations (probe/families/key_masks.py) inside the `probe` attention back-end.

    with ablating({attn_module: KeyAblation(window=256, sinks=4)}):
        model(input_ids=ids)

The ablation is a mask on the same kernel that measures F-Attn (attention.py), so masked and
measured attention are one code path: a block of queries at a time, each block one call of the
kernel on the keys it may see (the sinks, then the band) with a (block x keys) mask for that
block alone. Memory O(block x (sinks + window + block)) with a window, O(block x T) without one
(key 0 hidden): linear in T, never a T x T mask. An ablation that masks nothing on this sequence
(a window >= T, no hidden key) calls the kernel exactly as the unablated pass does: the same
numbers, bit for bit.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager

import torch

from ..core.errors import ProbeError
from ..families.key_masks import KeyAblation

# id(attention module) -> its KeyAblation, for the modules of an `ablating` block only.
_ABLATIONS: contextvars.ContextVar[dict] = contextvars.ContextVar("probe_key_ablations", default={})
BLOCK = 512          # queries per block (at T = 8192 without a window: a 512 x 8192 mask, 16 MB)


@contextmanager
def ablating(modules: dict):
    """Ablate the attention of each module {module: KeyAblation} for the block's duration."""
    current = _ABLATIONS.get()
    _ABLATIONS.set({**current, **{id(m): a for m, a in modules.items()}})
    try:
        yield
    finally:
        ids = {id(m) for m in modules}
        _ABLATIONS.set({k: v for k, v in _ABLATIONS.get().items() if k not in ids})


def ablation_of(module) -> KeyAblation | None:
    return _ABLATIONS.get().get(id(module))


def check_layer(ablation: KeyAblation, mask, window: int | None, T: int, layer) -> None:
    """Refuse a layer the ablation cannot be laid over exactly: one with its own sliding window
    (it already hides key 0 from queries past it) or a materialised mask (padding, packing)."""
    if window is not None and window < T:
        raise ProbeError(f"layer {layer} is a sliding-window layer (window {window}): it already hides "
                         "key 0 from later queries, so a key ablation there is not one; ablate the "
                         "full-attention layers only")
    if mask is not None:
        raise ProbeError(f"layer {layer} was handed an explicit attention mask (padding or packed "
                         "sequences): key ablations need plain causal sequences of equal length")


def ablated_attention_with_lse(query, key, value, ablation: KeyAblation, scale, softcap, attend,
                               block: int = BLOCK):
    """(out (B, H, T, D), lse (B, H, T) float32) of causal attention under `ablation`.

    query (B, H, T, D); key, value (B, KV, T, D). attend: the back-end's kernel
    (attention.attention_with_lse), called on each block with its visible keys and mask.
    """
    if ablation.zero_first_value:
        value = value.clone()
        value[:, :, 0] = 0
    B, heads, T, _ = query.shape
    if ablation.masks_nothing(T):
        return attend(query, key, value, None, scale, softcap)
    if ablation.window is not None:
        block = min(block, max(64, ablation.window))
    # (B, T, H, D) underneath, as the kernels return it: out.transpose(1, 2) stays a view.
    out = query.new_empty(B, T, heads, value.shape[-1]).transpose(1, 2)   # (B, H, T, Dv)
    lse = torch.empty(B, heads, T, dtype=torch.float32, device=query.device)
    for start in range(0, T, block):
        end = min(start + block, T)
        ranges = ablation.key_blocks(start, end)
        if len(ranges) == 1:
            (lo, hi), = ranges
            k, v = key[:, :, lo:hi], value[:, :, lo:hi]
        else:
            k = torch.cat([key[:, :, lo:hi] for lo, hi in ranges], dim=2)    # (B, KV, n, D)
            v = torch.cat([value[:, :, lo:hi] for lo, hi in ranges], dim=2)
        positions = torch.cat([torch.arange(lo, hi, device=query.device) for lo, hi in ranges])  # (n,)
        visible = ablation.visible(start, end, positions)                  # (1, 1, c, n)
        o, l = attend(query[:, :, start:end], k, v, visible, scale, softcap)
        out[:, :, start:end] = o
        lse[:, :, start:end] = l
    return out, lse
