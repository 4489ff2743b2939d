"""`Analysis`: the tidy tables of one run, its provenance, and the run directory on disk.

The format is documented in docs/run-directory.md; `reports` reads the same files.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ..core.atomic import atomic_directory, write_text
from .csv_cells import csv_text
from ..core.errors import ProbeError
from .plotting import PlotMethods
from .run_files import RunDirectoryError, read_run_dir
from .schema import MANIFEST_KEY, META_FILE, SUMMARY_FILE
from .schema import TABLES as SCHEMA
from .token_series import TokenSeries

# The tables an Analysis holds: the run directory's (probe.results.schema.TABLES, which reports/ reads
# runs against) but inference.csv and trajectory.csv, which examples/demo.py and
# examples/grafts/experiment.py add to trained runs.
ADDED_LATER = ("inference", "trajectory")
TABLES = tuple(name for name in SCHEMA if name not in ADDED_LATER)


def _empty() -> pd.DataFrame:
    return pd.DataFrame()


class Analysis(PlotMethods):
    """One run in memory: meta.json, summary.json and `tables`, table name -> DataFrame for every
    table of the schema (TABLES; empty when the run has none). A table reads and writes as an
    attribute too (`analysis.first_token`), and every figure of the report is a method
    (`analysis.plot_gate_heatmap()`, probe/results/plotting.py)."""

    def __init__(self, meta: dict, summary: dict, tables: dict[str, pd.DataFrame] | None = None, *,
                 token_series=None, **frames):
        unknown = sorted(set(frames) - set(TABLES) | set(tables or {}) - set(TABLES))
        if unknown:
            raise TypeError(f"Analysis has no table {unknown[0]!r} (tables: {', '.join(TABLES)})")
        given = {**(tables or {}), **frames}
        self.meta, self.summary = meta, summary
        self.tables = {t: given[t] if given.get(t) is not None else _empty() for t in TABLES}
        # The per-token series of the first tokens (probe.results.token_series.TokenSeries), or None.
        self.token_series = token_series

    def __getattr__(self, name: str):
        # Only for names not found the usual way: the tables, then the figures (PlotMethods).
        tables = self.__dict__.get("tables")
        if tables is not None and name in tables:
            return tables[name]
        return super().__getattr__(name)

    def __setattr__(self, name: str, value) -> None:
        if name in TABLES and "tables" in self.__dict__:
            self.tables[name] = value
        else:
            super().__setattr__(name, value)

    def __dir__(self):
        return sorted({*super().__dir__(), *TABLES})

    @property
    def name(self) -> str:
        return self.summary.get("model", "model")

    # -- disk ------------------------------------------------------------------------------
    def save(self, path: str | Path, *, force: bool = False) -> Path:
        """Write the run directory atomically; refuses an existing one unless force."""
        path = Path(path)
        with atomic_directory(path, force) as tmp:
            self.write_into(tmp)
        return path

    def write_into(self, folder: Path) -> None:
        written = {}
        for table, frame in self.tables.items():
            if len(frame):
                write_text(folder / f"{table}.csv", csv_text(frame, SCHEMA[table]))
                written[table] = len(frame)
        # The tables and their row counts, so that a reader finds a deleted or cut-short CSV.
        meta = {**self.meta, MANIFEST_KEY: written}
        write_text(folder / META_FILE, json.dumps(_jsonable(meta), indent=2, sort_keys=True) + "\n")
        write_text(folder / SUMMARY_FILE, json.dumps(_jsonable(self.summary), indent=2) + "\n")
        if self.token_series is not None:
            self.token_series.write(folder)

    @classmethod
    def load(cls, path: str | Path) -> "Analysis":
        """Read a run directory, checked against docs/run-directory.md: a missing, cut-short or
        damaged file is a ProbeError naming it."""
        path = Path(path)
        if not (path / SUMMARY_FILE).exists() or not (path / META_FILE).exists():
            raise ProbeError(f"{path} is not a probe run directory (no summary.json / meta.json)")
        try:
            meta, summary, tables = read_run_dir(path)
            series = TokenSeries.read(path)
        except RunDirectoryError as err:
            raise ProbeError(str(err)) from None
        return cls(meta, summary, {t: tables.get(t) for t in TABLES}, token_series=series)

    # -- display ---------------------------------------------------------------------------
    def summary_frame(self) -> pd.DataFrame:
        s = self.summary
        keys = ("mean_gate", "f_attn", "f_attn_paper", "f_attn_uniform", "sink_rate", "m_act",
                "loss", "perplexity", "tokens")
        return pd.DataFrame([{k: s.get(k) for k in keys}], index=[s.get("model")])

    def layer_frame(self) -> pd.DataFrame:
        """One row per layer: F-Attn, mean gate, M-Act of the layer output, sparsity at 1e-2."""
        rows = []
        for layer in self.summary.get("layers", []):
            sp = layer.get("sparsity", {})
            rows.append({"layer": layer["layer"], "type": layer["layer_type"],
                         "f_attn": layer.get("f_attn"), "mean_gate": layer.get("mean_gate"),
                         "m_act": layer["m_act"].get("resid_post"),
                         **{f"sparsity_{v}_1e-2": sp.get(v, {}).get("0.01")
                            for v in ("ungated", "mean_gate", "gated")}})
        return pd.DataFrame(rows).set_index("layer") if rows else _empty()

    def __repr__(self) -> str:
        s = self.summary
        return (f"Analysis({s.get('model')!r}, gate={s.get('gate_layout')}, tokens={s.get('tokens')}, "
                f"f_attn={_fmt(s.get('f_attn'))}, m_act={_fmt(s.get('m_act'))}, "
                f"mean_gate={_fmt(s.get('mean_gate'))})")

    def _repr_html_(self) -> str:
        return (f"<p><b>probe analysis of {self.name}</b> ({self.meta.get('architecture')}, "
                f"gate: {self.summary.get('gate_layout')}, {self.summary.get('tokens')} tokens)</p>"
                + self.summary_frame().to_html(float_format=lambda v: f"{v:.4g}")
                + self.layer_frame().to_html(float_format=lambda v: f"{v:.4g}"))


def _fmt(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"


def _jsonable(obj):
    """NaN and inf become null so that summary.json is strict JSON."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        return _jsonable(obj.item())
    return obj
