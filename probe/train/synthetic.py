"""Synthetic training data in which attention heads often have nothing to read.

`--data synthetic:noise-copy` and `--data synthetic:noise-copy-marked` (the data on which docs/training.md's pilot runs grew a baseline sink).
Every row is one of two kinds, drawn independently per row (a share `noise_frac` are noise):

  noise  i.i.d. uniform content tokens: nothing earlier in the row helps predict the next one,
         so a head that must attend somewhere has nothing useful to attend to
  copy   a random segment of `copy_len` content tokens, repeated until the row is full: after
         the first segment every token is predictable by looking `copy_len` tokens back

Position 0 holds `<|bos|>` in every row of `noise-copy` (the row type is not marked; with
`--bos none` there is no first token and the body starts at position 0), and `<|noise|>` or
`<|copy|>` in `noise-copy-marked` (the first token says what kind of row follows). For the same
seed and parameters both tasks draw the same bodies, so they differ only at position 0.

Determinism: rows are drawn in blocks of BLOCK_ROWS; block b of split s ("train" or "heldout")
comes from a torch.Generator seeded with SHA-256("probe-synthetic", seed, s, b), so the data is a
function of the seed and the parameters only, and the first k rows do not depend on how many rows
are asked for. The held-out rows come from their own seed stream, and any held-out row equal to
a training row is dropped (possible only with a tiny vocabulary or segment), so the two sets are
disjoint by construction, not just by probability.

Token ids: 0 `<|bos|>`, 1 `<|eos|>`, 2 `<|pad|>` (as in every tokenizer probe trains), 3
`<|unk|>`, 4 `<|noise|>`, 5 `<|copy|>`, then content tokens `t0`, `t1`, ... from id 6. The saved
tokenizer is a word-level one over those names that does not add BOS: the held-out `.npy` files
already hold the first token, so `probe analyze --per-document --bos none` reads the rows exactly
as they were trained.
"""
from __future__ import annotations

import hashlib
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.errors import ProbeError
from .config import SYNTHETIC_PREFIX, TrainConfig
from .corpus import BOS, EOS, PAD, Corpus

UNK, NOISE, COPY = "<|unk|>", "<|noise|>", "<|copy|>"
SPECIALS = (BOS, EOS, PAD, UNK, NOISE, COPY)
BOS_ID, NOISE_ID, COPY_ID = 0, 4, 5
FIRST_CONTENT_ID = len(SPECIALS)
BLOCK_ROWS = 1024
HELDOUT_ROWS = 512
# A fresh row for every training example up to this many rows (64 MiB of int64 at 128 tokens);
# longer runs cycle through them in a new order each epoch, as with text.
MAX_TRAIN_ROWS = 65_536
HELDOUT_FILES = {"all": "heldout.npy", "noise": "heldout-noise.npy", "copy": "heldout-copy.npy"}


@dataclass(frozen=True)
class Task:
    name: str                 # noise-copy | noise-copy-marked
    content_vocab: int
    copy_len: int
    noise_frac: float
    seq_len: int
    first_token: bool         # False only for noise-copy with --bos none

    @property
    def marked(self) -> bool:
        return self.name.endswith("-marked")

    @property
    def body(self) -> int:
        return self.seq_len - 1 if self.first_token else self.seq_len

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> "Task":
        cfg.check()          # among others: the segment is shorter than the row body
        return cls(cfg.synthetic_task, cfg.vocab_size, cfg.copy_len, cfg.noise_frac, cfg.seq_len,
                   cfg.bos == "prepend")

    def loss_floor(self) -> float:
        """Mean next-token loss of a model that knows the row type and copies perfectly.

        Noise targets and the first segment of a copy row are uniform (ln V each); the rest is
        free. In noise-copy the model must also infer the row type, so its floor is a little
        higher; this is the reference for both.
        """
        predictions = self.seq_len - 1
        # Without a first token, position 0 is the segment's first token and is not predicted.
        uniform_copy = self.copy_len if self.first_token else self.copy_len - 1
        uniform = self.noise_frac * predictions + (1 - self.noise_frac) * uniform_copy
        return uniform * math.log(self.content_vocab) / predictions


def _block_seed(seed: int, split: str, block: int) -> int:
    # The key holds neither the task nor the marker, so noise-copy and noise-copy-marked share
    # their bodies; the split name keeps the training and held-out streams apart.
    key = f"probe-synthetic|seed={seed}|split={split}|block={block}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & (2**63 - 1)


