"""Per-token series of the first tokens of a run, captured in the same pass (the `token_series`
option: how many tokens; 0: none).

Which tokens: the valid positions of the dataset's rows 0, 1, 2, ... in order, until the option's
count is reached (the last row may be cut). A row is taken only when every row before it was:
a pass that skips its first batches (--resume) or sees only a share of the rows (torchrun,
rank > 0) keeps the contiguous rows from row 0 it saw, or none.

Per event, only the taken rows and positions are read (a few thousand tokens): the rest of the
pass pays one dictionary lookup per event. Values are float32 numpy arrays (layers, [heads,] N),
NaN where a layer has no value (a linear-attention layer has no first-token attention); the run
directory keeps them quantised (probe/results/token_series.py).

    first_key     attn.hook_first_key  P[t, 0] (B, H, T)       -> first_token, first_token_heads
    gate          attn.hook_gate       (B, T, H, Dg)           -> gate, gate_heads (Dg = 1)
    layer_output  hook_resid_post      (B, T, C)               -> max_abs, max_abs_dim
    logits        hook_logits          (B, T, V)               -> loss (at the target's position)
    attention     attn.hook_attention  (only with `anatomy`)   -> received
"""
from __future__ import annotations

import numpy as np
import torch

from ...core.events import ATTENTION, GATE
from ..base import Metric
from ..massive.reduce import token_text
from . import DECLARATION, SERIES


class TokenSeriesCapture(Metric):
    declaration = DECLARATION

    def setup(self) -> None:
        layout = self.layout
        self.limit = int(getattr(self.options, "token_series", 0) or 0)
        self.layers = len(layout.layers)
        self.heads = layout.num_heads
        self.taken = 0                         # tokens taken so far
        self.next_row = 0                      # the dataset row the next taken row must be
        self.rows: list[tuple[int, int]] = []  # (dataset row, tokens taken of it), in order
        self.token_ids = np.zeros(0, np.int64)
        self.positions = np.zeros(0, np.int64)
        self._plan_of = (None, [])             # (batch, [(batch row, positions (n,) tensor, start)])
        self.values: dict[str, np.ndarray] = {}
        self.ids_parts: list[np.ndarray] = []
        self.pos_parts: list[np.ndarray] = []

    def listens(self, event: str) -> bool:
        if self.limit <= 0:
            return False
        if event == ATTENTION:
            return bool(getattr(self.options, "anatomy", False))
        return event != GATE or self.layout.gated

    # -- which rows of a batch are taken ---------------------------------------------------------
    def _plan(self, b) -> list:
        """[(batch row, valid positions taken (n,) long tensor, offset in the series)] of batch
        `b`, made at its first event (every event of one forward pass shares the batch)."""
        if self._plan_of[0] is b:
            return self._plan_of[1]
        plan = []
        if self.taken < self.limit:
            order = sorted(range(b.input_ids.shape[0]), key=lambda r: int(b.seq_index[r]))
            for row in order:
                if int(b.seq_index[row]) != self.next_row or self.taken >= self.limit:
                    break
                positions = torch.nonzero(b.valid[row]).flatten()[: self.limit - self.taken]   # (n,)
                plan.append((row, positions, self.taken))
                self.rows.append((self.next_row, len(positions)))
                self.ids_parts.append(b.input_ids[row, positions].cpu().numpy())
                self.pos_parts.append(positions.cpu().numpy())
                self.taken += len(positions)
                self.next_row += 1
        self._plan_of = (b, plan)
        return plan

    def _store(self, name: str, layer: int | None, offset: int, values: torch.Tensor) -> None:
        """values (n,) or (H, n) of one layer (None: the series has one row) at `offset`."""
        heads = SERIES[name][1]
        if name not in self.values:
            shape = (1 if layer is None else self.layers, *((self.heads,) if heads else ()), self.limit)
            self.values[name] = np.full(shape, np.nan, np.float32)
        x = values.detach().float().cpu().numpy()
        self.values[name][0 if layer is None else layer, ..., offset:offset + x.shape[-1]] = x

    # -- the events --------------------------------------------------------------------------------
    def first_key(self, layer, p0, b, uniform=None, finite=None) -> None:       # p0 (B, H, T)
        for row, pos, offset in self._plan(b):
            p = p0[row][:, pos.to(p0.device)].float()                           # (H, n)
            self._store("first_token_heads", layer, offset, p)
            self._store("first_token", layer, offset, p.mean(0))

    def gate(self, layer, g, b) -> None:                                        # g (B, T, H, Dg)
        for row, pos, offset in self._plan(b):
            per_head = g[row][pos.to(g.device)].float().mean(-1).transpose(0, 1)   # (H, n)
            self._store("gate", layer, offset, per_head.mean(0))
            if g.shape[-1] == 1:
                self._store("gate_heads", layer, offset, per_head)

    def layer_output(self, layer, h, b) -> None:                                # h (B, T, C)
        for row, pos, offset in self._plan(b):
            largest, dim = h[row][pos.to(h.device)].float().abs().max(-1)       # (n,), (n,)
            self._store("max_abs", layer, offset, largest)
            self._store("max_abs_dim", layer, offset, dim.float())

    def logits(self, layer, logits, b) -> None:                                 # (B, T, V)
        for row, pos, offset in self._plan(b):
            # The loss of the token at position p is read from the logits at p - 1; position 0
            # has none (NaN), as the loss metric counts a pair only at p >= 1.
            pos = pos.to(logits.device)
            has = pos >= 1
            x = logits[row][pos[has] - 1].float()                               # (n', V)
            target = b.input_ids[row].to(logits.device)[pos[has]]
            nll = torch.full((len(pos),), float("nan"), device=logits.device)
            nll[has] = torch.logsumexp(x, -1) - x.gather(-1, target[:, None])[:, 0]
            self._store("loss", None, offset, nll)

    def attention(self, layer, query, b, *, key, value, out, lse, mask, scale, softcap=None) -> None:
        plan = self._plan(b)
        if not plan:
            return
        from ..anatomy.received import shared_received_attention

        score = shared_received_attention(b, query, key, lse, mask, scale, softcap).score()  # (B, H, S)
        for row, pos, offset in plan:
            self._store("received", layer, offset, score[row][:, pos.to(score.device)].mean(0))

    # -- once the pass is over -----------------------------------------------------------------------
    def captured(self, done=None) -> dict | None:
        """The series (name -> float32 array, layers x [heads x] N), token ids, dataset rows and
        positions, and each token's text; None when nothing was taken."""
        if not self.taken:
            return None
        n = self.taken
        ids = np.concatenate(self.ids_parts)
        tokenizer = getattr(done, "tokenizer", None)
        texts = {int(t): token_text(tokenizer, int(t)) for t in np.unique(ids)}
        return {"series": {name: values[..., :n] for name, values in self.values.items()},
                "token_ids": ids, "positions": np.concatenate(self.pos_parts),
                "rows": list(self.rows), "texts": texts,
                "layer_types": [p.layer_type for p in self.layout.layers], "heads": self.heads}
