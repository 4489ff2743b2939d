"""Which weights a model holds, in 16 hex digits: the SHA-256 of its token embedding.

probe graft records the base's fingerprint in the grafted config, and every run records its
model's in meta.json, so that a report can tell a graft's own base from any other model of the
same architecture (a config hash cannot), also for models analysed in memory, which have no
checkpoint folder to name.
"""
from __future__ import annotations

import hashlib


def embedding_fingerprint(model) -> str | None:
    """SHA-256 (first 16 hex digits) of the input embedding in float32; None for a model
    without one (an unusual module tree) or whose embedding is not in memory (offloaded to the
    meta device by a device map): a run records no fingerprint rather than failing."""
    try:
        weight = model.get_input_embeddings().weight
        data = weight.detach().float().contiguous().cpu()   # (V, C) float32, as the graft saw it
    except (AttributeError, NotImplementedError, RuntimeError):
        return None
    # The array's own buffer, not a bytes copy of it (113 MB for SmolLM2: half the time). Hashed
    # on every call, not cached: an edit through `weight.data` leaves the version counter as it was.
    return hashlib.sha256(data.numpy()).hexdigest()[:16]
