"""probe/data/sequences.py: BOS policy, chunking, padding, sliding windows (reading: test_documents.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from probe import ProbeError
from probe.data.sequences import build_dataset, tokenizer_adds_bos
from tests.data.token_rows import _rows


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
    # A text file named .npy is no .npy (np.load read it as a pickle: "holds Python objects");
    # an object array saved with numpy is.
    text = tmp_path / "ids.npy"
    text.write_text("1 2 3 4\n")
    with pytest.raises(ProbeError, match="is not a .npy file \\(it lacks numpy's header\\)"):
        build_dataset(text, None)
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([[1, 2], "x"], dtype=object), allow_pickle=True)
    with pytest.raises(ProbeError, match="holds Python objects"):
        build_dataset(objects, None)


def test_too_long_sequences_truncate_or_refuse(tokenizers, text_file):
    with pytest.warns(UserWarning, match="lowered"):
        ds = build_dataset(text_file, tokenizers["qwen3"], seq_len=4096, max_positions=64)
    assert max(len(s) for s in ds.sequences) == 64
    with pytest.raises(ProbeError, match="exceeds the model's 64 positions"):
        build_dataset(text_file, tokenizers["qwen3"], seq_len=4096, max_positions=64, on_long="error")
    with pytest.raises(ProbeError, match="on_long='truncate'"):
        build_dataset(None, tokenizers["qwen3"], texts=["word " * 200], seq_len=32,
                      per_document=True, on_long="error")


# ------------------------------------------------ token ids as given, data in memory, messages


def test_token_id_rows_are_the_sequences_as_given(tokenizers, tmp_path):
    """A 2-D array, a list of lists or JSONL input_ids rows: one sequence per row, never joined
    with the tokenizer's EOS and re-cut, whatever the tokenizer (so their digests agree)."""
    rows = _rows()
    np.save(tmp_path / "ids.npy", rows)
    torch.save(torch.from_numpy(rows), tmp_path / "ids.pt")
    (tmp_path / "ids.json").write_text(json.dumps(rows.tolist()))
    (tmp_path / "ids.jsonl").write_text("\n".join(json.dumps({"input_ids": r}) for r in rows.tolist()))
    digests = set()
    for name in ("ids.npy", "ids.pt", "ids.json", "ids.jsonl"):
        for tok in (tokenizers["qwen3"], tokenizers["gpt2"], None):
            ds = build_dataset(tmp_path / name, tok, seq_len=16, bos="none")
            assert [s.tolist() for s in ds.sequences] == rows.tolist(), name
            digests.add(ds.digest())
    assert len(digests) == 1
    with pytest.warns(UserWarning, match="3 of 3 documents longer than 8 tokens were truncated"):
        short = build_dataset(tmp_path / "ids.npy", None, seq_len=8)
    assert [s.tolist() for s in short.sequences] == rows[:, :8].tolist()
    slid = build_dataset(tmp_path / "ids.npy", None, seq_len=8, on_long="slide")
    assert slid.tokens == rows.size and len(slid.sequences) == 6


def test_a_one_dimensional_stream_is_still_cut(tmp_path):
    np.save(tmp_path / "ids.npy", np.arange(3, 44))                 # 41 tokens
    ds = build_dataset(tmp_path / "ids.npy", None, seq_len=20, bos="none")
    assert [len(s) for s in ds.sequences] == [20, 20] and ds.tokens == 40
    assert any("last token was left out" in n for n in ds.notes)    # said, not silent


