"""The logits as the loss reads them: a block at a time, never all at once where avoidable.

A forward pass returns (B, T, V) logits: at T = 32768 that is 6.4 GB for SmolLM2's 49,152-token
vocabulary and 34 GB for Gemma 3's 262,144, far more than the rest of the pass, and even at
T = 512 writing them (100 MB) and reading them back for the loss's log-sum-exp costs a tenth of
the output head. The loss reads logits only through their next-token loss (metrics/loss/), so
they need not exist at all: the model computes no logits, or those of its last position only
(`logits_to_keep`), the decoder's final hidden state (B, T, C) is kept, and `LazyLogits`
applies the output head to it a tile at a time (rows x VOCAB_BLOCK head rows, a log-sum-exp
carried over the tiles: `next_token_nll`), or a block of rows at a time for other readers.

The model's own head applies: `get_output_embeddings()` and the config's final soft-capping
(Gemma). Whether that is all the model does after its decoder is checked on the model's first
batch (its own last-position logits against the head's): once per model object, its forward
and its head (`_VERDICTS`), and on every batch past LAZY_BYTES. A model that does more (scales
its logits, say) keeps its own full logits where they fit; past LAZY_BYTES probe stops with one
line instead of measuring a loss the model does not have.
"""
from __future__ import annotations

import contextlib
import inspect
import weakref

import torch
from torch import nn

from ..core.errors import ProbeError

LAZY_BYTES = 1 << 30          # full logits above this: computed block by block
BLOCK_BYTES = 1 << 26         # the logits of one lazy block: the head's weights are read once per
                              # block, so blocks of a few hundred rows (SmolLM2: 341), not a few dozen
# The tiled loss: a product of rows x VOCAB_BLOCK logits (TILE_ELEMENTS: 8 MB of float32) stays in
# the cache for its log-sum-exp, where (T, V) logits go to memory and back. Each tile reads
# VOCAB_BLOCK rows of the head, and the head is read once per TILE_ELEMENTS // VOCAB_BLOCK rows.
VOCAB_BLOCK = 1024
TILE_ELEMENTS = 1 << 21
# Per model object: whether its logits are its head applied to its decoder's output, for the
# forward and head it had when checked ((forward, head id, softcap) -> bool).
_VERDICTS: "weakref.WeakKeyDictionary[nn.Module, tuple]" = weakref.WeakKeyDictionary()


