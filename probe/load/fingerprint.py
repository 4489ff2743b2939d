"""Which weights a model holds, in 16 hex digits: the SHA-256 of its token embedding.

probe graft records the base's fingerprint in the grafted config, and every run records its
model's in meta.json, so that a report can tell a graft's own base from any other model of the
same architecture (a config hash cannot), also for models analysed in memory, which have no
checkpoint folder to name.
"""
from __future__ import annotations

import hashlib

ROWS_BYTES = 1 << 24        # float32 bytes hashed per step: a bfloat16 or GPU embedding is never copied whole


def embedding_fingerprint(model) -> str | None:
    """SHA-256 (first 16 hex digits) of the input embedding in float32; None for a model
    without one (an unusual module tree) or whose embedding is not in memory (offloaded to the
    meta device by a device map): a run records no fingerprint rather than failing.

    The float32 bytes, row after row, are hashed a block of rows at a time from the array's own
    buffer (no bytes copy: for SmolLM2's 113 MB that was half the time and all of the analysis's
    extra peak memory at short lengths). Hashed on every call, not cached: an edit through
    `weight.data` leaves the tensor's version counter as it was."""
    try:
        weight = model.get_input_embeddings().weight.detach()             # (V, C)
        rows = max(1, ROWS_BYTES // (4 * max(1, weight[0].numel()))) if weight.dim() else 1
        digest = hashlib.sha256()
        for block in (weight.split(rows) if weight.dim() else [weight]):
            digest.update(block.float().contiguous().cpu().numpy())      # float32, as the graft saw it
    except (AttributeError, NotImplementedError, RuntimeError):
        return None
    return digest.hexdigest()[:16]
