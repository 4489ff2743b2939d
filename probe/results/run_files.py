"""Reading one run directory's files and checking them against the schema (probe.results.schema.TABLES):
a missing column, a cut-short file or a cell of the wrong kind is a RunDirectoryError, one line
naming the file and what in it does not fit.

The one reader of run directories: `probe.Analysis.load` and reports/ (reports.runs) both read
through it. It imports pandas and numpy, never torch, and nothing of reports/."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import csv_cells
from .schema import MANIFEST_KEY, META_FILE, SUMMARY_FILE, TABLES


class RunDirectoryError(ValueError):
    """A run directory (or an in-memory analysis) that does not fit docs/run-directory.md.

    The message is one line naming the file and what in it does not fit."""


def read_run_dir(path: str | os.PathLike) -> tuple[dict, dict, dict[str, pd.DataFrame | None]]:
    """(meta, summary, {table: typed DataFrame, or None when its file is absent}) of one run
    directory, checked against the schema: RunDirectoryError names what does not fit."""
    path = Path(path)
    for name in (META_FILE, SUMMARY_FILE):
        # Every run probe writes has both; without meta.json, the list of the tables written,
        # a run missing some of them would read as one that measured nothing there.
        if not (path / name).is_file():
            raise RunDirectoryError(f"{path / name} is missing; the run directory is incomplete: write it "
                                    "again with probe analyze")
    meta = _read_json(path / META_FILE)
    summary = _read_json(path / SUMMARY_FILE)
    tables = {name: _read_table(path / f"{name}.csv", name) if (path / f"{name}.csv").is_file() else None
              for name in TABLES}
    _check_manifest(path, meta, tables)
    _check_resamples(path / META_FILE, meta)
    if tables.get("per_sequence") is not None:
        _check_per_sequence(path / "per_sequence.csv", tables["per_sequence"])
    return meta, summary, tables


def _check_resamples(path: Path, meta: dict[str, Any]) -> None:
    """meta.json's resamples, which reports draw intervals with: 0, or what probe analyze allows."""
    from ..intervals.bootstrap import MAX_RESAMPLES, MIN_RESAMPLES

    if "resamples" not in meta:
        return
    value = meta["resamples"]
    if isinstance(value, bool) or not isinstance(value, int) or not (
            value == 0 or MIN_RESAMPLES <= value <= MAX_RESAMPLES):
        raise RunDirectoryError(f"{path}: resamples is {str(value)[:40]!s}, not 0 or an integer from "
                                f"{MIN_RESAMPLES} to {MAX_RESAMPLES:,}; the run directory is damaged: write it "
                                "again with probe analyze")


# per_sequence.csv's quantities that count things (non-negative integers); m_act alone may be NaN
# (a sequence with no finite activation at a site). Every value is the sum of at most 2**32
# numbers a float32, bfloat16 or float16 model produced, each below float32's largest, and an
# activation's maximum (m_act) is one of them.
_COUNTS = ("f_attn_n", "gate_n", "gate_low", "sparsity_below", "sparsity_n", "nll_n", "key0_n",
           "secondary_sinks", "document")
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _check_per_sequence(path: Path, frame: pd.DataFrame) -> None:
    """Every cell of per_sequence.csv is one probe can have written: finite (m_act may be NaN), not
    negative, within what its model can produce, counts whole, and sequence / head indices no
    larger than the table (the intervals allocate an array of that size)."""
    if frame.empty:
        return
    value = frame["value"].to_numpy(float)
    quantity = frame["quantity"].to_numpy(str)
    m_act = quantity == "m_act"
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(value) & ~(np.isnan(value) & m_act)
        bad |= value < 0
        bad |= value > _FLOAT32_MAX * np.where(m_act, 1.0, 2.0 ** 32)
        bad |= np.isin(quantity, _COUNTS) & (np.floor(value) != value)
    where = "value"
    if not bad.any():
        for column in ("sequence", "head"):
            index = frame[column].to_numpy(np.int64)
            bad = (index < (0 if column == "sequence" else -1)) | (index >= len(frame))
            if bad.any():
                where = column
                break
    if bad.any():
        row = int(np.argmax(bad))
        cell = frame[where].iloc[row]
        raise RunDirectoryError(f"{path}: row {row + 1} ({frame['quantity'].iloc[row]}) has {where} {cell!r}, which "
                                "probe cannot have written (not finite, negative, beyond what a model produces, "
                                "or a count that is not whole); the intervals would be wrong: write the run "
                                "again with probe analyze")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        with path.open(encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunDirectoryError(f"{path} is not valid JSON ({_first_line(err)}); the run directory "
                                "is damaged: write it again with probe analyze") from None
    if not isinstance(value, dict):
        raise RunDirectoryError(f"{path} holds a JSON {type(value).__name__}, not an object; the "
                                "run directory is damaged: write it again with probe analyze")
    _check_summary_types(path, value)
    return value


def _check_summary_types(path: Path, value: dict[str, Any]) -> None:
    """The keys the report reads must have the types docs/run-directory.md gives them."""
    numbers = ("mean_gate", "f_attn", "f_attn_paper", "f_attn_uniform", "sink_rate", "m_act", "loss",
               "perplexity", "tokens", "sequences", "num_layers", "num_heads", "sink_epsilon")
    for key in numbers:
        item = value.get(key)
        if item is not None and (isinstance(item, bool) or not isinstance(item, (int, float))):
            raise RunDirectoryError(f"{path}: {key} is {item!r}, not a number or null")
    for key in ("layers", "attention_layers", "layer_types"):
        if value.get(key) is not None and not isinstance(value[key], list):
            raise RunDirectoryError(f"{path}: {key} is {value[key]!r}, not a list")
    for entry in value.get("layers") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("layer", 0), int):
            raise RunDirectoryError(f"{path}: an entry of layers is {entry!r}, not an object with an "
                                    "integer layer")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in value.get("attention_layers") or []):
        raise RunDirectoryError(f"{path}: attention_layers must list integer layer indices")


