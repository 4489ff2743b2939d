"""probe/documents.py: a user's data read and checked (files, token ids and texts in memory)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from probe import ProbeError
from probe.data import build_dataset
from test_data import _rows


def test_data_in_memory_equals_the_same_data_in_a_file(loaded, tmp_path):
    """probe.analyze takes a tensor, an array, a list of lists and a list of strings."""
    import probe

    lm = loaded("qwen3")
    rows = _rows(2, 12)
    np.save(tmp_path / "ids.npy", rows)
    run = dict(tokenizer=lm.tokenizer, seq_len=16, progress=False, bos="none")
    from_file = probe.analyze(lm.model, str(tmp_path / "ids.npy"), **run)
    for data in (torch.from_numpy(rows), rows, rows.tolist()):
        a = probe.analyze(lm.model, data, **run)
        assert a.meta["tokens_sha256"] == from_file.meta["tokens_sha256"] and a.meta["sequences"] == 2
        assert a.summary == from_file.summary
    texts = ["the first text, short", "a second text that is a little longer"]
    assert probe.analyze(lm.model, texts, **run).summary == probe.analyze(lm.model, texts=texts, **run).summary


def test_a_string_that_is_not_a_path_says_to_use_texts(loaded):
    import probe

    lm = loaded("qwen3")
    with pytest.raises(ProbeError, match=r"data='the cat sat' is not an existing file.*texts=\[\.\.\.\]"):
        probe.analyze(lm.model, "the cat sat", tokenizer=lm.tokenizer, progress=False)
    with pytest.raises(ProbeError, match=r"wrap one text as texts=\[text\]"):
        probe.analyze(lm.model, texts="the cat sat", tokenizer=lm.tokenizer, progress=False)
    with pytest.raises(ProbeError, match=r"data\[1\] holds 'x' at position 0"):
        probe.analyze(lm.model, [[1, 2], ["x"]], progress=False)


def test_text_records_must_be_strings(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "fine"}\n{"text": null}\n')
    with pytest.raises(ProbeError, match="'text' of line 2 .* is None, not a string"):
        build_dataset(path, None)
