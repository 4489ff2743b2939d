"""Turn a user's data into equal-length token sequences with a known token at position 0.

Inputs: a text file, a folder of text files, JSONL with a text field (or `input_ids`), token
ids (.npy, .pt, JSON/JSONL lists), or, from Python, texts and token ids in memory (read_data).
Text is joined into one stream (documents separated by the EOS token) and cut into sequences of
`seq_len` tokens, or kept one sequence per document (up to `max_length` tokens, default
`seq_len`). Token ids given as rows (a 2-D array, a list of lists, JSONL `input_ids` records)
are sequences as given, one per row, like documents under per_document: never joined or re-cut,
so the same ids make the same sequences whatever the tokenizer's EOS; a 1-D stream is cut like
text. Every input is checked (integer ids >= 0, strings where text is expected), and refused
in one line otherwise. A document or row longer than the sequence length (or than the model's
positions) is truncated (with a warning), refused, or covered by sliding windows (`on_long`):

  windows of `max_length` tokens starting every `stride` tokens (default: back to back); in a
  window after the first, the tokens an earlier window already counted are context only (they
  are attended to but enter no statistic), so every token counts exactly once and, when
  stride < max_length, with at least max_length - stride tokens before it.

The BOS policy decides what sits at position 0:
  auto     whatever the tokenizer adds by default (Llama adds <s>, Qwen and GPT-2 add nothing)
  prepend  always put the BOS token first
  none     never
"""
from __future__ import annotations

import json
import numbers
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import ProbeError, flag, on_command_line
from .options import check_data_options

TEXT_SUFFIXES = {".txt", ".md", ".rst", ".text", ""}
ID_SUFFIXES = {".npy", ".pt"}


