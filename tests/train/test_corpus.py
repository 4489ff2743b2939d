"""probe/train/corpus.py: the tokenizer's BOS policy, the default corpus and its held-out split,
packing."""
from __future__ import annotations

import torch

from probe.train import corpus as corpus_mod


def test_tokenizer_adds_bos_only_under_prepend(corpus_file):
    docs = corpus_mod.file_documents([corpus_file])
    texts = [d.text for d in docs]
    with_bos = corpus_mod.train_tokenizer(texts, 300, "prepend")
    without = corpus_mod.train_tokenizer(texts, 300, "none")
    assert with_bos("def f")["input_ids"][0] == with_bos.bos_token_id == 0
    assert without("def f")["input_ids"][0] != without.bos_token_id
    assert with_bos.get_vocab() == without.get_vocab()      # same merges, only the template differs


def test_default_corpus_is_fixed_and_split_by_name():
    docs = corpus_mod.stdlib_documents()
    names = [d.name for d in docs]
    assert names == sorted(names) and len(names) == len(set(names)) > 100
    assert not any(part in corpus_mod.EXCLUDED_PARTS for n in names for part in n.split("/")[:-1])
    assert not any(n.split("/")[-1].startswith("_sysconfigdata") for n in names)
    train_docs, held = corpus_mod.split_documents(docs)
    assert {d.name for d in train_docs}.isdisjoint(d.name for d in held)
    assert 0.02 < len(held) / len(docs) < 0.10
    assert [d.name for d in held] == [n for n in names if corpus_mod.is_heldout(n)]


def test_packing_puts_bos_first_and_keeps_order():
    stream = torch.arange(10, 30)
    rows = corpus_mod.pack(stream, 5, bos_id=0)
    assert rows[:, 0].eq(0).all() and rows[:, 1:].reshape(-1).tolist() == list(range(10, 30))
    assert corpus_mod.pack(stream, 5, bos_id=None).reshape(-1).tolist() == list(range(10, 30))