def draw_block(task: Task, seed: int, split: str, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows (BLOCK_ROWS, seq_len) int64, is_noise (BLOCK_ROWS,) bool) of one block."""
    gen = torch.Generator().manual_seed(_block_seed(seed, split, block))
    n, body, v = BLOCK_ROWS, task.body, task.content_vocab
    is_noise = torch.rand(n, generator=gen) < task.noise_frac
    noise = torch.randint(v, (n, body), generator=gen)
    segment = torch.randint(v, (n, task.copy_len), generator=gen)
    copy = segment.repeat(1, -(-body // task.copy_len))[:, :body]
    rows = torch.where(is_noise[:, None], noise, copy) + FIRST_CONTENT_ID
    if task.first_token:
        if task.marked:
            first = torch.where(is_noise, NOISE_ID, COPY_ID)
        else:
            first = torch.full((n,), BOS_ID)
        rows = torch.cat([first[:, None].to(torch.long), rows], dim=1)
    return rows, is_noise


def draw_rows(task: Task, seed: int, split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first n rows of a split's stream."""
    blocks = [draw_block(task, seed, split, b) for b in range(-(-n // BLOCK_ROWS))]
    rows = torch.cat([r for r, _ in blocks])[:n]
    kinds = torch.cat([k for _, k in blocks])[:n]
    return rows, kinds


def draw_heldout(task: Task, seed: int, train: torch.Tensor, n: int = HELDOUT_ROWS,
                 max_blocks: int = 64) -> tuple[torch.Tensor, torch.Tensor, int]:
    """n held-out rows from the held-out stream, none equal to a training row.

    Returns (rows, is_noise, dropped): `dropped` counts held-out draws that matched a training
    row and were skipped (recorded in train_config.json).
    """
    seen = {row.tobytes() for row in train.numpy()}
    rows, kinds, dropped = [], [], 0
    for block in range(max_blocks):
        block_rows, block_kinds = draw_block(task, seed, "heldout", block)
        for row, kind in zip(block_rows, block_kinds):
            if row.numpy().tobytes() in seen:
                dropped += 1
                continue
            rows.append(row)
            kinds.append(kind)
            if len(rows) == n:
                return torch.stack(rows), torch.stack(kinds), dropped
    raise ProbeError(f"could not draw {n} held-out rows unlike every training row (vocabulary "
                     f"{task.content_vocab}, --copy-len {task.copy_len} are too small); raise them")


def synthetic_tokenizer(content_vocab: int):
    """Word-level tokenizer over the special and content token names; it adds no BOS."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {name: i for i, name in enumerate(SPECIALS)}
    vocab.update({f"t{i}": FIRST_CONTENT_ID + i for i in range(content_vocab)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(SPECIALS))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, unk_token=UNK, model_max_length=1_000_000)


@dataclass
class SyntheticCorpus(Corpus):
    heldout_noise: torch.Tensor = None   # (M,) bool: which held-out rows are noise rows

    def write_heldout(self, out: Path) -> None:
        """heldout.npy (every held-out row, in order), heldout-noise.npy, heldout-copy.npy."""
        parts = {"all": self.heldout, "noise": self.heldout[self.heldout_noise],
                 "copy": self.heldout[~self.heldout_noise]}
        for kind, rows in parts.items():
            if len(rows):
                _save_npy(Path(out) / HELDOUT_FILES[kind], rows)


def _save_npy(path: Path, rows: torch.Tensor) -> None:
    import numpy as np

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, rows.numpy().astype(np.int64))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build(cfg: TrainConfig, tokenizer=None):
    """(tokenizer, SyntheticCorpus) for a config with --data synthetic:TASK."""
    task = Task.from_config(cfg)
    if tokenizer is None:
        tokenizer = synthetic_tokenizer(task.content_vocab)
    elif len(tokenizer) != FIRST_CONTENT_ID + task.content_vocab:
        raise ProbeError(f"the saved tokenizer has {len(tokenizer)} tokens, not the "
                         f"{FIRST_CONTENT_ID + task.content_vocab} of this synthetic task")
    n_train = min(cfg.steps * cfg.batch_size, MAX_TRAIN_ROWS)
    train, train_noise = draw_rows(task, cfg.seed, "train", n_train)
    heldout, held_noise, dropped = draw_heldout(task, cfg.seed, train)
    description = {
        "source": SYNTHETIC_PREFIX + task.name, "task": task.name, "marked": task.marked,
        "content_tokens": task.content_vocab, "first_content_id": FIRST_CONTENT_ID,
        "copy_len": task.copy_len, "noise_frac": task.noise_frac,
        "first_token": ("<|noise|> or <|copy|> (the row type)" if task.marked
                        else BOS if task.first_token else "none (the row body starts at 0)"),
        "token_ids": {name: i for i, name in enumerate(SPECIALS)},
        "split": "separate seed streams (SHA-256 of seed, split, block); held-out rows equal to "
                 "a training row dropped",
        "heldout_dropped_as_duplicates": dropped,
        "train_rows": len(train), "train_noise_rows": int(train_noise.sum()),
        "heldout_rows": len(heldout), "heldout_noise_rows": int(held_noise.sum()),
        "heldout_files": [HELDOUT_FILES[k] for k, present in
                          (("all", True), ("noise", held_noise.any()), ("copy", (~held_noise).any()))
                          if present],
        "loss_floor_known_type": round(task.loss_floor(), 4),
        "train_tokens": train.numel(), "heldout_tokens": heldout.numel(),
        "bos": cfg.bos, "bos_token_id": BOS_ID if task.first_token and not task.marked else None,
        "eos_token_id": tokenizer.eos_token_id,
    }
    # There is no natural held-out token stream (evaluate.length_losses packs one); the rows
    # back to back stand in for it.
    corpus = SyntheticCorpus(train, heldout, heldout.reshape(-1), [], description, held_noise)
    return tokenizer, corpus
