"""probe.capture.masks: which masks transformers builds for the probe back-end.

Only a plain causal sliding-window mask (full prefill, no padding, the window's own pattern) is
left out, for attention to rebuild as a band; everything else gets sdpa_mask's mask unchanged.
"""
from __future__ import annotations

import torch

from probe.capture import masks

WINDOW = 16


def test_probe_mask_leaves_out_only_plain_sliding_window_masks():
    from transformers.masking_utils import (causal_mask_function, chunked_causal_mask_function, sdpa_mask,
                                            sliding_window_causal_mask_function)

    T = 40
    sliding = sliding_window_causal_mask_function(WINDOW)
    args = dict(batch_size=2, q_length=T, kv_length=T, mask_function=sliding, local_size=WINDOW)
    assert masks.probe_mask(**args) is None
    assert masks.probe_mask(**args, attention_mask=torch.ones(2, T, dtype=torch.bool)) is None
    # Positional call, as a mask interface may be called.
    assert masks.probe_mask(2, T, T, 0, 0, sliding, None, WINDOW) is None
    padded = torch.ones(2, T, dtype=torch.bool)
    padded[1, :3] = False
    chunked = chunked_causal_mask_function(WINDOW, torch.zeros(2, dtype=torch.long))
    kept = [
        dict(args, attention_mask=padded),                                      # padding
        dict(args, mask_function=chunked),                                      # chunked attention
        dict(args, allow_is_causal_skip=False),                                 # extra mask functions
        dict(args, q_length=1, q_offset=T - 1),                                 # decoding with a cache
        dict(args, mask_function=causal_mask_function),                         # not the window's pattern
        dict(args, local_size=WINDOW + 1),                                      # another window
    ]
    for kw in kept:
        want = sdpa_mask(**kw)
        got = masks.probe_mask(**kw)
        assert want is not None and torch.equal(got, want), kw
    # Pure causal: None, as sdpa_mask gives.
    assert masks.probe_mask(batch_size=2, q_length=T, kv_length=T) is None
