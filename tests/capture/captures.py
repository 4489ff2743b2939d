"""A capture run on a loaded tiny model: its input ids, and one pass of probe's Capture over them."""
from __future__ import annotations

import torch
from probe import Capture


def ids_for(model, B=2, T=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, model.config.get_text_config().vocab_size, (B, T), generator=g)


def run_capture(lm, ids, valid=None):
    with torch.no_grad(), Capture(lm.model, lm.layout) as cap:
        with cap.batch(ids, valid):
            logits = lm.model(input_ids=ids, use_cache=False).logits
            cap.observe_logits(logits)
    return cap, logits
