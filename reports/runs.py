"""Load saved runs (run directories or in-memory analyses) into one `Runs` object.

Every table of the run directory is concatenated across runs; each keeps its `model` column,
so a plot can group by model without knowing where a row came from. This module reads plain
files and DataFrames only: it must never import anything that loads a model.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from probe.results.run_files import RunDirectoryError, read_run_dir  # noqa: F401  (part of this module's API)
from probe.results.run_files import _coerce, _empty
from probe.results.run_names import distinct_names
from probe.results.token_series import TokenSeries
from probe.reports.labels import ATTENTION, LINEAR_ATTENTION, META_FILE, SUMMARY_FILE, TABLES


@dataclass
class Runs:
    """Several runs side by side: `tables`, table name -> one DataFrame for every table of the
    schema (TABLES; rows of every run, empty where none has it), meta/summary dicts per model.
    A table reads as an attribute too (`runs.first_token`)."""

    models: tuple[str, ...]
    meta: dict[str, dict[str, Any]]
    summary: dict[str, dict[str, Any]]
    sources: dict[str, str]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    # model -> its per-token series (probe.results.token_series.TokenSeries), where it has them
    token_series: dict[str, Any] = field(default_factory=dict)
    _layer_types: dict[str, dict[int, str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # A table absent from every run (older runs, an option not asked for) is empty, with its columns.
        self.tables = {name: self.tables[name] if self.tables.get(name) is not None else _empty(name)
                       for name in TABLES}
        self._layer_types = {model: _infer_layer_types(self, model) for model in self.models}

    def __getattr__(self, name: str):
        tables = self.__dict__.get("tables")
        if tables is not None and name in tables:
            return tables[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def table(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    def rows(self, name: str, model: str) -> pd.DataFrame:
        """The rows of table `name` that belong to `model`."""
        frame = self.table(name)
        return frame[frame["model"] == model]

    def num_layers(self, model: str) -> int:
        return len(self._layer_types[model])

    def layers(self, model: str) -> list[int]:
        return list(range(self.num_layers(model)))

    def num_heads(self, model: str) -> int:
        declared = self.summary[model].get("num_heads") or self.meta[model].get("num_heads")
        if declared:
            return int(declared)
        heads = [self.rows(name, model)["head"] for name in ("first_token", "gates")]
        found = pd.concat(heads).dropna()
        return int(found.max()) + 1 if len(found) else 0

    def layer_types(self, model: str) -> dict[int, str]:
        return dict(self._layer_types[model])

    def layers_of_type(self, model: str, layer_type: str) -> list[int]:
        return [layer for layer, kind in self._layer_types[model].items() if kind == layer_type]

    def is_gated(self, model: str) -> bool:
        declared = self.summary[model].get("gated")
        if declared is not None:
            return bool(declared)
        return not self.rows("gates", model).empty

    @property
    def gated_models(self) -> list[str]:
        return [model for model in self.models if self.is_gated(model)]

    @property
    def ungated_models(self) -> list[str]:
        return [model for model in self.models if not self.is_gated(model)]


def same_token_pairs(runs: Runs) -> list[tuple[str, str]]:
    """(baseline, gated) runs that read the same token ids (equal meta.json tokens_sha256)."""
    digest = {model: runs.meta[model].get("tokens_sha256") for model in runs.models}
    return [(baseline, gated) for gated in runs.gated_models for baseline in runs.ungated_models
            if digest[gated] and digest[gated] == digest[baseline]]


def load_runs(source: Any) -> Runs:
    """Read runs from a run directory, an Analysis-like object, a `Runs`, or a list of those.

    A directory that is not itself a run directory but holds run directories (the output of
    `probe compare`) is read as all of them, in name order.
    """
    if isinstance(source, Runs):
        return source
    parts = [_load_one(item) for item in _flatten(source)]
    if not parts:
        raise ValueError("load_runs needs at least one run directory or analysis")
    return _combine(parts)


@dataclass
class _Part:
    """One run before concatenation."""

    model: str
    meta: dict[str, Any]
    summary: dict[str, Any]
    source: str
    tables: dict[str, pd.DataFrame]
    token_series: Any = None


def _flatten(source: Any) -> list[Any]:
    if isinstance(source, (str, os.PathLike)):
        return _expand_path(Path(source))
    if _looks_like_analysis(source):
        return [source]
    if isinstance(source, Runs):
        raise TypeError("pass a Runs object on its own, not inside a list")
    if isinstance(source, Iterable) and not isinstance(source, (bytes, Mapping)):
        return [leaf for item in source for leaf in _flatten(item)]
    raise TypeError(f"cannot read runs from {type(source).__name__}: expected a run directory "
                    "path, an Analysis (attributes gates, first_token, ..., meta, summary) "
                    "or a list of them")


def _expand_path(path: Path) -> list[Path]:
    if _is_run_dir(path):
        return [path]
    if path.is_dir():
        children = sorted(child for child in path.iterdir() if _is_run_dir(child))
        if children:
            return children
    raise FileNotFoundError(f"{path} is not a run directory (no {SUMMARY_FILE} or {META_FILE}) "
                            "and holds none")


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / SUMMARY_FILE).is_file() or (path / META_FILE).is_file())


def _looks_like_analysis(obj: Any) -> bool:
    return all(hasattr(obj, name) for name in ("first_token", "massive", "meta", "summary"))


def _load_one(item: Any) -> _Part:
    if isinstance(item, Path):
        return _read_run_dir(item)
    return _read_analysis(item)


def _read_run_dir(path: Path) -> _Part:
    meta, summary, read = read_run_dir(path)
    tables = {name: _empty(name) if frame is None else frame for name, frame in read.items()}
    model = _model_name(meta, summary, tables, fallback=path.name)
    return _Part(model=model, meta=meta, summary=summary, source=str(path), tables=tables,
                 token_series=TokenSeries.read(path))


def _read_analysis(analysis: Any) -> _Part:
    meta = dict(getattr(analysis, "meta", None) or {})
    summary = dict(getattr(analysis, "summary", None) or {})
    where = f"the {{}} table of {type(analysis).__name__} {summary.get('model') or meta.get('name') or ''}"
    tables = {name: _coerce(getattr(analysis, name, None), name, where.format(name).rstrip())
              for name in TABLES}
    model = _model_name(meta, summary, tables, fallback=type(analysis).__name__)
    return _Part(model=model, meta=meta, summary=summary,
                 source=f"in-memory {type(analysis).__name__}", tables=tables,
                 token_series=getattr(analysis, "token_series", None))


def _model_name(meta: dict, summary: dict, tables: dict[str, pd.DataFrame],
                fallback: str) -> str:
    for source, key in ((summary, "model"), (meta, "name"), (meta, "model")):
        if source.get(key):
            return str(source[key])
    for frame in tables.values():
        if len(frame):
            return str(frame["model"].iloc[0])
    return fallback


def _combine(parts: list[_Part]) -> Runs:
    _rename_duplicates(parts)
    tables = {}
    for name in TABLES:
        frames = [_with_model(part.tables[name], part.model) for part in parts]
        frames = [frame for frame in frames if len(frame)]
        tables[name] = pd.concat(frames, ignore_index=True) if frames else _empty(name)
    return Runs(
        models=tuple(part.model for part in parts),
        meta={part.model: part.meta for part in parts},
        summary={part.model: part.summary for part in parts},
        sources={part.model: part.source for part in parts},
        tables=tables,
        token_series={part.model: part.token_series for part in parts if part.token_series is not None},
    )


def _rename_duplicates(parts: list[_Part]) -> None:
    """Runs with the same name (one checkpoint in two dtypes, on two data sets, two seeds) would
    merge their rows: each is named by what differs in its meta.json (probe.results.run_names)."""
    names = distinct_names([part.model for part in parts], [part.meta for part in parts])
    for part, renamed in zip(parts, names):
        if renamed != part.model:
            warnings.warn(f"two runs are named {part.model!r}; the one from {part.source} is "
                          f"shown as {renamed!r}", stacklevel=3)
            part.model = renamed


def _with_model(frame: pd.DataFrame, model: str) -> pd.DataFrame:
    # The run's name wins over whatever the rows say, so renamed duplicates stay apart.
    if len(frame) and not (frame["model"] == model).all():
        frame = frame.assign(model=model)
    return frame


def _infer_layer_types(runs: Runs, model: str) -> dict[int, str]:
    """Layer index -> layer type: summary.json's layers, meta.json's layer_types, first_token.csv,
    summary.json's attention_layers, in that order; attention where nothing says otherwise."""
    summary = runs.summary[model]
    declared = dict(enumerate(runs.meta[model].get("layer_types") or []))
    declared.update({int(entry["layer"]): str(entry.get("layer_type") or ATTENTION)
                     for entry in summary.get("layers") or [] if "layer" in entry})
    first_token = runs.rows("first_token", model)
    from_table = dict(zip(first_token["layer"].astype(int), first_token["layer_type"]))
    attention_layers = summary.get("attention_layers")
    num_layers = (summary.get("num_layers") or runs.meta[model].get("num_layers")
                  or max(len(declared), _max_layer(runs, model) + 1))
    types = {}
    for layer in range(int(num_layers)):
        if layer in declared:
            types[layer] = declared[layer]
        elif from_table.get(layer) in (ATTENTION, LINEAR_ATTENTION):
            types[layer] = from_table[layer]
        elif attention_layers is not None:
            types[layer] = ATTENTION if layer in attention_layers else LINEAR_ATTENTION
        else:
            types[layer] = ATTENTION
    return types


def _max_layer(runs: Runs, model: str) -> int:
    found = [runs.rows(name, model)["layer"].max() for name, columns in TABLES.items()
             if "layer" in columns]
    found = [value for value in found if pd.notna(value)]
    return int(max(found)) if found else -1
