"""The embedding fingerprint (probe/load/fingerprint.py): XXH3-128 of the float32 embedding's
bytes (SHA-256 for a record of the earlier scheme), read from the array's buffer without a copy,
and a fresh one after every kind of edit."""
from __future__ import annotations

import hashlib

import pytest
import torch
import xxhash

from probe.load.fingerprint import embedding_fingerprint, scheme_of


def embedding_model(rows=50, width=8, dtype=torch.float32):
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(rows, width).to(dtype)
    model.get_input_embeddings = lambda: model.embed
    return model


def xxh3(weight) -> str:
    return "xxh3:" + xxhash.xxh3_128(weight.detach().float().numpy().tobytes()).hexdigest()


def sha(weight) -> str:
    return hashlib.sha256(weight.detach().float().numpy().tobytes()).hexdigest()[:16]


def test_the_xxh3_of_the_float32_bytes_whatever_the_dtype_and_after_any_edit():
    model = embedding_model()
    weight = model.embed.weight
    want = xxh3(weight)
    assert embedding_fingerprint(model) == want and len(want) == 5 + 32
    weight.data[3, 1] += 1.0                           # leaves the version counter as it was
    edited = embedding_fingerprint(model)
    assert edited != want and edited == xxh3(weight)
    model.embed.to(torch.bfloat16)
    assert embedding_fingerprint(model) == xxh3(model.embed.weight)
    assert embedding_fingerprint(torch.nn.Linear(2, 2)) is None     # no embedding: no fingerprint


def test_a_record_of_the_earlier_scheme_is_answered_in_its_own_scheme():
    """Gate-weights files and grafted checkpoints written before hold 16 hex digits of SHA-256."""
    model = embedding_model()
    old = sha(model.embed.weight)
    assert scheme_of(old) == "sha256" and scheme_of(embedding_fingerprint(model)) == "xxh3"
    assert embedding_fingerprint(model, like=old) == old
    assert embedding_fingerprint(model, like=embedding_fingerprint(model)) == embedding_fingerprint(model)


@pytest.mark.parametrize("like", [None, "0123456789abcdef"])
def test_hashed_a_block_of_rows_at_a_time_gives_the_digest_of_the_whole(monkeypatch, like):
    from probe.load import fingerprint

    model = embedding_model(37, 5, torch.bfloat16)
    whole = embedding_fingerprint(model, like=like)
    assert whole == (sha if like else xxh3)(model.embed.weight)
    monkeypatch.setattr(fingerprint, "ROWS_BYTES", 3 * 4 * 5)   # 3 rows a step, the last block 1 row
    assert embedding_fingerprint(model, like=like) == whole
