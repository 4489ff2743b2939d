"""Turn a user's data into equal-length token sequences with a known token at position 0.

Inputs: whatever documents.read_data reads (files, folders, JSONL, token ids, texts in memory).
Text is joined into one stream (documents separated by the EOS token) and cut into sequences of
`seq_len` tokens, or kept one sequence per document (up to `max_length` tokens, default
`seq_len`). Token ids given as rows (a 2-D array, a list of lists, JSONL `input_ids` records)
are sequences as given, one per row, like documents under per_document: never joined or re-cut,
so the same ids make the same sequences whatever the tokenizer's EOS; a 1-D stream is cut like
text. A document or row longer than the sequence length (or than the model's
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

import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch

# Documents, read_data and read_documents are imported from here by analyze, cli and train.
from .documents import Documents, read_data, read_documents  # noqa: F401
from ..core.errors import ProbeError, flag, rust_panic_as_error
from ..core.options import AnalysisOptions


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
    files: list[dict] | None = None       # the files read and their documents (Documents.files)
    # Per sequence, the index of the document it comes from (per document: sliding windows of
    # one document share it, the intervals resample them together); empty: each its own.
    documents: list[int] = field(default_factory=list)

    def digest(self) -> str:
        """SHA-256 of the token ids of every sequence: equal digests, equal token streams."""
        import hashlib

        h = hashlib.sha256()
        for s in self.sequences:
            h.update(s.numpy().tobytes())
            h.update(b"|")
        return h.hexdigest()

    @property
    def longest(self) -> int:
        """The longest sequence's length, 0 for no sequence: what a pass's memory and masks are sized for."""
        return max((len(s) for s in self.sequences), default=0)

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


def build_dataset(path, tokenizer, options: AnalysisOptions | None = None, *, max_positions: int | None = None,
                  texts: list[str] | None = None, bos_token_id: int | None = None, **overrides) -> Dataset:
    """path: anything read_data takes (a path, token ids in memory, a `Documents`), or None with
    texts. Token id rows (a 2-D array, a list of lists, JSONL input_ids) are one sequence each,
    as given, like documents under per_document; a 1-D stream and texts are cut into seq_len.

    options: an AnalysisOptions (its seq_len, bos, per_document, max_sequences, max_length,
    stride, on_long, text_field; default: every field's default), with `overrides` of its fields
    (build_dataset(path, tok, seq_len=64)), checked; max_positions: the model's positions.
    on_long None: slide when max_length or stride is given, else truncate."""
    o = AnalysisOptions.of(options, **overrides)
    seq_len, bos, per_document, on_long = o.seq_len, o.bos, o.per_document, o.on_long
    max_length, stride, max_sequences = o.max_length, o.stride, o.max_sequences
    if on_long is None:
        on_long = "slide" if max_length or stride else "truncate"
    docs = read_data(path, texts=texts, text_field=o.text_field)
    source = docs.source
    if docs.texts is not None:
        if tokenizer is None:
            what = "the texts given need" if source == "<texts>" else f"the data {source} is text and needs"
            raise ProbeError(f"{what} a tokenizer, but there is none (the checkpoint has "
                             f"no tokenizer files); pass {flag('tokenizer', metavar='DIR')}, or give token ids "
                             "(.npy, .pt, or JSONL with input_ids)")
        # A tokenizer's regex that backtracks without end panics in Rust: one line, no backtrace.
        with rust_panic_as_error(f"tokenizing the data {source}", "the tokenizer cannot read this text: "
                                 f"pass {flag('tokenizer', metavar='DIR')} with another, or give token ids"):
            id_lists = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in docs.texts]
    else:
        id_lists = docs.ids
    # Rows as given are sequences, whatever per_document says: they are never joined or re-cut.
    per_document = per_document or docs.rows
    notes: list[str] = list(docs.notes)
    for note in docs.notes:                # files left out, options that did nothing: say so
        warnings.warn(note)
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
        warnings.warn(f"{notes[-1]} (pass {flag('past_positions', True)} to run a rotary-position model "
                      "past them)")
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
    documents: list[int] = []
    windowed = truncated = 0

    already = 0                         # sequences that started with the BOS already (auto)

    def bos_given(ids) -> bool:
        """Under auto, token ids that start with the BOS already (saved from a tokenizer that adds
        it) get no second one: a doubled BOS moves the sink and F-Attn."""
        return bool(head) and bos == "auto" and len(ids) > 0 and ids[0] == bos_token_id

    def headed(ids: list[int]) -> tuple[list[int], int]:
        """(the sequence, the tokens put before ids)."""
        nonlocal already
        if bos_given(ids):
            already += 1
            return list(ids), 0
        return head + list(ids), len(head)

    def slide(ids, document=None):
        nonlocal windowed
        windowed += 1
        for begin, end, counted in windows(len(ids), body, step):
            sequence, put = headed(ids[begin:end])
            sequences.append(sequence)
            if document is not None:
                documents.append(document)
            # The BOS of every window counts (a fresh token); re-seen document tokens do not.
            context.append((put, put + counted - begin) if counted > begin else (0, 0))

    if per_document:
        what = "documents"                # rows as given included
        considered = 0                    # documents read before max_sequences was reached
        for document, ids in enumerate(id_lists):
            if max_sequences is not None and len(sequences) >= max_sequences:
                break                     # the rest are not analysed: not counted as truncated
            considered += 1
            if len(ids) > body:
                if on_long == "error":
                    raise ProbeError(f"a {what[:-1]} has {len(ids) + len(head)} tokens, more than "
                                     f"{flag(option, seq_len)}; raise {flag(option)}, or pass "
                                     f"{flag('on_long', 'truncate')} or slide")
                if on_long == "slide":
                    slide(ids, document)
                    continue
                truncated += 1
            sequences.append(headed(ids[:body])[0])
            context.append((0, 0))
            documents.append(document)
        if truncated:
            # With BOS prepended a document of exactly seq_len tokens is one too long: say so.
            notes.append(f"{truncated} of {considered} {what} longer than {seq_len} tokens were "
                         f"truncated to {seq_len}" + (" (counting the prepended BOS)" if use_bos else ""))
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
        if len(stream) < body:
            # One sequence shorter than asked: meta.json's seq_len would say otherwise.
            put = 0 if bos_given(stream) else len(head)
            notes.append(f"the data hold {len(stream)} tokens, fewer than {option} {seq_len}: "
                         f"one sequence of {len(stream) + put} tokens")
            warnings.warn(f"{notes[-1]} is analysed; give more text, or lower {flag(option)}")
        if stride is not None and stride < body:
            slide(stream)
        else:
            for start in range(0, len(stream), body):
                piece = stream[start:start + body]
                if len(piece) >= 2 or not sequences:
                    sequences.append(headed(piece)[0])
                else:
                    notes.append("the stream's last token was left out (alone, it predicts nothing)")
    if already:
        notes.append(f"{already} sequence{'s' if already > 1 else ''} started with the BOS token "
                     f"(id {bos_token_id}) already: none prepended to {'them' if already > 1 else 'it'} "
                     "(--bos auto)")
    if max_sequences is not None:
        sequences, context = sequences[:max_sequences], context[:max_sequences]
        documents = documents[:max_sequences]
    notes = sorted(set(notes))
    position0 = describe_position0(sequences, tokenizer, use_bos, bos_token_id)
    context = context if any(hi > lo for lo, hi in context) else []
    documents = documents if len(set(documents)) < len(documents) else []    # a document in several
    return Dataset([torch.tensor(s, dtype=torch.long) for s in sequences], source,
                   bos, bos_token_id if use_bos else None, position0, notes, context,
                   # As asked (None: not given) and as run: the length each sequence was cut
                   # to, and the tokens between window starts where windows ran (None: none did).
                   {"max_length": max_length, "stride": stride, "on_long": on_long,
                    "windowed_documents": windowed, "length": seq_len,
                    "step": step if windowed else None}, docs.files, documents)


def describe_position0(sequences, tokenizer, use_bos: bool, bos_token_id) -> str:
    if use_bos:
        name = tokenizer.convert_ids_to_tokens(bos_token_id) if tokenizer is not None else str(bos_token_id)
        return f"BOS token {name!r} (id {bos_token_id}) in every sequence"
    firsts = {int(s[0]) for s in sequences}
    if len(firsts) == 1:
        tid = firsts.pop()
        name = tokenizer.convert_ids_to_tokens(tid) if tokenizer is not None else str(tid)
        return f"no BOS; every sequence starts with token {name!r} (id {tid})"
    # Which tokens, most common first (at most 5): the count alone does not say what sits there.
    # Without "(id N)": reports read a single position-0 id from that pattern.
    counts = Counter(int(s[0]) for s in sequences).most_common()
    shown = ", ".join(f"{(tokenizer.convert_ids_to_tokens(t) if tokenizer is not None else str(t))!r} "
                      f"in {n}" for t, n in counts[:5])
    more = f", {len(counts) - 5} more" if len(counts) > 5 else ""
    return (f"no BOS; position 0 holds an ordinary text token ({len(firsts)} distinct first tokens: "
            f"{shown}{more} of {len(sequences)} sequences)")