class LazyLogits:
    """(B, T, V) logits as the loss reads them: `shape`, `device`, `x[b, start:end]`; `rows`: the
    rows a reader asks for at a time (BLOCK_BYTES of logits)."""

    def __init__(self, hidden: torch.Tensor, head, softcap: float | None, vocab: int):
        self.hidden = hidden                                   # (B, T, C), after the final norm
        self.head, self.softcap = head, softcap
        self.shape = (*hidden.shape[:2], vocab)
        self.device = hidden.device
        self.rows = max(1, BLOCK_BYTES // (vocab * hidden.element_size()))

    def __getitem__(self, index) -> torch.Tensor:
        logits = self.head(self.hidden[index])                 # (..., V)
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    @property
    def tiled(self) -> bool:
        """Whether next_token_nll can read the head a block of its rows at a time: a plain
        nn.Linear (its weight rows are the vocabulary's) beside the hidden state, not one that a
        device map moves or offloads (accelerate's `_hf_hook`); another head is applied whole."""
        head = self.head
        return (type(head) is nn.Linear and not hasattr(head, "_hf_hook")
                and head.weight.device == self.device)

    def next_token_nll(self, input_ids: torch.Tensor, batch_rows=None) -> torch.Tensor:
        """(len(batch_rows), T - 1) float32: -log p(token t + 1 | tokens <= t), as
        metrics.loss.reduce.next_token_nll gives it from full logits, with no (T, V) logits: per
        tile of rows the head's VOCAB_BLOCK rows at a time, each tile's log-sum-exp added in by
        logaddexp and the target's logit read from the tile that holds it. The sums run in
        another order than one log-sum-exp over a row, so the losses agree with the full
        logits' to float32 rounding (not bit for bit)."""
        B, T, V = self.shape
        weight, bias = self.head.weight, self.head.bias                # (V, C), (V,) or None
        target = input_ids[:, 1:].to(self.device)
        rows = max(1, TILE_ELEMENTS // VOCAB_BLOCK)
        blocks = range(0, V, VOCAB_BLOCK)
        batch_rows = range(B) if batch_rows is None else batch_rows
        out = torch.empty(len(batch_rows), max(T - 1, 0), dtype=torch.float32, device=self.device)
        for i, b in enumerate(batch_rows):
            for start in range(0, T - 1, rows):
                end = min(start + rows, T - 1)
                x, t = self.hidden[b, start:end], target[b, start:end]        # (n, C), (n,)
                lse = torch.full((end - start,), -torch.inf, dtype=torch.float32, device=self.device)
                picked = torch.empty(end - start, dtype=torch.float32, device=self.device)
                # The rows whose target lies in each vocabulary block, grouped by block.
                block = torch.div(t, VOCAB_BLOCK, rounding_mode="floor")
                order = torch.argsort(block, stable=True)
                ends = torch.bincount(block, minlength=len(blocks)).cumsum(0).tolist()
                for k, v0 in enumerate(blocks):
                    part = nn.functional.linear(x, weight[v0:v0 + VOCAB_BLOCK],
                                                None if bias is None else bias[v0:v0 + VOCAB_BLOCK])
                    if self.softcap:
                        part = torch.tanh(part / self.softcap) * self.softcap
                    part = part.float()                                         # (n, VOCAB_BLOCK)
                    first = ends[k - 1] if k else 0
                    if ends[k] > first:
                        here = order[first:ends[k]]
                        picked[here] = part[here, t[here] - v0]
                    lse = torch.logaddexp(lse, logsumexp_(part))                 # part is spent
                out[i, start:end] = lse - picked
        return out


def logsumexp_(x: torch.Tensor) -> torch.Tensor:
    """torch.logsumexp(x, dim=-1) for x (n, V) float, made in x's own memory (x is overwritten):
    the operations of torch's own (the row maximum, an infinite maximum taken as 0, the exp of
    the differences, their sum, its log plus the maximum), so the same values bit for bit,
    without a second (n, V) tensor to write and read (a tile's log-sum-exp a third faster)."""
    peak = x.amax(-1, keepdim=True)                                      # (n, 1)
    peak.masked_fill_(peak.abs() == float("inf"), 0.0)
    return x.sub_(peak).exp_().sum(-1).log_().add_(peak[:, 0])          # (n,)


def full_bytes(model, batch: int, length: int) -> int:
    head = model.get_output_embeddings()
    vocab = getattr(head, "out_features", None) or model.config.get_text_config().vocab_size
    return batch * length * vocab * next(model.parameters()).element_size()


def _own_logits_check(own: torch.Tensor, lazy: LazyLogits) -> bool:
    """Whether the model's own last-position logits (B, 1, V) are its head's (lazy)."""
    mine = lazy[:, -1:]
    return own.shape == mine.shape and bool(torch.allclose(own.float(), mine.float(), rtol=1e-4, atol=1e-4))


def _keeps_tensor_positions(model) -> bool:
    """Whether the model's forward takes `logits_to_keep` as a tensor of positions (then an empty
    one asks for no logits at all), as transformers' slice_logits_to_keep reads it."""
    parameter = inspect.signature(model.forward).parameters.get("logits_to_keep")
    return parameter is not None and "Tensor" in str(parameter.annotation)


@contextlib.contextmanager
def forward_for(model, *, batch: int, length: int, quiet=None):
    """Yields forward(ids) -> logits: the model's own (B, T, V) logits, or LazyLogits.

    LazyLogits when the full logits would exceed LAZY_BYTES for `batch` x `length` tokens (the
    check on every batch), and, given `quiet`, at every length where the model's logits are its
    head's (checked on its first batch, once per model object): no logits are made at all,
    the loss tiles the head. quiet: a context manager factory under which a forward feeds no
    metric (the pass's Pass.quiet): a model found to do more after its decoder is run again
    under it for its own logits, so that its first batch is not counted twice."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    keeps = head is not None and "logits_to_keep" in inspect.signature(model.forward).parameters
    fits = full_bytes(model, batch, length) <= LAZY_BYTES if keeps else True
    softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None) if keeps else None
    # The verdict holds for this forward and head: a patched forward or another head is checked again.
    key = (model.__dict__.get("forward", type(model).forward), id(head), softcap)
    verdict = _VERDICTS.get(model, (None, None))
    known = verdict[1] if verdict[0] == key else None
    tiling = (keeps and quiet is not None and type(head) is nn.Linear and _keeps_tensor_positions(model)
              and known is not False)
    if not keeps or (fits and not tiling):
        yield lambda ids: model(input_ids=ids, use_cache=False).logits
        return
    decoder = model.get_decoder()
    kept = {}

    def keep(module, args, output):
        kept["h"] = output[0] if isinstance(output, tuple) else output.last_hidden_state

    vocab = head.out_features

    def forward(ids):
        nonlocal known
        if fits and known is False:        # found to do more after its decoder: its own logits
            return model(input_ids=ids, use_cache=False).logits
        check = not fits or known is None
        if check:                          # the model's last-position logits, to check against
            own = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits    # (B, 1, V)
        else:                              # checked already: no logits at all
            model(input_ids=ids, use_cache=False, logits_to_keep=torch.empty(0, dtype=torch.long, device=ids.device))
        lazy = LazyLogits(kept.pop("h"), head, softcap, vocab)
        if not check:
            return lazy
        same = _own_logits_check(own, lazy)
        if not fits:
            if not same:
                raise ProbeError(f"{type(model).__name__} does more after its decoder than its output head: "
                                 "probe cannot compute its logits block by block; lower --seq-len or "
                                 "--batch-size so that the full logits fit")
            return lazy
        known = same
        _VERDICTS[model] = (key, same)
        if same:
            return lazy
        with quiet():                      # its own full logits; this batch's metrics fed once
            return model(input_ids=ids, use_cache=False).logits

    handle = decoder.register_forward_hook(keep)
    try:
        yield forward
    finally:
        handle.remove()