@dataclass
class Dataset:
    sequences: list[torch.Tensor]         # each (T_i,) int64, T_i <= seq_len
    source: str
    bos_policy: str
    bos_token_id: int | None
    position0: str                        # what sits at position 0, in words
    notes: list[str] = field(default_factory=list)
    # Per sequence, positions [lo, hi) that are context only (sliding windows); empty: none.
    context: list[tuple[int, int]] = field(default_factory=list)
    windows: dict = field(default_factory=dict)   # max_length, stride, windowed documents

    def digest(self) -> str:
        """SHA-256 of the token ids of every sequence: equal digests, equal token streams."""
        import hashlib

        h = hashlib.sha256()
        for s in self.sequences:
            h.update(s.numpy().tobytes())
            h.update(b"|")
        return h.hexdigest()

    @property
    def tokens(self) -> int:
        """Tokens that count (context positions of sliding windows excluded)."""
        return sum(len(s) for s in self.sequences) - sum(hi - lo for lo, hi in self.context)

    def shard_tokens(self, batch_size: int, rank: int = 0, world: int = 1) -> int:
        """Counted tokens in the batches `batches(batch_size, rank=rank, world=world)` yields."""
        counted = 0
        for i, s in enumerate(self.sequences):
            if (i // batch_size) % world == rank:
                lo, hi = self.context[i] if self.context else (0, 0)
                counted += len(s) - (hi - lo)
        return counted

    def batches(self, batch_size: int, pad_id: int = 0, *, rank: int = 0, world: int = 1):
        """Yield (input_ids (B, T), valid (B, T), seq_index (B,)), padding on the right.

        valid is False on padding and on sliding-window context. With world > 1, only every
        world-th batch from rank on: the batches are the ones a single process makes, so each
        row is computed exactly as it would be there.
        """
        for n, start in enumerate(range(0, len(self.sequences), batch_size)):
            if n % world != rank:
                continue
            chunk = self.sequences[start:start + batch_size]
            T = max(len(s) for s in chunk)
            ids = torch.full((len(chunk), T), pad_id, dtype=torch.long)
            valid = torch.zeros(len(chunk), T, dtype=torch.bool)
            for row, s in enumerate(chunk):
                ids[row, : len(s)] = s
                valid[row, : len(s)] = True
                if self.context:
                    lo, hi = self.context[start + row]
                    valid[row, lo:hi] = False
            yield ids, valid, torch.arange(start, start + len(chunk))


@dataclass
class Documents:
    """A user's data before tokenizing: texts, or token ids as a stream or as given rows."""
    source: str
    texts: list[str] | None = None
    ids: list[list[int]] | None = None
    # True: each id list is one sequence as the user gave it (a 2-D array, a list of lists,
    # JSONL input_ids rows); False: a stream (1-D ids) to be cut into sequences.
    rows: bool = False


def read_data(data, *, texts=None, text_field: str = "text") -> Documents:
    """Whatever the user passed as data, read and checked: a path (text file, folder, JSONL,
    JSON, .npy, .pt), `texts=[...]`, or token ids in memory (a torch tensor or numpy array,
    1-D stream or 2-D rows, a list of lists of ints, a flat list of ints); a list of strings
    is texts. Anything that cannot be token ids or text is refused in one line."""
    if isinstance(data, Documents):
        return data
    if texts is not None:
        if data is not None:
            raise ProbeError(f"pass either {flag('data')} or {flag('texts')}, not both")
        return Documents("<texts>", texts=check_texts(texts, flag("texts")))
    if data is None:
        raise ProbeError(f"no data given; pass {flag('data', metavar='FILE')} (text, folder, JSONL or token ids)"
                         + ("" if on_command_line() else " or texts=[...]"))
    if isinstance(data, (str, Path)):
        path = Path(data)
        if not path.exists():
            if on_command_line() or isinstance(data, Path):
                raise ProbeError(f"data {path} does not exist")
            raise ProbeError(f"data={_short(data)} is not an existing file or folder; to analyse "
                             "text in memory pass texts=[...]")
        return read_path(path, text_field)
    if isinstance(data, torch.Tensor) or type(data).__module__ == "numpy":
        return _array_documents(f"<{type(data).__name__} {tuple(data.shape)}>", data, "data")
    if isinstance(data, (list, tuple)):
        if data and all(isinstance(d, str) for d in data):
            return Documents("<texts>", texts=list(data))
        if all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in data):
            return Documents("<list>", ids=[id_row(data, "data")])
        return Documents("<list of lists>", ids=[id_row(r, f"data[{n}]") for n, r in enumerate(data)],
                         rows=True)
    raise ProbeError(f"cannot read data of type {type(data).__name__}; pass a path, texts=[...], or "
                     "token ids (a tensor, an array or a list of lists of ints)")


def _short(text, n: int = 40) -> str:
    text = repr(text)
    return text if len(text) <= n else text[: n - 4] + "...'"


def check_texts(texts, where: str) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise ProbeError(f"{where} must be a list of strings (got a {type(texts).__name__}); "
                         "wrap one text as texts=[text]")
    for n, t in enumerate(texts):
        if not isinstance(t, str):
            raise ProbeError(f"{where}[{n}] is a {type(t).__name__}, not a string")
    return list(texts)


def id_row(values, where: str) -> list[int]:
    """One sequence of token ids: integers >= 0 (not floats, bools or strings)."""
    if isinstance(values, torch.Tensor) or type(values).__module__ == "numpy":
        ids, _ = _ids_from_array(values, where)
        if len(ids) != 1:
            raise ProbeError(f"{where} must be one row of token ids, not a {values.ndim}-D array")
        return ids[0]
    if not isinstance(values, (list, tuple)):
        raise ProbeError(f"{where} must be a list of token ids (integers), not a {type(values).__name__}")
    for pos, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ProbeError(f"{where} holds {_short(v)} at position {pos}; token ids are integers")
        if not 0 <= v < 2 ** 63:
            raise ProbeError(f"{where} holds token id {v} at position {pos}; token ids are 0 or more")
    return [int(v) for v in values]


