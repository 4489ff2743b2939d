"""Logits a block of positions at a time, for long sequences.

A forward pass returns (B, T, V) logits: at T = 32768 that is 6.4 GB for SmolLM2's 49,152-token
vocabulary and 34 GB for Gemma 3's 262,144, far more than the rest of the pass. The loss reads
them a block of rows at a time (metrics/loss/), so they need not exist all at once: when the
full logits would exceed LAZY_BYTES, the model computes the logits of its last position only
(`logits_to_keep=1`), the decoder's final hidden state (B, T, C) is kept, and `LazyLogits`
applies the output head to the rows the loss asks for.

The model's own head applies: `get_output_embeddings()` and the config's final soft-capping
(Gemma). Whether that is all the model does after its decoder is checked on every batch: the
last position's logits computed here must equal the model's own (else probe stops with one
line instead of measuring a loss the model does not have).
"""
from __future__ import annotations

import contextlib
import inspect

import torch

from ..core.errors import ProbeError

LAZY_BYTES = 1 << 30          # full logits above this: computed block by block
BLOCK_BYTES = 1 << 26         # the logits of one lazy block: the head's weights are read once per
                              # block, so blocks of a few hundred rows (SmolLM2: 341), not a few dozen


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


def full_bytes(model, batch: int, length: int) -> int:
    head = model.get_output_embeddings()
    vocab = getattr(head, "out_features", None) or model.config.get_text_config().vocab_size
    return batch * length * vocab * next(model.parameters()).element_size()


@contextlib.contextmanager
def forward_for(model, *, batch: int, length: int):
    """Yields forward(ids) -> logits: the model's own (B, T, V) logits, or LazyLogits when
    those would exceed LAZY_BYTES for `batch` x `length` tokens."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if (head is None or "logits_to_keep" not in inspect.signature(model.forward).parameters
            or full_bytes(model, batch, length) <= LAZY_BYTES):
        yield lambda ids: model(input_ids=ids, use_cache=False).logits
        return
    decoder = model.get_decoder()
    kept = {}

    def keep(module, args, output):
        kept["h"] = output[0] if isinstance(output, tuple) else output.last_hidden_state

    softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
    vocab = head.out_features

    def forward(ids):
        own = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits    # (B, 1, V)
        lazy = LazyLogits(kept.pop("h"), head, softcap, vocab)
        mine = lazy[:, -1:]
        if own.shape != mine.shape or not torch.allclose(own.float(), mine.float(), rtol=1e-4, atol=1e-4):
            raise ProbeError(f"{type(model).__name__} does more after its decoder than its output head: "
                             "probe cannot compute its logits block by block; lower --seq-len or "
                             "--batch-size so that the full logits fit")
        return lazy

    handle = decoder.register_forward_hook(keep)
    try:
        yield forward
    finally:
        handle.remove()
