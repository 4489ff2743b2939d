"""Per-token series, declared: for the first tokens of a run (the `token_series` option, how
many), per layer and token, the attention the query puts on the first token (per head and
head-averaged), the gate score (head-averaged; per head for headwise gates), the largest
|layer output| and its dimension, the token's loss and, with the `anatomy` option, the attention
each key receives. They are kept in the run directory as tokens.json + tokens.npz
(probe/results/token_series.py, docs/run-directory.md), not as tables. The capture: reduce.py."""
from __future__ import annotations

from ...core.events import ATTENTION, FIRST_KEY, GATE, LOGITS, SITE_EVENTS
from ..base import Declaration

SITE = "resid_post"         # the activation whose largest |value| is kept: the layer's output

# name -> (what it holds, per head, the quantisation kind of probe/results/token_series.py)
SERIES = {
    "first_token": ("attention on the first token, mean over heads", False, "unit"),
    "first_token_heads": ("attention on the first token, per head", True, "cent"),
    "gate": ("gate score, mean over heads (and dimensions)", False, "unit"),
    "gate_heads": ("gate score per head (headwise gates)", True, "cent"),
    "max_abs": ("largest |activation| of the layer output", False, "log8"),
    "max_abs_dim": ("its dimension", False, "index"),
    "loss": ("the token's loss, -log p(token | the tokens before it)", False, "log"),
    "received": ("attention the token receives as a key, mean over the queries that see it and "
                 "over heads (--anatomy)", False, "unit"),
}

DECLARATION = Declaration(
    name="token_series", metric="TokenSeriesCapture", order=10,
    events={FIRST_KEY: "first_key", GATE: "gate", SITE_EVENTS[SITE]: "layer_output", LOGITS: "logits",
            ATTENTION: "attention"},
)
