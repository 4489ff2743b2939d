"""The name of a run, distinct names for runs of one checkpoint, and the tidy one-row-per-run
summary.

A run's name is worked out once, by `run_name` (probe/load/names.py, re-exported here)
(probe.analyze through source.source_for, the interventions and a context sweep; the command
line's run folders through `checkpoint_name`): the name given, else the checkpoint's, else the
model's class.

A run is named after its checkpoint, so the runs of one model in float32 and bfloat16, on two
data sets or with and without a BOS all carry the same name. `distinct_names` keeps them apart
by what differs in their meta.json ("SmolLM2-135M (bfloat16)"), and `summary_frame` lists runs
one row each, with the settings that tell them apart beside the headline numbers (summary.json
nests per-layer lists, which pandas cannot read as one table).

Imports no model library: reports/ names runs with it too.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

# Worked out where the checkpoint is loaded (LoadedModel.name), below the run directory; named
# here too, where the rest of a run's naming is.
from ..load.names import checkpoint_name, run_name  # noqa: F401


def _weights(value: Any) -> str:
    """meta.json's weights (GGUF: a dict with the file and its quantization) as a short label."""
    if isinstance(value, dict):
        return str(value.get("quantization") or value.get("file") or "weights")
    return str(value)


# meta.json settings that make two runs of one checkpoint different, in the order a name shows
# them: (key, how the value reads in a name).
DISTINGUISHING = (
    ("dtype", lambda v: str(v)),
    ("data", lambda v: Path(str(v)).name or str(v)),
    ("bos_policy", lambda v: f"bos {v}"),
    ("seq_len", lambda v: f"T={v}"),
    ("weights", _weights),
    ("device", lambda v: str(v)),
)

SUMMARY_COLUMNS = ("mean_gate", "f_attn", "f_attn_paper", "f_attn_uniform", "sink_rate", "m_act",
                   "loss", "perplexity", "tokens", "sequences")
META_COLUMNS = ("checkpoint", "family", "gate_layout", "dtype", "device", "data", "bos_policy",
                "seq_len", "longest_sequence", "per_document")


def distinct_names(names: list[str], metas: list[Mapping[str, Any]]) -> list[str]:
    """`names` with each group of equal names told apart by the meta.json settings that differ
    within the group, e.g. ["m", "m"] in float32 and bfloat16 -> ["m (float32)", "m (bfloat16)"];
    runs that differ in none of them get " (2)", " (3)", ... after the first."""
    out = list(names)
    for name in set(names):
        group = [i for i, n in enumerate(names) if n == name]
        if len(group) < 2:
            continue
        keys = [(key, show) for key, show in DISTINGUISHING
                if len({json.dumps(metas[i].get(key), sort_keys=True, default=str) for i in group}) > 1]
        for i in group:
            if keys:
                out[i] = f"{name} ({', '.join(show(metas[i].get(key)) for key, show in keys)})"
        # Runs alike in every setting (two seeds, one run twice): numbered after the first.
        for label in set(out[i] for i in group):
            same = [i for i in group if out[i] == label]
            for count, i in enumerate(same[1:], start=2):
                out[i] = f"{label} ({count})"
    return out


def _read(run: Any) -> tuple[dict, dict, str]:
    """(meta, summary, source) of a run directory or an in-memory Analysis."""
    from ..core.errors import ProbeError

    if isinstance(run, (str, os.PathLike)):
        from .run_files import RunDirectoryError, _read_json

        path = Path(run)
        if not (path / "summary.json").is_file():
            raise ProbeError(f"{path} is not a run directory (no summary.json); pass the folders "
                             "probe analyze wrote")
        try:        # each checked as the run reader checks it: a JSON object with the documented types
            return _read_json(path / "meta.json"), _read_json(path / "summary.json"), str(path)
        except RunDirectoryError as err:
            raise ProbeError(str(err)) from None
    if not isinstance(getattr(run, "meta", None), dict) or not isinstance(getattr(run, "summary", None), dict):
        raise ProbeError(f"summary_frame takes run directories or probe.Analysis objects, not "
                         f"{type(run).__name__}")
    return dict(run.meta), dict(run.summary), f"in-memory {type(run).__name__}"


def summary_frame(runs: Any) -> "pandas.DataFrame":  # noqa: F821
    """One row per run (run directories, Analysis objects, or one of either): the run's distinct
    name, its settings from meta.json (checkpoint, family, gate layout, dtype, device, data,
    BOS policy, seq_len, ...), the headline numbers of summary.json and where it came from.
    Plain columns, so `frame.to_csv()` and `pd.read_csv()` round-trip it."""
    import pandas as pd

    from ..core.errors import ProbeError

    if isinstance(runs, (str, os.PathLike)) or hasattr(runs, "summary"):
        items = [runs]
    elif runs is not None and hasattr(runs, "__iter__"):
        items = list(runs)
    else:
        raise ProbeError(f"summary_frame takes a run directory, a probe.Analysis, or a list of them, not "
                         f"{type(runs).__name__}")
    read = [_read(run) for run in items]
    names = distinct_names([str(s.get("model") or m.get("name") or Path(src).name) for m, s, src in read],
                           [m for m, _, _ in read])
    rows = []
    for name, (meta, summary, source) in zip(names, read):
        row = {"name": name, **{key: meta.get(key) for key in META_COLUMNS}}
        row["weights"] = _weights(meta["weights"]) if meta.get("weights") else None
        row["gated"] = summary.get("gated")
        row.update({key: summary.get(key) for key in SUMMARY_COLUMNS})
        row["source"] = source
        rows.append(row)
    return pd.DataFrame(rows, columns=["name", *META_COLUMNS, "weights", "gated", *SUMMARY_COLUMNS,
                                       "source"])
