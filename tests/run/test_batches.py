"""probe.run.batches.for_each_batch: the one batch loop of the pass, the interventions and the exact
control, against Dataset.batches itself."""
from __future__ import annotations

import pytest
import torch

import probe.run.batches
from probe.run.batches import for_each_batch
from probe.data.sequences import build_dataset


@pytest.fixture(scope="module")
def dataset():
    """7 padded rows of unequal length (2 .. 14 tokens), one with sliding-window context."""
    rows = [list(range(3, 3 + n)) for n in (5, 14, 2, 9, 11, 3, 7)]
    ds = build_dataset(rows, None, seq_len=16, bos="none")
    ds.context = [(0, 0)] * len(rows)
    ds.context[1] = (0, 4)                        # row 1: its first 4 tokens are context only
    return ds


class Bar:
    """What progress_bar was asked, and what it was told."""

    def __init__(self, **kwargs):
        self.kwargs, self.n, self.closed = kwargs, 0, False

    def update(self, n):
        self.n += n

    def close(self):
        self.closed = True


@pytest.fixture
def bars(monkeypatch):
    made = []
    monkeypatch.setattr(probe.run.batches, "progress_bar", lambda **kw: made.append(Bar(**kw)) or made[-1])
    return made


def as_lists(batches):
    return [tuple(t.tolist() for t in batch) for batch in batches]


@pytest.mark.parametrize("world", (1, 2, 3))
def test_the_batches_are_the_datasets_own_share(dataset, bars, world):
    for rank in range(world):
        got = as_lists(for_each_batch(dataset, 2, rank=rank, world=world, progress=True))
        assert got == as_lists(dataset.batches(2, 0, rank=rank, world=world))
        bar = bars[-1]
        # The bar counts the tokens that count (context and padding left out), rank 0 only.
        assert bar.n == bar.kwargs["total"] == dataset.shard_tokens(2, rank, world)
        assert bar.kwargs["disable"] == (rank != 0) and bar.closed
    assert sum(b.n for b in bars[-world:]) == dataset.tokens


def test_skipped_batches_are_not_yielded_but_shown_done(dataset, bars):
    whole = as_lists(dataset.batches(2, 0))
    got = as_lists(for_each_batch(dataset, 2, rank=0, world=1, progress=True, skip=2, desc="d"))
    assert got == whole[2:]
    assert bars[-1].n == dataset.tokens and bars[-1].kwargs["desc"] == "d"


def test_the_bar_moves_once_the_caller_is_done_with_a_batch_and_closes_on_an_error(dataset, bars):
    seen = []
    with pytest.raises(KeyboardInterrupt):
        for ids, valid, _ in for_each_batch(dataset, 3, rank=0, world=1, progress=False):
            seen.append(bars[-1].n)
            if len(seen) == 2:
                raise KeyboardInterrupt
    first = int(next(dataset.batches(3, 0))[1].sum())
    assert seen == [0, first] and bars[-1].kwargs["disable"]
    assert bars[-1].closed                         # the loop's generator closed with the loop


def test_batches_are_moved_to_the_device(dataset, bars):
    device = torch.device("meta")
    for ids, valid, seq_index in for_each_batch(dataset, 4, rank=0, world=1, progress=False, device=device):
        assert ids.device == valid.device == seq_index.device == device
