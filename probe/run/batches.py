"""The one loop over a dataset's batches: the analysis pass (pipeline.run_pass), every
intervention pass (interventions.shard_pass) and the exact control (control.count_control) run
through `for_each_batch`, so that all of them see the same batches, shard them over torchrun
processes the same way and show the same progress bar.

    for ids, valid, seq_index in for_each_batch(dataset, 4, rank=0, world=1, progress=True,
                                                desc="analyse m", device=dev):
        ...                        # ids (B, T) int64, valid (B, T) bool, seq_index (B,) int64
"""
from __future__ import annotations

from typing import Iterator

import torch


def for_each_batch(dataset, batch_size: int, *, rank: int, world: int, progress: bool, skip: int = 0,
                   desc: str | None = None, device=None) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """This process's batches of `dataset` (every world-th from rank, Dataset.batches), each
    (input_ids (B, T), valid (B, T), seq_index (B,)), on `device` when one is given.

    rank, world: this process and the number of processes (distributed.group(); 0 and 1 alone),
    never defaulted, so that no loop forgets to share the data out; progress: likewise (the
    options' progress, or False for a loop that shows its own bar).
    skip: batches already counted (a resumed pass): not yielded, but shown as done on the bar.
    progress: a bar of counted tokens (padding and window context left out), on rank 0 only;
    a batch is shown as done once the caller has finished with it (the loop asks for the next).
    """
    bar = progress_bar(total=dataset.shard_tokens(batch_size, rank, world),
                       disable=not progress or rank != 0, desc=desc)
    try:
        for n, (ids, valid, seq_index) in enumerate(dataset.batches(batch_size, 0, rank=rank, world=world)):
            counted = int(valid.sum())
            if n >= skip:                    # else counted before an interruption (resume)
                if device is not None:
                    ids, valid, seq_index = ids.to(device), valid.to(device), seq_index.to(device)
                yield ids, valid, seq_index
            bar.update(counted)
    finally:
        bar.close()


def progress_bar(**kwargs):
    """A bar counting tokens (probe/core/progress.py: a widget in notebooks, text on a terminal)."""
    from ..core.progress import bar

    return bar(unit="tok", unit_scale=True, **kwargs)
