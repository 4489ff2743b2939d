"""The tiny training runs the tests of probe/train share: settings, and reading what a run wrote.

Every model is tiny (width 64, 2 layers, a 300-token BPE) and trains for a few steps on a few
kilobytes, so a run takes seconds.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file

from probe.train import TrainConfig

TINY = ["--layers", "2", "--width", "64", "--heads", "2", "--kv-heads", "1", "--seq-len", "32",
        "--batch-size", "4", "--vocab-size", "300", "--lr", "1e-2", "--threads", "1", "--quiet"]


def tiny_config(out, data, **kw) -> TrainConfig:
    base = TrainConfig(out=str(out), data=(str(data),), tokens=12 * 4 * 32, layers=2, width=64,
                       heads=2, kv_heads=1, seq_len=32, batch_size=4, vocab_size=300, lr=1e-2,
                       threads=1, progress=False, eval_every=4)
    return replace(base, **kw)


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def ids(vocab=300, seed=0) -> torch.Tensor:
    """(2, 24) token ids, BOS (0) first."""
    out = torch.randint(3, vocab, (2, 24), generator=torch.Generator().manual_seed(seed))
    out[:, 0] = 0
    return out
