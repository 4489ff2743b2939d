"""probe/data/documents.py: a user's data read and checked (files, token ids and texts in memory)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from probe import ProbeError
from probe.data.sequences import build_dataset
from tests.data.token_rows import _rows


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


def test_a_folder_records_its_files_and_names_the_ones_left_out(tmp_path):
    """meta.json's data_files lists what was read and how many documents each gave; a file of
    another kind (a .bin) or a hidden one is left out with one note that names it."""
    from probe.data.documents import read_data

    folder = tmp_path / "texts"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("one text")
    (folder / "sub" / "b.jsonl").write_text('{"text": "x"}\n{"text": "y"}\n')
    (folder / "weights.bin").write_bytes(b"\x00\xff")
    (folder / ".DS_Store").write_bytes(b"\x00\x81")
    docs = read_data(str(folder))
    assert docs.texts == ["one text", "x", "y"]
    assert docs.files == [{"file": "a.txt", "documents": 1}, {"file": "sub/b.jsonl", "documents": 2}]
    assert len(docs.notes) == 1 and "1 file" in docs.notes[0] and "weights.bin" in docs.notes[0]
    assert ".DS_Store" not in docs.notes[0]
    one = read_data(str(folder / "a.txt"))
    assert one.files == [{"file": str(folder / "a.txt"), "documents": 1}] and one.notes == []


def test_text_field_on_plain_text_is_said_not_to_apply(tmp_path):
    from probe.data.documents import read_data

    (tmp_path / "a.txt").write_text("plain")
    docs = read_data(str(tmp_path / "a.txt"), text_field="body")
    assert docs.texts == ["plain"]
    assert len(docs.notes) == 1 and "text_field='body' was not used" in docs.notes[0]
    (tmp_path / "b.jsonl").write_text('{"body": "x"}\n')
    assert read_data(str(tmp_path / "b.jsonl"), text_field="body").notes == []


def test_the_notes_reach_meta_json_and_a_warning(loaded, tmp_path):
    import probe

    lm = loaded("qwen3")
    (tmp_path / "a.txt").write_text("the first text, short and plain")
    (tmp_path / "x.bin").write_bytes(b"\x00")
    with pytest.warns(UserWarning, match="x.bin"):
        a = probe.analyze(lm.model, str(tmp_path), tokenizer=lm.tokenizer, seq_len=16, progress=False)
    assert a.meta["data_files"] == [{"file": "a.txt", "documents": 1}]
    assert any("x.bin" in note for note in a.meta["data_notes"])