def test_python_api_errors_name_the_python_argument(checkpoint, loaded, tmp_path):
    """From Python the user wrote batch_size=0, not --batch-size 0: the message says so."""
    import probe

    lm = loaded("qwen3")
    run = dict(texts=["some text " * 10], tokenizer=lm.tokenizer, progress=False)
    for option, value, says in (("batch_size", -2, "batch_size= must be an integer of at least 1"),
                                ("max_sequences", 0, "max_sequences= must be"),
                                ("thresholds", [-1, 2, float("nan")], "thresholds= must be finite numbers above 0"),
                                ("interventions", "mean_gates", "unknown intervention"),
                                ("on_long", "sideways", "unknown on_long='sideways'")):
        with pytest.raises(ProbeError, match=says) as caught:
            probe.analyze(lm.model, **run, **{option: value})
        assert "--" not in str(caught.value)
    with pytest.raises(ProbeError, match="on_long='truncate'"):
        probe.analyze(lm.model, **run, seq_len=4096, on_long="error")
    with pytest.raises(ProbeError, match=r"tokenizer='nope' does not exist"):
        probe.load(checkpoint("qwen3"), tokenizer="nope")           # never the checkpoint's own, silently
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProbeError, match="holds no tokenizer files"):
        probe.load(checkpoint("qwen3"), tokenizer=tmp_path / "empty")
    a = probe.analyze(lm.model, **run, seq_len=16)
    a.save(tmp_path / "run")
    with pytest.raises(ProbeError, match="pass force=True to replace it"):
        a.save(tmp_path / "run")


def test_a_row_of_seq_len_tokens_is_truncated_only_by_its_prepended_bos():
    """Token id rows of exactly seq_len ids: with BOS prepended each loses its last id, and the
    warning says the BOS is why (it read as if the rows themselves were longer); without BOS
    they fit and nothing is said."""
    rows = torch.arange(1, 129).view(2, 64)
    with pytest.warns(UserWarning, match=r"2 of 2 documents longer than 64 tokens were truncated to 64 "
                                         r"\(counting the prepended BOS\)"):
        ds = build_dataset(rows, None, seq_len=64, bos="prepend", bos_token_id=0)
    assert [s.tolist() for s in ds.sequences] == [[0, *range(1, 64)], [0, *range(65, 128)]]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = build_dataset(rows, None, seq_len=64, bos="none")
    assert [len(s) for s in ds.sequences] == [64, 64] and not ds.notes


def test_bos_auto_adds_no_second_bos_to_ids_that_start_with_one(tokenizers):
    """Token ids saved from a tokenizer that adds BOS (llama's here) start with it: --bos auto
    prepended another, and the doubled BOS moved F-Attn and the sink rate (0.215 and 0.125
    against 0.333 and 0.56 without it, on a shipped arm). Rows, windows and a stream alike; a
    row without it still gets one, and an explicit prepend is done as asked."""
    tok = tokenizers["llama"]
    bos = tok.bos_token_id
    rows = [tok("a row of text to analyse").input_ids, tok("another row, longer than the first").input_ids]
    assert all(r[0] == bos for r in rows)
    ds = build_dataset(rows, tok, seq_len=64)
    assert [s.tolist() for s in ds.sequences] == rows
    assert ds.notes == [f"2 sequences started with the BOS token (id {bos}) already: none prepended to them "
                        "(--bos auto)"]
    bare = rows[1][1:]
    assert [s.tolist() for s in build_dataset([rows[0], bare], tok, seq_len=64).sequences] == [rows[0], [bos, *bare]]
    assert build_dataset(rows, tok, seq_len=64, bos="prepend").sequences[0].tolist() == [bos, *rows[0]]
    with pytest.warns(UserWarning, match=f"one sequence of {len(rows[1])} tokens"):
        stream = build_dataset(torch.tensor(rows[1]), tok, seq_len=64)        # a 1-D stream
    assert stream.sequences[0].tolist() == rows[1]
    # sliding windows: the first window starts with the row's own BOS, the later ones get one
    windows = build_dataset([rows[1]], tok, seq_len=4, on_long="slide", stride=2)
    firsts = [s.tolist()[0] for s in windows.sequences]
    assert firsts == [bos] * len(firsts) and windows.sequences[0].tolist() == rows[1][:3]
    assert windows.sequences[1].tolist() == [bos, *rows[1][2:5]]


def test_per_document_truncation_is_warned(tokenizers):
    with pytest.warns(UserWarning, match="1 of 2 documents longer than 8 tokens were truncated to 8.*on_long='slide'"):
        ds = build_dataset(None, tokenizers["qwen3"], texts=["short", "a long document " * 8], seq_len=8,
                           per_document=True)
    assert any("truncated" in n for n in ds.notes)


