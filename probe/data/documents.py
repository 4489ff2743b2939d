"""A user's data, read and checked, before tokenizing: texts, or token ids as a stream or as rows.

Inputs: a text file, a folder of text files, JSONL with a text field (or `input_ids`), token
ids (.npy, .pt, JSON/JSONL lists), or, from Python, texts and token ids in memory (read_data).
Every input is checked (integer ids >= 0, strings where text is expected), and refused in one
line otherwise. probe/data/sequences.py turns the result into sequences.
"""
from __future__ import annotations

import json
import numbers
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.errors import ProbeError, flag, on_command_line

TEXT_SUFFIXES = {".txt", ".md", ".rst", ".text", ""}
ID_SUFFIXES = {".npy", ".pt"}


@dataclass
class Documents:
    """A user's data before tokenizing: texts, or token ids as a stream or as given rows."""
    source: str
    texts: list[str] | None = None
    ids: list[list[int]] | None = None
    # True: each id list is one sequence as the user gave it (a 2-D array, a list of lists,
    # JSONL input_ids rows); False: a stream (1-D ids) to be cut into sequences.
    rows: bool = False
    # The files read, each {"file": path (in a folder: relative to it), "documents": count};
    # None for data in memory. meta.json records them as data_files.
    files: list[dict] | None = None
    # What the reader left out or ignored, in words (data_notes in meta.json, and a warning).
    notes: list[str] = field(default_factory=list)


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
        docs = read_path(path, text_field)
        if docs.files is None:
            docs.files = [{"file": str(path), "documents": len(docs.texts if docs.texts is not None else docs.ids)}]
        read = [Path(f["file"]).suffix.lower() for f in docs.files]
        if text_field != "text" and not {".json", ".jsonl"} & set(read):
            docs.notes.append(f"{flag('text_field', text_field)} was not used: it names the text "
                              f"field of JSON/JSONL records, and {path} holds no JSON")
        return docs
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


def read_bytes(path: Path, size: int | None = None, what: str = "data") -> bytes:
    """The file's bytes (the first `size` only, when given), never more than its size says; an
    unreadable file, a device, a FIFO or a file larger than the memory free is one line."""
    try:
        st = path.stat()                  # before opening: opening a FIFO waits for a writer
        if not stat.S_ISREG(st.st_mode):
            kind = ("a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                    "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "not a regular file")
            raise ProbeError(f"{what} {path} is {kind}, which can be read without end; pass a file")
        with path.open("rb") as f:
            st = os.fstat(f.fileno())
            wanted = st.st_size if size is None else min(size, st.st_size)
            free = _memory_free()
            if free is not None and wanted > free // 2:
                raise ProbeError(f"{what} {path} is {wanted / 2**30:.1f} GiB, more than half the memory "
                                 f"free ({free / 2**30:.1f} GiB); give token ids (.npy) or split it")
            return f.read(wanted)       # bounded: a file that grows meanwhile is read as it was
    except OSError as err:
        raise ProbeError(f"cannot read {what} {path} ({err.strerror or err}); check its permissions") from None


def _memory_free() -> int | None:
    """Bytes of memory available (Linux /proc/meminfo), None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def parse_json(text: str, where: str):
    """json.loads with a depth limit: a file nested deeper than Python's JSON reader goes
    (about sys.getrecursionlimit() levels) is one line, not a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ProbeError(f"{where} nests lists or objects more than {sys.getrecursionlimit()} levels deep; "
                         "probe reads JSON up to that depth: flatten it") from None


def _decode(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ProbeError(f"data {path} is not UTF-8 text (byte {err.start} is {raw[err.start]:#04x}); "
                         "pass UTF-8 text, JSONL or token ids (.npy/.pt)") from None


def read_path(path: Path, text_field: str = "text") -> Documents:
    """A data file or folder, checked; see read_data."""
    if path.is_dir():
        return _read_folder(path, text_field)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        import numpy as np

        read_bytes(path, 1)                   # an unreadable file: its own message
        with path.open("rb") as f:
            head = f.read(6)
        # np.load reads any file without numpy's magic bytes as a pickle ("Python objects")
        if head != b"\x93NUMPY" and not head.startswith(b"PK"):             # PK: an .npz archive
            raise ProbeError(f"data {path} is not a .npy file (it lacks numpy's header); save token ids "
                             "with numpy.save, or name a text file .txt")
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
        read_bytes(path, 1)
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
    return Documents(str(path), texts=[_decode(read_bytes(path), path)])


def _read_folder(path: Path, text_field: str) -> Documents:
    """A folder's text and JSONL files (recursively, in name order) as one data set; files of
    other kinds and hidden ones (.git, .DS_Store) are left out, and named in a note."""
    found = sorted(p for p in path.rglob("*") if p.is_file())
    hidden = [p for p in found if any(part.startswith(".") for part in p.relative_to(path).parts)]
    files = [p for p in found if p.suffix in TEXT_SUFFIXES | {".jsonl"} and p not in hidden]
    other = [p for p in found if p not in files and p not in hidden]
    if not files:
        kinds = f" (it holds {_listed(other, path)})" if other else ""
        raise ProbeError(f"data folder {path} holds no .txt/.md/.jsonl files{kinds}")
    parts = [read_path(f, text_field) for f in files]
    texts = [t for d in parts for t in d.texts or ()]
    ids = [i for d in parts for i in d.ids or ()]
    if texts and ids:
        raise ProbeError(f"data folder {path} mixes text and token ids; keep one kind")
    read = [{"file": str(f.relative_to(path)), "documents": len(d.texts if d.texts is not None else d.ids)}
            for f, d in zip(files, parts)]
    notes = [n for d in parts for n in d.notes]
    if other:
        notes.append(f"data folder {path}: {len(other)} file{'s' if len(other) > 1 else ''} of a kind "
                     f"probe does not read in a folder left out ({_listed(other, path)}); it reads "
                     ".txt, .md, .rst, .text, .jsonl and files without a suffix")
    if ids:
        return Documents(str(path), ids=ids, rows=any(d.rows for d in parts), files=read, notes=notes)
    return Documents(str(path), texts=texts, files=read, notes=notes)


def _listed(paths: list[Path], root: Path, most: int = 5) -> str:
    names = [str(p.relative_to(root)) for p in paths[:most]]
    return ", ".join(names) + (f" and {len(paths) - most} more" if len(paths) > most else "")


def read_json(path: Path, text_field: str) -> Documents:
    """JSONL (one record per line) or JSON (a list of records, one record, or a flat list of ids).

    A record is {"<text_field>": "..."}, {"input_ids": [...]} or a list of ids (one sequence)."""
    raw = _decode(read_bytes(path), path)
    if path.suffix.lower() == ".jsonl":
        records = []
        for line_no, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    records.append((f"line {line_no} of {path}", parse_json(line, f"line {line_no} of {path}")))
                except json.JSONDecodeError as err:
                    raise ProbeError(f"line {line_no} of {path} is not valid JSON ({err.msg}, "
                                     f"column {err.colno})") from None
    else:
        try:
            top = parse_json(raw, f"data {path}")
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
