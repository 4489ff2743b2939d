"""probe.metrics.token_index: by-token tables with a row per token id of the data give the same rows
as tables over the whole vocabulary, and a token id outside the data is an error, not another
token's row."""
from __future__ import annotations

import pytest
import torch

from probe.metrics.anatomy.stats import AnatomyStats
from probe.metrics.gdn.received import ReceivedStats
from probe.metrics.token_index import TokenIndex

from tests.metrics.test_anatomy_stats import H, V, batch
from tests.metrics.planted_sinks import planted  # noqa: F401 (a fixture test_anatomy_stats needs)


def test_rows_round_trip_in_id_order():
    index = TokenIndex.of(torch.tensor([[40, 7, 7], [1000, 3, 40]]))
    assert len(index) == 4 and index.ids.tolist() == [3, 7, 40, 1000]
    tok = torch.tensor([1000, 3, 40, 7, 40])
    rows = index.slots(tok)
    assert rows.tolist() == [3, 0, 2, 1, 2]
    assert [index.id(r) for r in rows] == tok.tolist()
    dense = TokenIndex.of(None, vocab_size=50)
    assert len(dense) == 50 and torch.equal(dense.slots(tok[1:]), tok[1:]) and dense.id(17) == 17


def test_an_id_outside_the_data_is_refused():
    index = TokenIndex.of(torch.tensor([3, 7, 40]))
    for outside in ([8], [41], [0], [7, 2]):
        with pytest.raises(ValueError, match="not among the 3 ids"):
            index.slots(torch.tensor(outside))


def test_anatomy_token_rows_equal_the_vocabulary_tables():
    """The same batches through a vocabulary-wide AnatomyStats and one over the data's ids."""
    # Ids spread over a larger vocabulary, so that a row is not its token id.
    batches = [(r, 7 * ids + 3, seq, valid) for r, ids, seq, valid in (batch(seed) for seed in (0, 1))]
    vocab = 7 * V + 3
    index = TokenIndex.of(torch.cat([ids.reshape(-1) for _, ids, _, _ in batches]))
    assert len(index) <= V < vocab
    wide = AnatomyStats(0, H, vocab, min_queries=2)
    compact = AnatomyStats(0, H, vocab, min_queries=2, index=index)
    for received, ids, seq, _ in batches:
        assert torch.equal(wide.update(received, ids, seq), compact.update(received, ids, seq))
    assert compact.token_score.shape == (len(index),)
    assert compact.token_rows(None) == wide.token_rows(None)
    assert len(wide.token_rows(None)) > 5       # rows to compare, with ties broken by id
    # Merging two processes' tables (torchrun) keeps the rows aligned.
    again = AnatomyStats(0, H, vocab, min_queries=2, index=index)
    again.update(*batches[0][:3])
    wide_again = AnatomyStats(0, H, vocab, min_queries=2)
    wide_again.update(*batches[0][:3])
    assert compact.merge(again).token_rows(None) == wide.merge(wide_again).token_rows(None)


def test_gdn_received_token_rows_equal_the_vocabulary_tables():
    g = torch.Generator().manual_seed(5)
    Hv, L = 3, 40
    ids = 11 * torch.randint(0, 60, (2, L), generator=g)                # ids 0 .. 649, not rows
    index = TokenIndex.of(ids)
    wide, compact = ReceivedStats(Hv, L, 700), ReceivedStats(Hv, L, 700, index=index)
    for row in range(2):
        total = torch.rand(Hv, L, generator=g, dtype=torch.float64)
        seen = torch.randint(1, 40, (Hv, L), generator=g)
        for stats in (wide, compact):
            stats.finish((total.clone(), seen.clone()), ids[row], row)
    assert compact.token_total.shape == (len(index),) and len(index) <= 60
    assert compact.by_token(k=100) == wide.by_token(k=100) and len(wide.by_token(k=100)) > 5
