"""The metrics of an analysis: one package each, its declaration in its __init__.py (torch-free:
tables, summary / layer / meta keys, option, events) and its reducers in reduce.py.

    first_token/   first_token.csv, first_token_buckets.csv; f_attn, f_attn_paper,
                   f_attn_uniform, sink_rate, sink_epsilon          <- attn.hook_first_key
    sparsity/      sparsity.csv; per-layer shares at 1e-2 / 1e-3   <- attn.hook_sdpa, attn.hook_z
    gates/         gates.csv, gate_hist.csv; mean_gate            <- attn.hook_gate
    token_types/   gates_by_token_type.csv                         <- attn.hook_gate
    massive/       massive.csv, massive_top.csv; m_act              <- hook_attn_out ... hook_resid_post
    loss/          loss, perplexity                                 <- hook_logits
    anatomy/       received_by_position.csv, received_by_token.csv, secondary_sinks.csv,
                   value_drains.csv, gate_sink.csv; anatomy (only with the anatomy option)
                                                                    <- attn.hook_attention, attn.hook_gate
    per_sequence/  per_sequence.csv; the *_lo / *_hi bootstrap intervals  <- the events above
    head_norms/    head_norms.csv; head_norm_ratio                  <- attn.hook_sdpa, attn.hook_z
    gdn/           gdn_*.csv; gdn (only with the gdn option): Gated DeltaNet layers' SiLU gate,
                   beta, decay, per-key terms and their check    <- linear_attn.hook_gdn
    token_series/  no table: tokens.json + tokens.npz, per-token values of the first tokens
                   (the token_series option: how many)  <- attn.hook_first_key, attn.hook_gate,
                   hook_resid_post, hook_logits, attn.hook_attention (with anatomy)

The run directory's schema (probe/results/schema.py), Analysis and reports' Runs derive from the
declarations (metrics/base.py says what one holds); the bus (probe/capture/bus.py) subscribes each
declared event. This list is checked against DECLARATIONS (tests/metrics/test_declarations.py).
To add a metric: a package here (declaration + reduce.py; DECLARATIONS finds
it); a report section (reports/sections/<m>.py); a test; docs/run-directory.md.
"""
from __future__ import annotations

import importlib
import pkgutil

from ..core.registry import unique


def _declarations() -> tuple:
    """The DECLARATION of every package here, in their `order`: a new metric is a new package,
    listed nowhere else."""
    return registered([(importlib.import_module(f"{__name__}.{m.name}").DECLARATION,
                        f"probe/metrics/{m.name}/__init__.py") for m in pkgutil.iter_modules(__path__) if m.ispkg])


def registered(declarations) -> tuple:
    """(declaration, place) pairs in their `order`; a metric name or an order declared twice is
    refused, naming both places (two metrics of one name would share its tables and keys; two of
    one order would have no fixed reducer order under torchrun and --resume)."""
    unique(((d.name, d, place) for d, place in declarations), "metric")
    unique(((d.order, d, f"{place} ({d.name})") for d, place in declarations), "metric order")
    return tuple(sorted((d for d, _ in declarations), key=lambda d: d.order))


# The order of the reducers (merged under torchrun, saved by --resume), of the tables and of each
# layer's entry in summary.json; summary.json's top-level keys follow each `summary_order`.
DECLARATIONS = _declarations()
BY_NAME = {d.name: d for d in DECLARATIONS}


def metric_class(declaration):
    """The Metric subclass of a declaration (imports its reduce.py, and so torch)."""
    module = importlib.import_module(f"{__name__}.{declaration.name}.reduce")
    return getattr(module, declaration.metric)


def build_metrics(layout, options, **context) -> dict:
    """name -> a fresh metric of every kind, for one pass over a model with this layout
    (context: vocab_size, sequences, token_groups; see metrics/base.py)."""
    return {d.name: metric_class(d)(layout, options, **context) for d in DECLARATIONS}


def summary_order() -> list:
    """The declarations that write summary.json keys, in the file's order."""
    return sorted((d for d in DECLARATIONS if d.summary_order is not None), key=lambda d: d.summary_order)