def _ids_from_array(arr, where: str) -> tuple[list[list[int]], bool]:
    """(id lists, rows) from a tensor or array: 1-D is a stream, 2-D (N, T) is N sequences."""
    import numpy as np

    if isinstance(arr, torch.Tensor):
        if arr.is_floating_point() or arr.is_complex() or arr.dtype == torch.bool:
            raise ProbeError(f"{where} holds {str(arr.dtype).replace('torch.', '')} values; token ids "
                             "must be integers (convert with .long() if they are whole numbers)")
        arr = arr.detach().cpu().numpy()
    arr = np.asarray(arr)
    kind = arr.dtype.kind
    if kind == "b":
        raise ProbeError(f"{where} holds booleans, not token ids")
    if kind not in "iu":
        what = "Python objects" if kind == "O" else f"{arr.dtype} values"
        raise ProbeError(f"{where} holds {what}; token ids must be integers (save them with an "
                         "integer dtype, e.g. numpy int64)")
    if arr.ndim not in (1, 2):
        shape = "a single number (a 0-D array)" if arr.ndim == 0 else f"a {arr.ndim}-D array {arr.shape}"
        raise ProbeError(f"{where} holds {shape}; token ids are a 1-D stream or a 2-D "
                         "(sequences, tokens) array")
    if arr.size and kind == "i" and arr.min() < 0:
        at = tuple(int(i) for i in np.argwhere(arr < 0)[0])
        narrow = (f" (it stores {arr.dtype}, which wraps ids above {np.iinfo(arr.dtype).max}: save "
                  "them as int32 or int64)") if arr.dtype.itemsize < 4 else ""
        raise ProbeError(f"{where} holds the negative token id {int(arr[at])} at {at}{narrow}")
    if arr.size and kind == "u" and arr.dtype.itemsize == 8 and arr.max() >= 2 ** 63:
        raise ProbeError(f"{where} holds the token id {int(arr.max())}, beyond int64")
    arr = arr.astype(np.int64)
    return ([arr.tolist()], False) if arr.ndim == 1 else (arr.tolist(), True)


def _array_documents(source: str, arr, where: str) -> Documents:
    ids, rows = _ids_from_array(arr, where)
    return Documents(source, ids=ids, rows=rows)


def _read_bytes(path: Path, size: int | None = None) -> bytes:
    """The file's bytes (the first `size` only, when given); an unreadable file is one line."""
    try:
        with path.open("rb") as f:
            return f.read() if size is None else f.read(size)
    except OSError as err:
        raise ProbeError(f"cannot read data {path} ({err.strerror or err}); check its permissions") from None


