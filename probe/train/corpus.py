"""Training text that needs no download, a small BPE tokenizer, and the packed token rows.

Default corpus: the Python standard library's own `.py` files (code, comments and docstrings),
found under `sysconfig.get_paths()["stdlib"]`. The file list is fixed by rule, not by machine:
every `.py` file below the stdlib folder in sorted relative-path order, minus tests, vendored
packages, codec tables and machine-generated files (EXCLUDED_PARTS / EXCLUDED_PREFIXES). One file
is one document.

Held-out split: a document is held out when the SHA-256 of its name (the relative path for the
stdlib, `FILE:INDEX` for user data) falls in the first `heldout_permille` of 1000 buckets. The
split depends only on the name, so a file that is held out on one Python version is held out on
every version, and shipped checkpoints never saw the held-out text of a newer Python's stdlib
under the same name. When the rule leaves one side empty (a single file, a handful of
documents), the last `heldout_permille` of the token stream is held out instead (the tokenizer's
merges are then learned on all of the text, held-out tail included: a negligible leak, stated).

Packing: the documents of a split are tokenised, joined with the EOS token between them and cut
into rows. With `bos="prepend"` each row is `[BOS] + (seq_len - 1) tokens`, so position 0 always
holds the same token (the setting in which the literature's first-token sinks form); with
`bos="none"` each row is `seq_len` tokens and position 0 holds whatever token the cut left there.
"""
from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.errors import ProbeError
from .config import DEFAULT_HELDOUT_PERMILLE

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = (BOS, EOS, PAD)              # ids 0, 1, 2 in every tokenizer probe trains
# Path parts that exclude a stdlib file: tests, IDLE, vendored/third-party code, codec tables
# (generated character maps), demo scripts and the 2to3 fixers' test data.
EXCLUDED_PARTS = {"test", "tests", "idle_test", "idlelib", "site-packages", "dist-packages",
                  "__pycache__", "encodings", "turtledemo", "lib2to3", "ensurepip", "venv",
                  "__phello__"}
# Machine-generated files whose content depends on the machine that built Python.
EXCLUDED_PREFIXES = ("_sysconfigdata", "config-")
TOKENIZER_TRAIN_CHARS = 4_000_000            # the tokenizer learns its merges on this much text