def test_text_shorter_than_one_sequence_is_analysed_with_a_warning(tokenizers):
    """Fewer tokens than seq_len: one shorter sequence, and a warning and a note that say so
    (meta.json's seq_len alone would claim sequences of seq_len tokens); none for enough text."""
    import warnings

    tok = tokenizers["llama"]                                              # has a BOS token
    n = len(tok("a short text here", add_special_tokens=False)["input_ids"])
    with pytest.warns(UserWarning, match=f"the data hold {n} tokens, fewer than seq_len 64: one sequence "
                                         f"of {n + 1} tokens is analysed; give more text, or lower seq_len="):
        ds = build_dataset(None, tok, texts=["a short text here"], seq_len=64, bos="prepend")
    assert [len(s) for s in ds.sequences] == [n + 1]
    assert any(note.startswith(f"the data hold {n} tokens") for note in ds.notes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_dataset(None, tok, texts=["a short text here " * 8], seq_len=16, bos="none")


def test_a_tokenizer_folder_works_with_a_model_object_too(checkpoint, loaded):
    """tokenizer=DIR with a model object was kept as the string itself (a traceback on the first
    text); with a LoadedModel it was ignored."""
    import probe

    lm = loaded("qwen3")
    run = dict(texts=["some words to read " * 4], seq_len=16, progress=False)
    own = probe.analyze(lm, **run)
    for model in (lm.model, lm):
        a = probe.analyze(model, tokenizer=str(checkpoint("qwen3")), **run)
        assert a.meta["tokens_sha256"] == own.meta["tokens_sha256"]
    with pytest.raises(ProbeError, match="tokenizer='nope' does not exist"):
        probe.analyze(lm, tokenizer="nope", **run)


def test_position0_names_the_first_tokens_when_they_differ():
    """meta.json's position0 says which tokens sit first, most common first, not only how many."""
    from probe.data.sequences import describe_position0

    seqs = [torch.tensor([5, 1]), torch.tensor([7, 1]), torch.tensor([5, 2])]
    text = describe_position0(seqs, None, False, None)
    assert text == ("no BOS; position 0 holds an ordinary text token (2 distinct first tokens: "
                    "'5' in 2, '7' in 1 of 3 sequences)")
    assert "(id " not in text                   # reports read a single position-0 id from "(id N)"
    many = [torch.tensor([i]) for i in range(8)]
    assert describe_position0(many, None, False, None).endswith("'4' in 1, 3 more of 8 sequences)")


def test_windows_of_a_document_record_their_document(tmp_path):
    """Per document (JSONL rows are), the windows of a long document share its index (the
    intervals draw them together); with no document in several sequences, or over one token
    stream, none is recorded."""
    jl = tmp_path / "ids.jsonl"
    jl.write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": %s}\n{"input_ids": [4, 5]}\n' % list(range(6, 26)))
    ds = build_dataset(jl, None, seq_len=8, per_document=True, on_long="slide")
    assert ds.documents == [0] + [1] * (len(ds.sequences) - 2) + [2] and len(ds.sequences) > 3
    with pytest.warns(UserWarning, match="1 of 3 documents longer than 8 tokens were truncated"):
        assert build_dataset(jl, None, seq_len=8, per_document=True, on_long="truncate").documents == []
    np.save(tmp_path / "ids.npy", np.arange(40) % 30)                  # one stream, cut or slid
    assert build_dataset(tmp_path / "ids.npy", None, seq_len=8, stride=4).documents == []


def test_truncation_counts_only_the_documents_analysed(tokenizers):
    """--per-document --max-sequences 2 over 5 long documents warned "5 of 5 documents ... were
    truncated" while 2 were analysed."""
    texts = ["a long document with many words in it " * 4] * 5
    with pytest.warns(UserWarning, match="^2 of 2 documents longer than 8 tokens were truncated to 8"):
        ds = build_dataset(None, tokenizers["qwen3"], texts=texts, seq_len=8, per_document=True, max_sequences=2)
    assert len(ds.sequences) == 2
