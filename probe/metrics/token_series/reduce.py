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
    gdn           linear_attn.hook_gdn (only with `gdn`)       -> gdn_beta, gdn_decay, gdn_gate and
                  their _heads (value heads), from the event's GDNCall (probe/capture/gdn.py);
                  with `anatomy` gdn_key0(_heads): the per-query key-0 shares the GDN metric
                  (order 9, before this one) computed for its own tables, left in Batch.derived
                  (probe/metrics/gdn/keys.py KEY0_SHARES): the per-key split is not run twice
"""
from __future__ import annotations

import numpy as np
import torch

from ...core.events import ATTENTION, GATE, GDN
from ..base import Metric
from .. import kernels
from ..bins import row_extremes, row_scan
from ..gdn.keys import KEY0_SHARES
from ..loss.reduce import PER_TOKEN, next_token_nll
from ..massive.reduce import token_text
from . import DECLARATION, SERIES


def first_at(x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """(n,) int64: per row of x (n, C) the first column equal to value (n,) (x's dtype), a NaN
    value matching the first NaN: the index torch.max / torch.min return with that value, from
    one comparison and one argmax instead of a second reduction that tracks indices (float32
    on the CPU takes kernels.signed_peak instead, from M-Act's scan)."""
    hit = x == value[:, None]                                                   # (n, C) bool
    nan = torch.isnan(value)
    if bool(nan.any()):
        hit |= torch.isnan(x) & nan[:, None]
    return hit.view(torch.uint8).argmax(-1)


def _on(where, x: torch.Tensor):
    """A plan's positions (a slice, or an index tensor) for indexing tensor x."""
    return where if isinstance(where, slice) else where.to(x.device)


def _row_loss(logits, input_ids, row: int) -> torch.Tensor:
    """(T - 1,) the loss of each target of one batch row, as the loss metric computes it (the
    logits may be probe.capture.logits.LazyLogits: never a whole row of them at once)."""
    return next_token_nll(logits, input_ids, batch_rows=[row])[0]          # LossStats.BLOCK at a time


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
        self._plan_of = (None, [])             # (the batch, its plan): see _plan
        self.values: dict[str, np.ndarray] = {}        # name -> (layers, [heads,] limit) float32
        self.ids_parts: list[np.ndarray] = []          # the token ids taken, row by row
        self.pos_parts: list[np.ndarray] = []          # their positions in their rows

    def listens(self, event: str) -> bool:
        if self.limit <= 0:
            return False
        if event == ATTENTION:
            return bool(getattr(self.options, "anatomy", False))
        if event == GDN:        # listening installs the GDN hooks (capture/hf.py): only with --gdn
            return bool(getattr(self.options, "gdn", False))
        return event != GATE or self.layout.gated

    # -- which rows of a batch are taken ---------------------------------------------------------
    def _plan(self, b) -> list:
        """[(batch row, the valid positions taken: a slice or an (n,) long tensor, their offset in
        the series)] of batch `b`, made at its first event (the events of one forward pass share
        the batch)."""
        if self._plan_of[0] is b:
            return self._plan_of[1]
        plan = []
        if self.taken < self.limit:
            order = sorted(range(b.input_ids.shape[0]), key=lambda r: int(b.seq_index[r]))
            for row in order:
                if int(b.seq_index[row]) != self.next_row or self.taken >= self.limit:
                    break
                positions = torch.nonzero(b.valid[row]).flatten()[: self.limit - self.taken]   # (n,)
                n = len(positions)
                # Valid positions are one range (padding on the right, a window's context on the
                # left): a slice, so each event reads a view of its tensor, not a copy.
                contiguous = n > 0 and int(positions[-1]) - int(positions[0]) + 1 == n
                plan.append((row, slice(int(positions[0]), int(positions[0]) + n) if contiguous else positions,
                             self.taken))
                self.rows.append((self.next_row, len(positions)))
                self.ids_parts.append(b.input_ids[row, positions].cpu().numpy())
                self.pos_parts.append(positions.cpu().numpy())
                self.taken += len(positions)
                self.next_row += 1
        self._plan_of = (b, plan)
        return plan

    def _store(self, name: str, layer: int | None, offset: int, values: torch.Tensor) -> None:
        """values (n,) or (H, n) of one layer (None: the series has one row) at `offset`; H: the
        attention heads, or a GDN layer's value heads."""
        x = values.detach().float().cpu().numpy()
        if name not in self.values:
            heads = (x.shape[0],) if SERIES[name][1] else ()
            self.values[name] = np.full((1 if layer is None else self.layers, *heads, self.limit), np.nan, np.float32)
        self.values[name][0 if layer is None else layer, ..., offset:offset + x.shape[-1]] = x

    # -- the events --------------------------------------------------------------------------------
    def first_key(self, layer, p0, b, uniform=None, finite=None) -> None:       # p0 (B, H, T)
        for row, pos, offset in self._plan(b):
            p = p0[row][:, _on(pos, p0)].float()                                # (H, n)
            self._store("first_token_heads", layer, offset, p)
            self._store("first_token", layer, offset, p.mean(0))

    def gate(self, layer, g, b) -> None:                                        # g (B, T, H, Dg)
        for row, pos, offset in self._plan(b):
            per_head = g[row][_on(pos, g)].float().mean(-1).transpose(0, 1)     # (H, n)
            self._store("gate", layer, offset, per_head.mean(0))
            if g.shape[-1] == 1:
                self._store("gate_heads", layer, offset, per_head)

    def layer_output(self, layer, h, b) -> None:                                # h (B, T, C)
        plan = self._plan(b)
        if not plan:
            return
        scan = row_scan(h, b)
        if scan is not None:        # float32 on the CPU: M-Act's compiled pass gave the largest |h|
            for row, pos, offset in plan:
                at = _on(pos, h)
                peak = scan.row_max[row][at]                                    # (n,)
                _, dim = kernels.signed_peak(h[row][at], peak)                 # where it sits
                self._store("max_abs", layer, offset, peak)
                self._store("max_abs_dim", layer, offset, dim.float())
            return
        # The largest |h| from the largest and the smallest value, shared with M-Act (no |h| copy).
        tops, bottoms = row_extremes(h, b)                                      # (B, T) each
        for row, pos, offset in plan:
            at = _on(pos, h)
            top, bottom = tops[row][at].float(), bottoms[row][at].float()       # (n,)
            high = top >= -bottom
            self._store("max_abs", layer, offset, torch.where(high, top, -bottom))
            # Where it sits: the first dim holding that value, as max / min would say (a NaN row:
            # its first NaN, the value NaN).
            x = h[row][at]                                                      # (n, C)
            self._store("max_abs_dim", layer, offset, first_at(x, torch.where(high, tops[row][at],
                                                                               bottoms[row][at])).float())

    def logits(self, layer, logits, b) -> None:                                 # (B, T, V)
        plan = self._plan(b)
        if not plan:
            return
        # The loss metric (order 5, before this one) leaves each row's loss per target in
        # Batch.derived: the logits are read once. The token at position p has the loss read
        # from the logits at p - 1; position 0 has none (NaN).
        per_row = b.derived(PER_TOKEN, logits, dict)
        for row, pos, offset in plan:
            if row not in per_row:
                per_row[row] = _row_loss(logits, b.input_ids, row)
            nll = torch.cat([per_row[row].new_full((1,), float("nan")), per_row[row]])     # (T,)
            self._store("loss", None, offset, nll[_on(pos, nll)])

    def attention(self, layer, query, b, *, key, value, out, lse, mask, scale, softcap=None) -> None:
        plan = self._plan(b)
        if not plan:
            return
        from ..anatomy.received import shared_received_attention

        score = shared_received_attention(b, query, key, lse, mask, scale, softcap).score()  # (B, H, S)
        for row, pos, offset in plan:
            self._store("received", layer, offset, score[row][:, _on(pos, score)].mean(0))

    def gdn(self, layer, o, b, call=None) -> None:                              # o (B, T, Hv, dv)
        plan = self._plan(b) if call is not None else []
        if not plan:
            return
        shares = b.derived(KEY0_SHARES, o, dict)               # batch row -> (Hv, L), with --anatomy
        for row, pos, offset in plan:
            at = _on(pos, call.beta)
            per_head = {"gdn_beta": call.beta[row][at].float(),                          # (n, Hv)
                        "gdn_decay": call.g[row][at].float().exp(),
                        "gdn_gate": torch.nn.functional.silu(call.z[row][at].float()).mean(-1)}
            for name, x in per_head.items():
                self._store(name + "_heads", layer, offset, x.T)
                self._store(name, layer, offset, x.mean(-1))
            share = shares.get(row)
            if share is not None:                  # NaN where the query does not count (keys.py)
                share = share[:, _on(pos, share)]                                   # (Hv, n) float64
                self._store("gdn_key0_heads", layer, offset, share)
                self._store("gdn_key0", layer, offset, share.nanmean(0))

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
