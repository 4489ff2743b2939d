"""The run directory's tables (docs/run-directory.md): name -> column -> kind, and the values
that key their rows.

One declaration for the writer and the reader: each metric declares its tables in its
package's __init__.py (probe/metrics/<m>/), this module joins them with the tables other parts
of probe write, reports/ reads run directories against `TABLES`. It imports only those
declarations (no torch), so that `from probe import reports` and `probe report` do not load the libraries
that run a model (tests/reports/test_runs.py checks it).

Kinds: "str" kept verbatim (a token may be "NA" or ""), "int" / "float" parsed with NaN for
empty or "nan" cells, "bool". A run that lacks a table's column is refused.
"""
from __future__ import annotations

# The run directory's two JSON files; meta.json lists the tables written, {name: rows}, under
# MANIFEST_KEY, so that a reader finds a deleted or cut-short CSV.
META_FILE = "meta.json"
SUMMARY_FILE = "summary.json"
MANIFEST_KEY = "tables"

# The per-metric constants, from the declarations (probe/metrics/<m>/__init__.py), where each
# metric's tables are declared too; reports/ reads them from here.
from ..metrics import DECLARATIONS
from ..metrics.anatomy import SINK_MIN_QUERIES  # noqa: F401
from ..metrics.first_token import SINK_EPSILON  # noqa: F401
from ..metrics.gates import GATE_GROUPS  # noqa: F401
from ..metrics.massive import SITES  # noqa: F401
from ..metrics.per_sequence import LOW_GATE  # noqa: F401
from ..metrics.sparsity import HEADLINE_THRESHOLDS, VARIANTS  # noqa: F401
from ..metrics.token_types import TOKEN_TYPES  # noqa: F401

# -- written by other parts of probe, not by a metric of the pass ------------------------------
OTHER_TABLES: dict[str, dict[str, str]] = {
    # The display prompt's head-averaged attention (analyze.display_patterns, bridge.display_patterns).
    "attention_patterns": {"model": "str", "layer": "int", "query": "int", "key": "int", "value": "float"},
    # probe train's log (probe/train), copied into trained runs.
    "training": {"model": "str", "step": "int", "tokens": "float", "lr": "float", "train_loss": "float",
                 "eval_loss": "float", "grad_norm": "float", "spike": "bool"},
    # The loss under interventions (probe/run/interventions.py).
    "interventions": {"model": "str", "intervention": "str", "layer": "int", "loss": "float",
                      "delta_loss": "float", "setting": "float", "zeroed": "float", "note": "str"},
    # The loss under sink ablations (probe/run/ablations.py, --ablate): one row per ablation, and
    # by target-position bucket [bucket_lo, bucket_hi), with paired 95% intervals of delta_loss.
    "ablations": {"model": "str", "ablation": "str", "kind": "str", "window": "float", "sinks": "float",
                  "layer": "int", "tokens": "int", "loss": "float", "base_loss": "float", "delta_loss": "float",
                  "delta_lo": "float", "delta_hi": "float", "effect": "str", "f_attn": "float",
                  "base_f_attn": "float", "top_keys": "str", "base_top_keys": "str", "note": "str"},
    "ablation_positions": {"model": "str", "ablation": "str", "bucket_lo": "int", "bucket_hi": "int",
                           "tokens": "int", "loss": "float", "base_loss": "float", "delta_loss": "float",
                           "delta_lo": "float", "delta_hi": "float"},
    # Per ablation and held-out sequence: the nll summed over the tokens counted in both passes,
    # under the ablation and unablated, so that two models on the same sequences can be compared
    # with a paired interval (reports/sections/sinks.py, probe.intervals.paired_loss.paired_difference).
    "ablation_sequences": {"model": "str", "ablation": "str", "sequence": "int", "tokens": "int",
                           "nll": "float", "base_nll": "float"},
    # Written by examples/demo.py for trained checkpoints (probe.train.evaluate.inference_table).
    "inference": {"model": "str", "metric": "str", "length": "int", "value": "float"},
    # Continued training measured at each saved step (examples/grafts/experiment.py): loss,
    # f_attn, f_attn_sink_layers, sink_rate, m_act, mean_gate per (model, step).
    "trajectory": {"model": "str", "step": "int", "tokens": "int", "metric": "str", "value": "float"},
}

# Every table of the run directory: the metrics' in the order of probe.metrics.DECLARATIONS, then
# the others.
TABLES: dict[str, dict[str, str]] = {**{t: c for d in DECLARATIONS for t, c in d.tables.items()}, **OTHER_TABLES}
# Tables a metric writes only when an option asks for it: table -> the option. A run without
# them is complete; one that has such a table must have all of its columns, as any other.
OPTIONAL_TABLES: dict[str, str] = {**{t: d.option for d in DECLARATIONS if d.option for t in d.tables},
                                   "ablations": "ablate", "ablation_positions": "ablate",
                                   "ablation_sequences": "ablate"}   # --ablate
# Float columns that hold counts (float so that a row without one leaves the cell empty): table ->
# columns, compared exactly in the gold (tests/gold_diff.py).
COUNTS: dict[str, tuple[str, ...]] = {
    **{t: c for d in DECLARATIONS for t, c in d.counts.items()},
    "interventions": ("zeroed",),
}
