"""The rows of a by-token table: the token ids of the data, or the whole vocabulary.

Sink anatomy (received_by_token.csv) and the GDN layers' received shares (gdn_received_by_token.csv)
sum per token id, in every layer. Over the whole vocabulary such tables hold 16-24 bytes per id and
layer, whatever the data: 35 MB over SmolLM2's 30 layers (49,152 ids), about 140 MB over a
Qwen3.5's 248,320, which at short lengths is more than the forward pass itself needs. probe.analyze
knows its data before the pass, so its tables have one row per id the data holds (a few kB at a few
thousand tokens); a Capture made without the data (`vocab_size=` only) keeps a row per vocabulary id.
Under torchrun every process builds the same dataset, so the tables have one shape in every process
and in a --resume checkpoint (whose shapes resume.restore checks).
"""
from __future__ import annotations

import torch


class TokenIndex:
    """Token id -> row of a by-token table (`slots`) and back (`ids`); rows in increasing id order,
    so ordering rows orders ids."""

    def __init__(self, ids: torch.Tensor | None, *, dense: int = 0):
        """ids: the sorted, distinct token ids the tables hold (U,), or None for rows 0 .. dense - 1."""
        self.ids = None if ids is None else ids.to("cpu", torch.int64)
        self.size = dense if ids is None else len(self.ids)
        self._on: dict = {}

    @classmethod
    def of(cls, token_ids=None, vocab_size: int | None = None) -> "TokenIndex":
        """The data's ids when known (any integer tensor or sequence of them), else the vocabulary."""
        if token_ids is None:
            return cls(None, dense=int(vocab_size or 0))
        return cls(torch.unique(torch.as_tensor(token_ids, dtype=torch.int64).reshape(-1)))   # sorted

    def __len__(self) -> int:
        return self.size

    def slots(self, tok: torch.Tensor) -> torch.Tensor:
        """(N,) int64 rows of token ids tok (N,). A token id the index does not hold is an error,
        never a row of another token."""
        if self.ids is None:
            return tok
        ids = self._on.get(tok.device)
        if ids is None:
            ids = self._on[tok.device] = self.ids.to(tok.device)
        slot = torch.searchsorted(ids, tok)
        if tok.numel() and not bool((ids[slot.clamp_max(len(ids) - 1)] == tok).all()):
            missing = tok[ids[slot.clamp_max(len(ids) - 1)] != tok][:3].tolist()
            raise ValueError(f"token ids {missing} are not among the {len(ids)} ids of the data the "
                             "by-token tables were made for")
        return slot

    def id(self, slot: int) -> int:
        """The token id of a row."""
        return int(slot) if self.ids is None else int(self.ids[int(slot)])