def _read_table(path: Path, name: str) -> pd.DataFrame:
    """Read a CSV as text, check it against the schema, then type the known columns.

    Reading as text first keeps string cells verbatim: pandas would otherwise turn a token
    such as "NA", "null" or "" into NaN.
    """
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise RunDirectoryError(f"cannot read {path} ({err.strerror})") from None
    if not raw.strip():
        raise RunDirectoryError(f"{path} is empty; the run directory is incomplete: write it "
                                "again with probe analyze")
    if not raw.endswith(b"\n"):
        raise RunDirectoryError(f"{path} is cut short (its last line is unfinished); the run "
                                "directory is incomplete: write it again with probe analyze")
    try:
        _check_fields(raw.decode("utf-8"), path)
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, index_col=False)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, csv.Error) as err:
        raise RunDirectoryError(f"{path} is not a valid CSV table ({_first_line(err)})") from None
    for column, kind in TABLES[name].items():
        if kind == "str" and column in frame.columns:
            frame[column] = frame[column].map(csv_cells.raw)     # the strings as given (probe/results/csv_cells.py)
    return _coerce(frame, name, str(path))


def _check_fields(text: str, path: Path) -> None:
    """Every row has as many fields as the header (pandas would pad a short row with "")."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    for row in reader:
        if len(row) != len(header):
            raise RunDirectoryError(f"{path}: line {reader.line_num} has {len(row)} fields, the header "
                                    f"{len(header)}; the file is cut short or damaged")


def _coerce(frame: pd.DataFrame | None, name: str, where: str = "") -> pd.DataFrame:
    """Type the schema's columns of `frame`; a column it lacks, a row it cut short or a cell
    that is not of its column's kind is a RunDirectoryError naming `where`."""
    if frame is None or len(frame.columns) == 0:
        return _empty(name)
    missing = [column for column in TABLES[name] if column not in frame.columns]
    if missing:
        raise RunDirectoryError(f"{where} lacks the column{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(missing)} (expected {', '.join(TABLES[name])})")
    frame = frame.copy()
    for column, kind in TABLES[name].items():
        if kind in ("int", "float"):
            frame[column] = _to_number(frame[column], kind, where, column)
        elif kind == "bool":
            frame[column] = _to_bool(frame[column])
        else:
            frame[column] = frame[column].astype(str)
    return frame.reset_index(drop=True)


def _check_manifest(path: Path, meta: dict[str, Any], tables: dict[str, pd.DataFrame]) -> None:
    """meta.json lists the tables written with their row counts (probe.Analysis.save): each
    must be there, whole. Runs from before the list existed are checked column by column only."""
    listed = meta.get(MANIFEST_KEY)
    if listed is None:
        return
    if not isinstance(listed, dict):
        raise RunDirectoryError(f"{path / META_FILE}: {MANIFEST_KEY} is {listed!r}, not an object")
    for name, rows in listed.items():
        file = path / f"{name}.csv"
        if name in TABLES and tables[name] is None:
            raise RunDirectoryError(f"{file} is missing (meta.json lists it with {rows} rows); the "
                                    "run directory is incomplete: write it again with probe analyze")
        if name in TABLES and len(tables[name]) != rows:
            raise RunDirectoryError(f"{file} has {len(tables[name])} rows but meta.json lists {rows}; "
                                    "the file was cut short or edited: write it again with probe analyze")


def _first_line(err: Exception) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _empty(name: str) -> pd.DataFrame:
    return pd.DataFrame({column: _missing_column(kind, 0)
                         for column, kind in TABLES[name].items()})


def _missing_column(kind: str, length: int) -> pd.Series:
    if kind == "str":
        return pd.Series([""] * length, dtype=str)
    if kind == "bool":
        return pd.Series([False] * length, dtype=bool)
    return pd.Series([np.nan] * length, dtype=float)


def _to_number(column: pd.Series, kind: str, where: str = "", name: str = "") -> pd.Series:
    numbers = pd.to_numeric(column, errors="coerce")
    if not pd.api.types.is_numeric_dtype(column):
        # A cell that is neither empty nor a number would silently become NaN.
        text = column.astype(str).str.strip()
        bad = numbers.isna() & ~text.str.lower().isin(("", "nan", "none", "null"))
        if kind == "int":
            bad |= numbers.isna() | (numbers.notna() & (numbers % 1 != 0))
        if bad.any():
            first = int(bad.to_numpy().argmax())
            raise RunDirectoryError(f"{where}: column {name}, row {first + 1}: {column.iloc[first]!r} "
                                    f"is not {'an integer' if kind == 'int' else 'a number'}")
    elif kind == "int" and numbers.isna().any():
        raise RunDirectoryError(f"{where}: column {name} has empty cells; it holds integers")
    if kind == "int" and len(numbers) and numbers.notna().all():
        return numbers.astype("int64")
    return numbers.astype(float) if kind == "float" else numbers


def _to_bool(column: pd.Series) -> pd.Series:
    if column.dtype == bool:
        return column
    text = column.astype(str).str.strip().str.lower()
    return text.isin(("1", "true", "yes", "1.0"))
