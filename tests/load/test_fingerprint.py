"""The embedding fingerprint (probe/load/fingerprint.py): the SHA-256 of the float32 embedding's
bytes, read from the array's buffer without a copy, and a fresh one after every kind of edit."""
from __future__ import annotations

import hashlib

import torch

from probe.load.fingerprint import embedding_fingerprint


def test_the_sha256_of_the_float32_bytes_whatever_the_dtype_and_after_any_edit():
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(50, 8)
    model.get_input_embeddings = lambda: model.embed
    weight = model.embed.weight
    want = hashlib.sha256(weight.detach().numpy().tobytes()).hexdigest()[:16]
    assert embedding_fingerprint(model) == want
    weight.data[3, 1] += 1.0                           # leaves the version counter as it was
    edited = embedding_fingerprint(model)
    assert edited != want
    assert edited == hashlib.sha256(weight.detach().numpy().tobytes()).hexdigest()[:16]
    model.embed.to(torch.bfloat16)
    assert embedding_fingerprint(model) == hashlib.sha256(
        model.embed.weight.detach().float().numpy().tobytes()).hexdigest()[:16]
    assert embedding_fingerprint(torch.nn.Linear(2, 2)) is None     # no embedding: no fingerprint


def test_hashed_a_block_of_rows_at_a_time_gives_the_digest_of_the_whole(monkeypatch):
    from probe.load import fingerprint

    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(37, 5).to(torch.bfloat16)
    model.get_input_embeddings = lambda: model.embed
    whole = embedding_fingerprint(model)
    monkeypatch.setattr(fingerprint, "ROWS_BYTES", 3 * 4 * 5)   # 3 rows a step, the last block 1 row
    assert embedding_fingerprint(model) == whole
