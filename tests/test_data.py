"""Data reading, BOS policy, chunking and padding."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from probe import ProbeError
from probe.data import build_dataset, tokenizer_adds_bos


@pytest.fixture(scope="module")
def tokenizers(loaded):
    return {k: loaded(k).tokenizer for k in ("qwen3", "llama", "gpt2")}


def test_bos_auto_follows_the_tokenizer(tokenizers, text_file):
    assert tokenizer_adds_bos(tokenizers["llama"]) and not tokenizer_adds_bos(tokenizers["qwen3"])
    llama = build_dataset(text_file, tokenizers["llama"], seq_len=32)
    qwen = build_dataset(text_file, tokenizers["qwen3"], seq_len=32)
    bos = tokenizers["llama"].bos_token_id
    assert all(int(s[0]) == bos for s in llama.sequences)
    assert "BOS" in llama.position0 and qwen.position0.startswith("no BOS")
    assert all(len(s) <= 32 for s in llama.sequences + qwen.sequences)


def test_bos_prepend_and_none(tokenizers, text_file):
    gpt2 = tokenizers["gpt2"]
    pre = build_dataset(text_file, gpt2, seq_len=16, bos="prepend")
    assert all(int(s[0]) == gpt2.bos_token_id for s in pre.sequences)
    none = build_dataset(text_file, tokenizers["llama"], seq_len=16, bos="none")
    assert all(int(s[0]) != tokenizers["llama"].bos_token_id for s in none.sequences)
    with pytest.raises(ProbeError, match="no BOS|has none"):
        build_dataset(text_file, tokenizers["qwen3"], seq_len=16, bos="prepend")


def test_chunking_keeps_every_token_once(tokenizers, text_file):
    tok = tokenizers["qwen3"]
    ids = tok(text_file.read_text(), add_special_tokens=False)["input_ids"]
    ds = build_dataset(text_file, tok, seq_len=20, bos="none")
    assert torch.cat(ds.sequences).tolist() == ids
    assert ds.tokens == len(ids)


def test_per_document_padding_on_the_right(tokenizers, tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps({"text": t}) for t in ["short one", "a much longer document " * 3]))
    ds = build_dataset(path, tokenizers["qwen3"], seq_len=64, per_document=True)
    assert len(ds.sequences) == 2
    ids, valid, index = next(ds.batches(2))
    assert valid[0].sum() == len(ds.sequences[0]) and valid[1].sum() == len(ds.sequences[1])
    assert valid[0, : len(ds.sequences[0])].all() and not valid[0, len(ds.sequences[0]):].any()
    assert index.tolist() == [0, 1]


def test_token_ids_need_no_tokenizer(tmp_path):
    path = tmp_path / "ids.npy"
    np.save(path, np.arange(100) % 50)
    ds = build_dataset(path, None, seq_len=30)
    assert ds.tokens == 100 and len(ds.sequences) == 4
    jl = tmp_path / "ids.jsonl"
    jl.write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": [4, 5]}\n')
    assert build_dataset(jl, None, seq_len=8, per_document=True).tokens == 5


def test_bad_data_says_what_to_do(tokenizers, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ProbeError, match="no tokens"):
        build_dataset(empty, tokenizers["qwen3"])
    with pytest.raises(ProbeError, match="does not exist"):
        build_dataset(tmp_path / "missing.txt", tokenizers["qwen3"])
    with pytest.raises(ProbeError, match="no tokenizer files"):
        build_dataset(None, None, texts=["some text"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"body": "x"}\n')
    with pytest.raises(ProbeError, match="text_field="):       # the Python argument, not the flag
        build_dataset(bad, tokenizers["qwen3"])


def test_too_long_sequences_truncate_or_refuse(tokenizers, text_file):
    with pytest.warns(UserWarning, match="lowered"):
        ds = build_dataset(text_file, tokenizers["qwen3"], seq_len=4096, max_positions=64)
    assert max(len(s) for s in ds.sequences) == 64
    with pytest.raises(ProbeError, match="exceeds the model's 64 positions"):
        build_dataset(text_file, tokenizers["qwen3"], seq_len=4096, max_positions=64, on_long="error")
    with pytest.raises(ProbeError, match="on_long='truncate'"):
        build_dataset(None, tokenizers["qwen3"], texts=["word " * 200], seq_len=32,
                      per_document=True, on_long="error")