@dataclass
class Document:
    name: str
    text: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_documents(root: Path | None = None) -> list[Document]:
    """The default corpus: the stdlib's .py files, one document each, in sorted path order."""
    root = Path(root) if root else stdlib_root()
    docs = []
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root)
        if EXCLUDED_PARTS.intersection(rel.parts[:-1]) or rel.name.startswith(EXCLUDED_PREFIXES) \
                or any(part.startswith(EXCLUDED_PREFIXES) for part in rel.parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            docs.append(Document(rel.as_posix(), text))
    if not docs:
        raise ProbeError(f"found no Python sources under {root}; pass --data FILES")
    return docs


def file_documents(paths) -> list[Document]:
    """User data: text files, folders of text files or JSONL with a text field, in the order given."""
    from ..data.sequences import read_documents

    docs = []
    for raw in paths:
        path = Path(raw)
        texts, ids = read_documents(path)
        if texts is None:
            raise ProbeError(f"{path} holds token ids; probe train needs text (it trains its own "
                             "tokenizer)")
        docs += [Document(f"{path.name}:{i}", t) for i, t in enumerate(texts) if t.strip()]
    if not docs:
        raise ProbeError("the training data holds no text")
    return docs


def is_heldout(name: str, permille: int = DEFAULT_HELDOUT_PERMILLE) -> bool:
    bucket = int(hashlib.sha256(name.encode("utf-8")).hexdigest()[:8], 16) % 1000
    return bucket < permille


def split_documents(docs: list[Document], permille: int = DEFAULT_HELDOUT_PERMILLE):
    """(train, heldout) by the name-hash rule; either may be empty (see `pack`)."""
    train = [d for d in docs if not is_heldout(d.name, permille)]
    heldout = [d for d in docs if is_heldout(d.name, permille)]
    return train, heldout


# -------------------------------------------------------------------------------- tokenizer

def train_tokenizer(texts: list[str], vocab_size: int, bos: str, max_chars: int = TOKENIZER_TRAIN_CHARS):
    """A byte-level BPE tokenizer (no unknown tokens) learned on the first `max_chars` of `texts`.

    With bos="prepend" the tokenizer itself prepends BOS when called with add_special_tokens=True,
    so `probe analyze --bos auto` puts the same token at position 0 as training did.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ProbeError(f"--vocab-size must be at least {256 + len(SPECIAL_TOKENS)} (the 256 bytes "
                         "plus BOS, EOS and PAD)")
    sample, size = [], 0
    for text in texts:
        sample.append(text[: max_chars - size])
        size += len(sample[-1])
        if size >= max_chars:
            break
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(sample, trainer)
    if bos == "prepend":
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, tok.token_to_id(BOS))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   model_max_length=1_000_000)


# -------------------------------------------------------------------------------- packing

def encode(tokenizer, docs: list[Document]) -> list[list[int]]:
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer")
    return [e.ids for e in backend.encode_batch([d.text for d in docs], add_special_tokens=False)]


def stream(id_lists: list[list[int]], eos_id: int) -> torch.Tensor:
    out: list[int] = []
    for n, ids in enumerate(id_lists):
        if n:
            out.append(eos_id)
        out.extend(ids)
    return torch.tensor(out, dtype=torch.long)


def pack(tokens: torch.Tensor, seq_len: int, bos_id: int | None) -> torch.Tensor:
    """(N, seq_len) rows; the tail that does not fill a row is dropped."""
    body = seq_len - 1 if bos_id is not None else seq_len
    n = len(tokens) // body
    rows = tokens[: n * body].view(n, body)
    if bos_id is not None:
        rows = torch.cat([torch.full((n, 1), bos_id, dtype=torch.long), rows], dim=1)
    return rows


@dataclass
class Corpus:
    train: torch.Tensor          # (N, seq_len) int64
    heldout: torch.Tensor        # (M, seq_len) int64
    heldout_stream: torch.Tensor  # held-out tokens before packing (for evaluation at other lengths)
    heldout_docs: list[Document]
    description: dict

    def write_heldout(self, out: Path) -> None:
        """OUT/heldout.txt: the held-out documents, for `probe analyze --data` (the synthetic
        route writes token-id files instead; see synthetic.py)."""
        from ..core.atomic import write_text

        write_text(Path(out) / "heldout.txt", "\n\n".join(d.text for d in self.heldout_docs))


def build_corpus(docs: list[Document], tokenizer, *, seq_len: int, bos: str,
                 heldout_permille: int = DEFAULT_HELDOUT_PERMILLE, source: str = "") -> Corpus:
    bos_id = tokenizer.bos_token_id if bos == "prepend" else None
    eos_id = tokenizer.eos_token_id
    train_docs, held_docs = split_documents(docs, heldout_permille)
    note = "documents split by name hash"
    if not train_docs or not held_docs:
        # Too few documents for the hash rule: hold out the end of the token stream instead.
        whole = stream(encode(tokenizer, docs), eos_id)
        cut = len(whole) - max(seq_len, len(whole) * heldout_permille // 1000)
        if cut < seq_len:
            raise ProbeError(f"the training data has only {len(whole)} tokens; need at least "
                             f"{2 * seq_len} for one training and one held-out row of {seq_len}")
        train_stream, held_stream = whole[:cut], whole[cut:]
        note = f"too few documents for the name-hash split: last {len(held_stream)} tokens held out"
        held_docs = [Document("heldout-tail", tokenizer.decode(held_stream.tolist()))]
    else:
        train_stream = stream(encode(tokenizer, train_docs), eos_id)
        held_stream = stream(encode(tokenizer, held_docs), eos_id)
    train, heldout = pack(train_stream, seq_len, bos_id), pack(held_stream, seq_len, bos_id)
    if len(train) == 0 or len(heldout) == 0:
        raise ProbeError(f"the data is too small for --seq-len {seq_len}: {len(train_stream)} training "
                         f"and {len(held_stream)} held-out tokens")
    name_split = note.startswith("documents")
    description = {
        "source": source, "documents": len(docs),
        "train_documents": len(docs) - len(held_docs) if name_split else len(docs),
        "heldout_documents": len(held_docs) if name_split else 0,
        "split": note, "heldout_permille": heldout_permille,
        "train_tokens": len(train_stream), "heldout_tokens": len(held_stream),
        "train_rows": len(train), "heldout_rows": len(heldout),
        "bos": bos, "bos_token_id": bos_id, "eos_token_id": eos_id,
    }
    return Corpus(train, heldout, held_stream, held_docs, description)