def _decode(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ProbeError(f"data {path} is not UTF-8 text (byte {err.start} is {raw[err.start]:#04x}); "
                         "pass UTF-8 text, JSONL or token ids (.npy/.pt)") from None


def read_path(path: Path, text_field: str = "text") -> Documents:
    """A data file or folder, checked; see read_data."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES | {".jsonl"})
        if not files:
            raise ProbeError(f"data folder {path} holds no .txt/.md/.jsonl files")
        parts = [read_path(f, text_field) for f in files]
        texts = [t for d in parts for t in d.texts or ()]
        ids = [i for d in parts for i in d.ids or ()]
        if texts and ids:
            raise ProbeError(f"data folder {path} mixes text and token ids; keep one kind")
        if ids:
            return Documents(str(path), ids=ids, rows=any(d.rows for d in parts))
        return Documents(str(path), texts=texts)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        import numpy as np

        _read_bytes(path, 1)                   # an unreadable file: its own message
        try:
            arr = np.load(path, allow_pickle=False)
        except ValueError as err:
            if "allow_pickle" in str(err):
                raise ProbeError(f"data {path} holds Python objects, not token ids; save an integer "
                                 "array (numpy int64)") from None
            raise ProbeError(f"data {path} is not a readable .npy file ({err})") from None
        except Exception as err:
            raise ProbeError(f"data {path} is not a readable .npy file ({err})") from None
        if not isinstance(arr, np.ndarray):
            raise ProbeError(f"data {path} is an .npz archive; save one array with numpy.save")
        return _array_documents(str(path), arr, f"data {path}")
    if suffix == ".pt":
        _read_bytes(path, 1)
        try:
            t = torch.load(path, weights_only=True)
        except Exception as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise ProbeError(f"data {path} is not a readable .pt file of token ids ({first})") from None
        if isinstance(t, (list, tuple)) and t and all(isinstance(r, torch.Tensor) for r in t):
            return Documents(str(path), ids=[id_row(r, f"row {n} of {path}") for n, r in enumerate(t)], rows=True)
        if not isinstance(t, torch.Tensor):
            keys = f" (keys {', '.join(map(str, list(t)[:4]))})" if isinstance(t, dict) else ""
            raise ProbeError(f"data {path} holds a {type(t).__name__}{keys}, not a tensor of token ids; "
                             "save the tensor itself: torch.save(ids, path)")
        return _array_documents(str(path), t, f"data {path}")
    if suffix in (".jsonl", ".json"):
        return read_json(path, text_field)
    return Documents(str(path), texts=[_decode(_read_bytes(path), path)])


def read_json(path: Path, text_field: str) -> Documents:
    """JSONL (one record per line) or JSON (a list of records, one record, or a flat list of ids).

    A record is {"<text_field>": "..."}, {"input_ids": [...]} or a list of ids (one sequence)."""
    raw = _decode(_read_bytes(path), path)
    if path.suffix.lower() == ".jsonl":
        records = []
        for line_no, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    records.append((f"line {line_no} of {path}", json.loads(line)))
                except json.JSONDecodeError as err:
                    raise ProbeError(f"line {line_no} of {path} is not valid JSON ({err.msg}, "
                                     f"column {err.colno})") from None
    else:
        try:
            top = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ProbeError(f"data {path} is not valid JSON ({err})") from None
        if isinstance(top, list) and top and all(isinstance(x, numbers.Number) for x in top):
            # A flat list of numbers is one stream of ids (checked: no floats or bools).
            return Documents(str(path), ids=[id_row(top, f"data {path}")])
        if isinstance(top, dict):
            top = [top]
        if not isinstance(top, list):
            raise ProbeError(f"data {path} holds a JSON {type(top).__name__}; give a list of records "
                             f'({{"{text_field}": "..."}} or {{"input_ids": [...]}}), or token ids')
        records = [(f"record {n} of {path}", rec) for n, rec in enumerate(top)]
    texts, ids = [], []
    for where, rec in records:
        if isinstance(rec, list):
            ids.append(id_row(rec, where))
        elif isinstance(rec, dict) and "input_ids" in rec:
            ids.append(id_row(rec["input_ids"], f"input_ids of {where}"))
        elif isinstance(rec, dict) and text_field in rec:
            value = rec[text_field]
            if not isinstance(value, str):
                raise ProbeError(f"{text_field!r} of {where} is {_short(value) if value is None else 'a ' + type(value).__name__}, "
                                 "not a string")
            texts.append(value)
        elif not isinstance(rec, dict):
            raise ProbeError(f"{where} is a JSON {type(rec).__name__}, not a record "
                             f'({{"{text_field}": "..."}}, {{"input_ids": [...]}} or a list of token ids)')
        else:
            raise ProbeError(f"{where} has no {text_field!r} or 'input_ids' field; "
                             f"choose the field with {flag('text_field')}")
    if texts and ids:
        raise ProbeError(f"data {path} mixes text and token ids; keep one kind")
    return Documents(str(path), texts=texts) if texts else Documents(str(path), ids=ids, rows=True)


def read_documents(path: Path, text_field: str = "text") -> tuple[list[str] | None, list[list[int]] | None]:
    """(texts, token_id_lists) of a data file or folder: exactly one of them is not None."""
    if not Path(path).exists():
        raise ProbeError(f"data {path} does not exist")
    docs = read_path(Path(path), text_field)
    return (docs.texts, None) if docs.texts is not None else (None, docs.ids)


def tokenizer_adds_bos(tokenizer) -> bool:
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    return len(ids) > 0 and ids[0] == bos


def windows(n: int, body: int, stride: int) -> list[tuple[int, int, int]]:
    """Sliding windows over n tokens: (begin, end, first new token) with end - begin <= body.

    The windows start every `stride` tokens until one reaches the end; tokens before `first new`
    were counted by an earlier window.
    """
    out, begin, counted = [], 0, 0
    while True:
        end = min(begin + body, n)
        out.append((begin, end, counted))
        counted = end
        if end >= n:
            return out
        begin += stride


def build_dataset(path, tokenizer, *, seq_len: int = 512, bos: str = "auto",
                  per_document: bool = False, max_sequences: int | None = None,
                  max_positions: int | None = None, on_long: str | None = None,
                  text_field: str = "text", texts: list[str] | None = None,
                  bos_token_id: int | None = None, max_length: int | None = None,
                  stride: int | None = None) -> Dataset:
    """path: anything read_data takes (a path, token ids in memory, a `Documents`), or None with
    texts. Token id rows (a 2-D array, a list of lists, JSONL input_ids) are one sequence each,
    as given, like documents under per_document; a 1-D stream and texts are cut into seq_len.
    on_long: truncate | slide | error; default slide when max_length or stride is given, else
    truncate."""
    check_data_options(seq_len=seq_len, bos=bos, on_long=on_long, max_length=max_length,
                       stride=stride, max_sequences=max_sequences)
    if on_long is None:
        on_long = "slide" if max_length or stride else "truncate"
    docs = read_data(path, texts=texts, text_field=text_field)
    source = docs.source
    if docs.texts is not None:
        if tokenizer is None:
            raise ProbeError(f"the data {source} is text but there is no tokenizer (the checkpoint has "
                             f"no tokenizer files); pass {flag('tokenizer', metavar='DIR')}, or give token ids "
                             "(.npy, .pt, or JSONL with input_ids)")
        id_lists = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in docs.texts]
    else:
        id_lists = docs.ids
    # Rows as given are sequences, whatever per_document says: they are never joined or re-cut.
    per_document = per_document or docs.rows
    notes: list[str] = []
    empty = sum(1 for ids in id_lists if len(ids) == 0)
    id_lists = [ids for ids in id_lists if len(ids) > 0]
    if not id_lists:
        raise ProbeError(f"the data {source} holds no tokens; give a non-empty file")
    if empty and per_document:
        notes.append(f"{empty} empty documents were skipped")

    if max_length is not None:
        seq_len = max_length if per_document else min(seq_len, max_length)
    option = "max_length" if max_length is not None else "seq_len"
    if max_positions and seq_len > max_positions:
        if on_long == "error":
            raise ProbeError(f"{flag(option, seq_len)} exceeds the model's {max_positions} positions; "
                             f"lower {flag(option)} or pass {flag('on_long', 'truncate')} or slide")
        notes.append(f"{option} {seq_len} lowered to the model's {max_positions} positions")
        warnings.warn(notes[-1])
        seq_len = max_positions

    if bos_token_id is None and tokenizer is not None:
        bos_token_id = getattr(tokenizer, "bos_token_id", None)
    if bos == "auto":
        use_bos = tokenizer is not None and tokenizer_adds_bos(tokenizer)
    elif bos == "prepend":
        if bos_token_id is None:
            raise ProbeError(f"{flag('bos', 'prepend')} needs a BOS token, but the tokenizer has none; "
                             f"use {flag('bos', 'none')}, or give token ids that already start with the "
                             "token you want")
        use_bos = True
    else:
        use_bos = False

    body = seq_len - 1 if use_bos else seq_len
    if stride is not None and not 1 <= stride <= body:
        raise ProbeError(f"{flag('stride')} must be between 1 and {body} (the tokens of one window"
                         f"{' after BOS' if use_bos else ''}); got {stride}")
    step = stride or body
    head = [bos_token_id] if use_bos else []
    sequences: list[list[int]] = []
    context: list[tuple[int, int]] = []
    windowed = truncated = 0

    def slide(ids):
        nonlocal windowed
        windowed += 1
        for begin, end, counted in windows(len(ids), body, step):
            sequences.append(head + ids[begin:end])
            # The BOS of every window counts (a fresh token); re-seen document tokens do not.
            context.append((len(head), len(head) + counted - begin) if counted > begin else (0, 0))

    if per_document:
        what = "documents"                # rows as given included
        for ids in id_lists:
            if len(ids) > body:
                if on_long == "error":
                    raise ProbeError(f"a {what[:-1]} has {len(ids) + len(head)} tokens, more than "
                                     f"{flag(option, seq_len)}; raise {flag(option)}, or pass "
                                     f"{flag('on_long', 'truncate')} or slide")
                if on_long == "slide":
                    slide(ids)
                    continue
                truncated += 1
            sequences.append(head + ids[:body])
            context.append((0, 0))
        if truncated:
            notes.append(f"{truncated} of {len(id_lists)} {what} longer than {seq_len} tokens were "
                         f"truncated to {seq_len}")
            warnings.warn(f"{notes[-1]}; their later tokens are not measured (pass "
                          f"{flag('on_long', 'slide')} to cover them with windows, or raise {flag(option)})")
        if windowed:
            notes.append(f"{windowed} {what} longer than {seq_len} tokens were covered by sliding "
                         f"windows (stride {step}); each token counts once")
    else:
        eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
        stream: list[int] = []
        for n, ids in enumerate(id_lists):
            if n and eos is not None:
                stream.append(eos)
            stream.extend(ids)
        if stride is not None and stride < body:
            slide(stream)
        else:
            for start in range(0, len(stream), body):
                piece = stream[start:start + body]
                if len(piece) >= 2 or not sequences:
                    sequences.append(head + piece)
                else:
                    notes.append("the stream's last token was left out (alone, it predicts nothing)")
    if max_sequences is not None:
        sequences, context = sequences[:max_sequences], context[:max_sequences]
    notes = sorted(set(notes))
    position0 = describe_position0(sequences, tokenizer, use_bos, bos_token_id)
    context = context if any(hi > lo for lo, hi in context) else []
    return Dataset([torch.tensor(s, dtype=torch.long) for s in sequences], source,
                   bos, bos_token_id if use_bos else None, position0, notes, context,
                   # As asked (None: not given) and as run: the length each sequence was cut
                   # to, and the tokens between window starts where windows ran (None: none did).
                   {"max_length": max_length, "stride": stride, "on_long": on_long,
                    "windowed_documents": windowed, "length": seq_len,
                    "step": step if windowed else None})


def describe_position0(sequences, tokenizer, use_bos: bool, bos_token_id) -> str:
    if use_bos:
        name = tokenizer.convert_ids_to_tokens(bos_token_id) if tokenizer is not None else str(bos_token_id)
        return f"BOS token {name!r} (id {bos_token_id}) in every sequence"
    firsts = {int(s[0]) for s in sequences}
    if len(firsts) == 1:
        tid = firsts.pop()
        name = tokenizer.convert_ids_to_tokens(tid) if tokenizer is not None else str(tid)
        return f"no BOS; every sequence starts with token {name!r} (id {tid})"
    return f"no BOS; position 0 holds an ordinary text token ({len(firsts)} distinct first tokens)"
