"""The data of a training run: documents read, the tokenizer trained (or reused), split and packed."""
from __future__ import annotations

from dataclasses import dataclass

from . import corpus as corpus_mod
from .config import TrainConfig


@dataclass
class Prepared:
    """Tokenizer and packed corpus, shared by the arms of one `--arm all` run."""
    tokenizer: object
    corpus: corpus_mod.Corpus


def prepare_data(cfg: TrainConfig, tokenizer=None) -> Prepared:
    """Read the documents, train (or reuse) the tokenizer, split and pack."""
    if cfg.synthetic_task:
        from .synthetic import build

        return Prepared(*build(cfg, tokenizer))
    docs = corpus_mod.file_documents(cfg.data) if cfg.data else corpus_mod.stdlib_documents()
    source = ", ".join(cfg.data) if cfg.data else f"python {python_version()} stdlib sources"
    if tokenizer is None:
        train_docs, _ = corpus_mod.split_documents(docs, cfg.heldout_permille)
        texts = [d.text for d in (train_docs or docs)]
        tokenizer = corpus_mod.train_tokenizer(texts, cfg.vocab_size, cfg.bos)
    data = corpus_mod.build_corpus(docs, tokenizer, seq_len=cfg.seq_len, bos=cfg.bos,
                                   heldout_permille=cfg.heldout_permille, source=source)
    return Prepared(tokenizer, data)


def python_version() -> str:
    import sys

    return ".".join(map(str, sys.version_info[:3]))
