"""Which weights a model holds: a hash of its token embedding's float32 bytes.

probe graft records the base's fingerprint in the grafted config, and every run records its
model's in meta.json, so that a report can tell a graft's own base from any other model of the
same architecture (a config hash cannot), also for models analysed in memory, which have no
checkpoint folder to name.

Two schemes, told apart by their text:
- "xxh3:" and 32 hex digits, XXH3-128 (the xxhash library): what probe writes. 10 ms for
  SmolLM2's 113 MB embedding, where SHA-256 took 85 ms on every analysis (a quarter of the
  analysis's cost beyond a 128-token forward); a fingerprint names weights, it guards nothing,
  so a non-cryptographic hash serves.
- 16 hex digits, the first of the SHA-256: what probe wrote before, still in gate-weights files
  and grafted checkpoints of that time. A record is checked in its own scheme
  (`embedding_fingerprint(model, like=record)`).
"""
from __future__ import annotations

import hashlib

import xxhash

ROWS_BYTES = 1 << 24        # float32 bytes hashed per step: a bfloat16 or GPU embedding is never copied whole
XXH3 = "xxh3:"


def scheme_of(fingerprint: str) -> str:
    """"xxh3" or "sha256" (the earlier 16-hex-digit fingerprints)."""
    return "xxh3" if fingerprint.startswith(XXH3) else "sha256"


def embedding_fingerprint(model, like: str | None = None) -> str | None:
    """The fingerprint of the input embedding in float32, in the scheme of `like` (a recorded
    fingerprint; default: XXH3-128); None for a model without one (an unusual module tree) or
    whose embedding is not in memory (offloaded to the meta device by a device map): a run
    records no fingerprint rather than failing.

    The float32 bytes, row after row, are hashed a block of rows at a time from the array's own
    buffer (no bytes copy of the whole). Hashed on every call, not cached: an edit through
    `weight.data` leaves the tensor's version counter as it was."""
    sha = like is not None and scheme_of(like) == "sha256"
    try:
        weight = model.get_input_embeddings().weight.detach()             # (V, C)
        rows = max(1, ROWS_BYTES // (4 * max(1, weight[0].numel()))) if weight.dim() else 1
        digest = hashlib.sha256() if sha else xxhash.xxh3_128()
        for block in (weight.split(rows) if weight.dim() else [weight]):
            digest.update(block.float().contiguous().cpu().numpy())      # float32, as the graft saw it
    except (AttributeError, NotImplementedError, RuntimeError):
        return None
    return digest.hexdigest()[:16] if sha else XXH3 + digest.hexdigest()
