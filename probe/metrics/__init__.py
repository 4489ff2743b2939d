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

Each module owns its reducers, its tables (columns and their kinds) and its summary keys
(metrics/base.py says what a metric provides); the events are described in probe/events.py.
To add a metric: a module here with a `Metric` subclass, listed in METRICS; a report section
that reads its table (reports/sections.py); a test against an independent computation.
"""
from __future__ import annotations

from .anatomy import Anatomy
from .first_token import FirstToken
from .gates import Gates
from .loss import Loss
from .massive import Massive
from .sparsity import Sparsity
from .token_types import TokenTypes

# The order of the reducers (merged under torchrun, saved by --resume) and of summary.json's keys.
METRICS = (FirstToken, Sparsity, Gates, TokenTypes, Massive, Loss, Anatomy)
SUMMARY_ORDER = (Gates, FirstToken, Massive, Loss, Anatomy)

# Tables written by other parts of probe, not by a metric of the pass.
OTHER_TABLES: dict[str, dict[str, str]] = {
    # The display prompt's head-averaged attention (analyze.display_patterns, bridge.display_patterns).
    "attention_patterns": {"model": "str", "layer": "int", "query": "int", "key": "int", "value": "float"},
    # probe train's log (probe/train), copied into trained runs.
    "training": {"model": "str", "step": "int", "tokens": "float", "lr": "float", "train_loss": "float",
                 "eval_loss": "float", "grad_norm": "float", "spike": "bool"},
    # The loss under interventions (probe/interventions.py).
    "interventions": {"model": "str", "intervention": "str", "layer": "int", "loss": "float",
                      "delta_loss": "float", "setting": "float", "zeroed": "float", "note": "str"},
    # Written by examples/demo.py for trained checkpoints (probe.train.evaluate.inference_table).
    "inference": {"model": "str", "metric": "str", "length": "int", "value": "float"},
}

# Every table of the run directory: name -> column -> kind ("str" kept verbatim, "int" / "float"
# parsed, "bool"). reports/ reads runs against it; docs/run-directory.md describes it.
TABLES: dict[str, dict[str, str]] = {**{t: c for m in METRICS for t, c in m.TABLES.items()}, **OTHER_TABLES}
# Tables a metric writes only when an option asks for it: table -> the option. A run without
# them is complete; one that has such a table must have all of its columns, as any other.
OPTIONAL_TABLES: dict[str, str] = {t: m.OPTION for m in METRICS if getattr(m, "OPTION", None) for t in m.TABLES}


def build_metrics(layout, **context) -> dict:
    """name -> a fresh metric of every kind, for one pass over a model with this layout."""
    return {m.name: m(layout, **context) for m in METRICS}
