"""Sink anatomy per sequence (per_sequence.csv, with the `anatomy` option): what the bootstrap
intervals of the anatomy numbers resample (probe/intervals/).

    key0_score (S, A, H)   Gu et al.'s importance score of key 0 in each sequence: the mean of
                           P[t, 0] over the valid queries that see it (query 0 included, as in
                           received_by_position.csv); 0 where key 0 is not a valid key
    key0_n (S, A)          1 where key 0 is a valid key of the sequence (a sliding window's
                           context is not), else 0: the cells behind key0_score
    secondary (S, A)       secondary-sink cells (head, key >= 1 above epsilon, seen by enough
                           queries: stats.AnatomyStats) of each sequence and layer

Every sequence holds one key-0 cell per head, so the score summed over sequences over the cells
is received_by_position.csv's score at key 0, and the secondary counts sum to summary.json's
anatomy.secondary_sinks. State: O(sequences x layers x heads).
"""
from __future__ import annotations

import torch

from ..reducers import F64, I64, Reducer, grown
from .received import ReceivedAttention


class SequenceAnatomy(Reducer):
    """Per-sequence anatomy of every attention layer; `sequences`: the dataset's row count when
    known (a fixed shape, as torchrun and --resume need), else it grows with the rows seen."""

    summed = ("key0_score", "key0_n", "secondary")

    def __init__(self, attention_layers: int, heads: int, sequences: int | None = None, device="cpu"):
        S = sequences or 0
        self.fixed = sequences is not None
        self.key0_score = torch.zeros(S, attention_layers, heads, dtype=F64, device=device)
        self.key0_n = torch.zeros(S, attention_layers, dtype=I64, device=device)
        self.secondary = torch.zeros(S, attention_layers, dtype=I64, device=device)

    @property
    def rows(self) -> int:
        return self.key0_n.shape[0]

    def update(self, column: int, received: ReceivedAttention, secondary: torch.Tensor,
               seq_index: torch.Tensor) -> None:
        """column: the layer's index among the attention layers; received: the batch's
        ReceivedAttention; secondary (B,): its rows' secondary-sink cells; seq_index (B,)."""
        device = self.key0_score.device
        seq = seq_index.to(device)
        if not self.fixed and int(seq.max()) + 1 > self.rows:
            for name in self.summed:
                setattr(self, name, grown(getattr(self, name), int(seq.max()) + 1, 0))
        seen = received.count[:, 0].to(device) > 0                                  # (B,)
        total = received.total[:, :, 0].to(device)                                  # (B, H)
        score = torch.where(seen[:, None], total / received.count[:, :1].to(device).clamp_min(1), 0.0)
        self.key0_score[:, column].index_add_(0, seq, score.to(F64))
        self.key0_n[:, column].index_add_(0, seq, seen.long())
        self.secondary[:, column].index_add_(0, seq, secondary.to(device).long())
