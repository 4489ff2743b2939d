"""Turn a user's data into equal-length token sequences with a known token at position 0.

Inputs: a text file, a folder of text files, JSONL with a text field (or `input_ids`), or
token ids (.npy, .pt, JSON/JSONL lists). Text is joined into one stream (documents separated
by the EOS token) and cut into sequences of `seq_len` tokens, or kept one sequence per
document (up to `max_length` tokens, default `seq_len`). A document longer than that (or than
the model's positions) is truncated, refused, or covered by sliding windows (`on_long`):

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
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import ProbeError

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


def read_documents(path: Path, text_field: str = "text") -> tuple[list[str] | None, list[list[int]] | None]:
    """(texts, token_id_lists): exactly one of them is not None."""
    if not path.exists():
        raise ProbeError(f"data {path} does not exist")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES | {".jsonl"})
        if not files:
            raise ProbeError(f"data folder {path} holds no .txt/.md/.jsonl files")
        texts, ids = [], []
        for f in files:
            t, i = read_documents(f, text_field)
            texts += t or []
            ids += i or []
        if texts and ids:
            raise ProbeError(f"data folder {path} mixes text and token ids; keep one kind")
        return (texts, None) if texts or not ids else (None, ids)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        import numpy as np

        arr = np.load(path)
        return None, ([arr.tolist()] if arr.ndim == 1 else arr.tolist())
    if suffix == ".pt":
        t = torch.load(path, weights_only=True)
        return None, ([t.tolist()] if t.dim() == 1 else t.tolist())
    if suffix in (".jsonl", ".json"):
        return read_json_documents(path, text_field)
    try:
        return [path.read_text(encoding="utf-8")], None
    except UnicodeDecodeError:
        raise ProbeError(f"data {path} is not UTF-8 text; pass text, JSONL or token ids (.npy/.pt)") from None


def read_json_documents(path: Path, text_field: str):
    raw = path.read_text(encoding="utf-8")
    try:
        records = [json.loads(line) for line in raw.splitlines() if line.strip()] \
            if path.suffix.lower() == ".jsonl" else json.loads(raw)
    except json.JSONDecodeError as err:
        raise ProbeError(f"data {path} is not valid JSON ({err})") from None
    if isinstance(records, dict):
        records = [records]
    texts, ids = [], []
    for n, rec in enumerate(records):
        if isinstance(rec, list):
            ids.append([int(x) for x in rec])
        elif isinstance(rec, dict) and "input_ids" in rec:
            ids.append([int(x) for x in rec["input_ids"]])
        elif isinstance(rec, dict) and text_field in rec:
            texts.append(str(rec[text_field]))
        else:
            raise ProbeError(f"record {n} of {path} has no {text_field!r} or 'input_ids' field; "
                             "choose the field with --text-field")
    if texts and ids:
        raise ProbeError(f"data {path} mixes text and token ids; keep one kind")
    return (texts, None) if texts else (None, ids)


def tokenizer_adds_bos(tokenizer) -> bool:
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    return len(ids) > 0 and ids[0] == bos


ON_LONG = ("truncate", "slide", "error")


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


def build_dataset(path: str | Path | None, tokenizer, *, seq_len: int = 512, bos: str = "auto",
                  per_document: bool = False, max_sequences: int | None = None,
                  max_positions: int | None = None, on_long: str | None = None,
                  text_field: str = "text", texts: list[str] | None = None,
                  bos_token_id: int | None = None, max_length: int | None = None,
                  stride: int | None = None) -> Dataset:
    """on_long: truncate | slide | error; default slide when max_length or stride is given,
    else truncate."""
    if bos not in ("auto", "prepend", "none"):
        raise ProbeError(f"unknown --bos {bos!r}; use auto, prepend or none")
    if on_long is None:
        on_long = "slide" if max_length or stride else "truncate"
    if on_long not in ON_LONG:
        raise ProbeError(f"unknown --on-long {on_long!r}; use {', '.join(ON_LONG)}")
    if max_length is not None:
        if max_length < 2:
            raise ProbeError(f"--max-length must be at least 2 (got {max_length})")
        seq_len = max_length if per_document else min(seq_len, max_length)
    if seq_len < 2:
        raise ProbeError(f"--seq-len must be at least 2 (got {seq_len})")
    option = "--max-length" if max_length is not None else "--seq-len"
    notes: list[str] = []
    if max_positions and seq_len > max_positions:
        if on_long == "error":
            raise ProbeError(f"{option} {seq_len} exceeds the model's {max_positions} positions; "
                             f"lower {option} or pass --on-long truncate or slide")
        notes.append(f"{option.lstrip('-').replace('-', '_')} {seq_len} lowered to the model's "
                     f"{max_positions} positions")
        warnings.warn(notes[-1])
        seq_len = max_positions
    if texts is not None:
        source, id_lists = "<texts>", None
    else:
        if path is None:
            raise ProbeError("no data given; pass --data FILE (text, folder, JSONL or token ids)")
        source = str(path)
        texts, id_lists = read_documents(Path(path), text_field)
    if texts is not None:
        if tokenizer is None:
            raise ProbeError(f"the data {source} is text but the checkpoint has no tokenizer files; "
                             "pass --tokenizer DIR, or give token ids (.npy, .pt, or JSONL with input_ids)")
        id_lists = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    id_lists = [ids for ids in id_lists if len(ids) > 0]
    if not id_lists:
        raise ProbeError(f"the data {source} holds no tokens; give a non-empty file")

    if bos_token_id is None and tokenizer is not None:
        bos_token_id = getattr(tokenizer, "bos_token_id", None)
    if bos == "auto":
        use_bos = tokenizer is not None and tokenizer_adds_bos(tokenizer)
    elif bos == "prepend":
        if bos_token_id is None:
            raise ProbeError("--bos prepend needs a BOS token, but the tokenizer has none; "
                             "use --bos none, or give token ids that already start with the token you want")
        use_bos = True
    else:
        use_bos = False

    body = seq_len - 1 if use_bos else seq_len
    if stride is not None and not 1 <= stride <= body:
        raise ProbeError(f"--stride must be between 1 and {body} (the tokens of one window"
                         f"{' after BOS' if use_bos else ''}); got {stride}")
    step = stride or body
    head = [bos_token_id] if use_bos else []
    sequences: list[list[int]] = []
    context: list[tuple[int, int]] = []
    windowed = 0

    def slide(ids):
        nonlocal windowed
        windowed += 1
        for begin, end, counted in windows(len(ids), body, step):
            sequences.append(head + ids[begin:end])
            # The BOS of every window counts (a fresh token); re-seen document tokens do not.
            context.append((len(head), len(head) + counted - begin) if counted > begin else (0, 0))

    if per_document:
        for ids in id_lists:
            if len(ids) > body:
                if on_long == "error":
                    raise ProbeError(f"a document has {len(ids) + len(head)} tokens, more than "
                                     f"{option} {seq_len}; raise {option}, or pass --on-long "
                                     "truncate or slide")
                if on_long == "slide":
                    slide(ids)
                    continue
                notes.append(f"documents longer than {seq_len} tokens were truncated")
            sequences.append(head + ids[:body])
            context.append((0, 0))
        if windowed:
            notes.append(f"{windowed} documents longer than {seq_len} tokens were covered by sliding "
                         f"windows (stride {step}); each token counts once")
    elif stride is not None and stride < body:
        eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
        stream = []
        for n, ids in enumerate(id_lists):
            stream += ([eos] if n and eos is not None else []) + list(ids)
        slide(stream)
    else:
        eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
        stream: list[int] = []
        for n, ids in enumerate(id_lists):
            if n and eos is not None:
                stream.append(eos)
            stream.extend(ids)
        for start in range(0, len(stream), body):
            piece = stream[start:start + body]
            if len(piece) >= 2 or not sequences:
                sequences.append(head + piece)
    if max_sequences:
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
