"""The metrics of an analysis, one module each, and the run-directory schema assembled from them.

    gates.py         gates.csv, gate_hist.csv; mean_gate            <- attn.hook_gate
    first_token.py   first_token.csv, first_token_buckets.csv; f_attn, f_attn_paper,
                     f_attn_uniform, sink_rate, sink_epsilon          <- attn.hook_first_key
    sparsity.py      sparsity.csv; per-layer shares at 1e-2 / 1e-3   <- attn.hook_sdpa, attn.hook_z
    token_types.py   gates_by_token_type.csv                         <- attn.hook_gate
    massive.py       massive.csv, massive_top.csv; m_act              <- hook_attn_out ... hook_resid_post
    loss.py          loss, perplexity                                 <- hook_logits
    anatomy.py       received_by_position.csv, received_by_token.csv, secondary_sinks.csv,
                     value_drains.csv, gate_sink.csv; anatomy (only with the anatomy option)
                                                                      <- attn.hook_attention, attn.hook_gate
    per_sequence.py  per_sequence.csv; the *_lo / *_hi bootstrap intervals  <- the events above

Each module owns its reducers, its tables (columns and their kinds, declared in probe/schema.py
so that reports/ reads them without torch) and its summary keys (metrics/base.py says what a
metric provides); the events are described in probe/events.py.
To add a metric: a module here with a `Metric` subclass, listed in METRICS; a report section
that reads its table (reports/sections.py); a test against an independent computation.
"""
from __future__ import annotations

from .anatomy import Anatomy
from .first_token import FirstToken
from .gates import Gates
from .loss import Loss
from .massive import Massive
from .per_sequence import PerSequence
from .sparsity import Sparsity
from .token_types import TokenTypes

# The order of the reducers (merged under torchrun, saved by --resume) and of summary.json's keys.
METRICS = (FirstToken, Sparsity, Gates, TokenTypes, Massive, Loss, Anatomy, PerSequence)
SUMMARY_ORDER = (Gates, FirstToken, Massive, Loss, Anatomy, PerSequence)

# Every table of the run directory: name -> column -> kind. Declared in probe/schema.py (no
# torch: reports/ reads runs against it without loading torch), each metric's TABLES from there;
# OTHER_TABLES: those written by other parts of probe, not by a metric of the pass.
from ..schema import OPTIONAL_TABLES, OTHER_TABLES, TABLES  # noqa: E402,F401


def build_metrics(layout, **context) -> dict:
    """name -> a fresh metric of every kind, for one pass over a model with this layout."""
    return {m.name: m(layout, **context) for m in METRICS}
