"""Held-out loss, declared: summary.json loss and perplexity (and loss_by_position when asked).
The reducers: reduce.py."""
from __future__ import annotations

from ...core.events import LOGITS
from ..base import Declaration

DECLARATION = Declaration(
    name="loss", metric="Loss", order=5,
    events={LOGITS: "update"},
    summary_keys=("loss", "perplexity"),
    summary_order=3,
)
