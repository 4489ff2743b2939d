"""Per-token series, declared: for the first tokens of a run (the `token_series` option, how
many), per layer and token, the attention the query puts on the first token (per head and
head-averaged), the gate score (head-averaged; per head for headwise gates), the largest
|layer output| and its dimension, the token's loss and, with the `anatomy` option, the attention
each key receives; with the `gdn` option, on a hybrid's Gated DeltaNet layers, the write strength
beta, the decay exp(g) and the output gate SiLU(z) (head-averaged and per value head) and with
`anatomy` also the key-0 share of the query's output (docs/gdn.md). They are kept in the run
directory as tokens.json + tokens.npz (probe/results/token_series.py, docs/run-directory.md), not
as tables. The capture: reduce.py."""
from __future__ import annotations

from ...core.events import ATTENTION, FIRST_KEY, GATE, GDN, LOGITS, SITE_EVENTS
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
    # Gated DeltaNet layers (--gdn; NaN on the softmax layers), per value head where _heads.
    "gdn_gate": ("GDN output gate SiLU(z), mean over value heads and dimensions (--gdn)", False, "span"),
    "gdn_gate_heads": ("GDN output gate SiLU(z) per value head, mean over its dimensions", True, "span8"),
    # beta on its own range, not [0, 1]: OLMo-Hybrid's negative eigenvalues double it, into (0, 2).
    "gdn_beta": ("GDN write strength beta = sigmoid(b), mean over value heads (--gdn)", False, "span"),
    "gdn_beta_heads": ("GDN write strength beta per value head", True, "span8"),
    "gdn_decay": ("GDN decay exp(g), mean over value heads (--gdn)", False, "decay"),
    "gdn_decay_heads": ("GDN decay exp(g) per value head", True, "decay8"),
    # On a log scale down to 1e-9 (share kinds): a trained hybrid's shares after position 0 are
    # 1e-5 .. 1e-3 (docs/gdn.md), which steps of 1/254 or 0.01 would store as 0.
    "gdn_key0": ("GDN key-0 share of the query's output |c_t0| / sum_s |c_ts|, mean over value heads "
                 "(--gdn --anatomy)", False, "share"),
    "gdn_key0_heads": ("GDN key-0 share per value head", True, "share8"),
}

DECLARATION = Declaration(
    name="token_series", metric="TokenSeriesCapture", order=10,
    events={FIRST_KEY: "first_key", GATE: "gate", SITE_EVENTS[SITE]: "layer_output", LOGITS: "logits",
            ATTENTION: "attention", GDN: "gdn"},
)
