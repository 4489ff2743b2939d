"""What each step trains on and at what learning rate: linear warmup then cosine decay, AdamW
with weight decay on matrices only, and the training rows of a step as a fixed function of
(seed, epoch) (a fresh permutation per epoch, no iterator state, so a resumed run sees the same
rows)."""
from __future__ import annotations

import math

import torch

from .config import TrainConfig


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of the peak lr at 0-based `step`: linear warmup, then cosine to min_lr_ratio."""
    warm, total = cfg.warmup_steps, cfg.steps
    if step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model, cfg: TrainConfig):
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()
    decay = [p for p in params if p.dim() >= 2]          # matrices and the embedding
    no_decay = [p for p in params if p.dim() < 2]        # RMSNorm weights
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    return opt, sched


def batch_indices(step: int, n_rows: int, batch_size: int, seed: int) -> torch.Tensor:
    """Rows of training step `step`: a fixed function of (seed, epoch), no iterator state."""
    start = step * batch_size
    out = []
    for i in range(start, start + batch_size):
        epoch, pos = divmod(i, n_rows)
        out.append(_permutation(seed, epoch, n_rows)[pos])
    return torch.stack(out)


_PERM_CACHE: dict = {}


def _permutation(seed: int, epoch: int, n: int) -> torch.Tensor:
    key = (seed, epoch, n)
    if key not in _PERM_CACHE:
        _PERM_CACHE.clear()
        gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        _PERM_CACHE[key] = torch.randperm(n, generator=gen)
    return _PERM_CACHE[key]
