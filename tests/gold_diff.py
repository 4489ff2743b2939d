"""Compare a run directory with its gold files, cell by cell, with a tolerance by column kind.

The kinds are probe/results/schema.py's: "str", "int" and "bool" cells must be equal as written, and
so must the float cells that hold counts (COUNT_COLUMNS, and in the long tables the `value` of
a row whose `metric` is a count, COUNT_METRICS). Every other float cell may differ by FLOAT:

    |gold - now| <= 1e-4 * max(|gold|, |now|) + 1e-6        (NaN only equals NaN, inf only inf)

Why so loose, when every reducer sums in float64: the numbers are statistics of a float32
forward pass, and another CPU (AVX-512, AVX2 or the scalar kernels, `ATEN_CPU_CAPABILITY`)
rounds each float32 operation its own way: a reduction of n terms in another order moves its
result by up to n * 2**-24 relative to the sum of its terms' magnitudes. The tiny models'
widest reduction is 128 terms (the MLP), so one layer moves a value by up to ~8e-6 relative,
and the gold cases' two to four layers, with softmax and normalisation amplifying differences
of nearly equal logits, by a few 1e-5: measured 3.6e-5 (attention_patterns.csv, head-averaged
float32 attention), 1.2e-5 (gate_sink.csv gate_std), 1.6e-5 (interventions.csv delta_loss, a
difference of two losses near 6.5, whose own error, 5.5e-7, the absolute 1e-6 covers) and
1.3e-6 in summary.json. 1e-4 leaves a margin of about 3 over that; a change of a formula moves
numbers by far more. JSON numbers follow the same rule: an integer must be equal, a float
within FLOAT.

Two estimators have a coarser resolution than the arithmetic, and get it as their tolerance:
- a histogram quantile (massive.csv `median_abs`): the histograms bin |h| by the top 16 bits of
  its float32 value (7 mantissa bits), so when one value crosses a bin edge the interpolated
  median moves within a bin, up to 2**-7 relative (BIN);
- a ranking (massive_top.csv, received_by_token.csv): two entries whose values agree within
  FLOAT are a tie as far as the arithmetic can tell, and another CPU may order them either way.
  Before comparing, each run of such near-ties is put in the order of where the entries sit
  (`canonical_ranking`), in the gold and in the run alike. The last entry of a ranking may be
  tied with one just below the cut that the table does not show: there another entry whose
  value agrees within FLOAT may take its place (`_at_the_cut`).

Each difference names the file, the column (a JSON key path in meta.json / summary.json), the
row with its key columns, both values and the tolerance it broke. To see every difference of a
kept run (the gold test's failure message names the run's folder):

    python tests/gold_diff.py tests/gold_runs/CASE RUN_DIRECTORY [ROOT]
"""
from __future__ import annotations

import csv
import io
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from probe.results.schema import COUNTS, TABLES


@dataclass(frozen=True)
class Tolerance:
    """|a - b| <= rel * max(|a|, |b|) + abs; zero for both: equal as written."""

    rel: float = 0.0
    abs: float = 0.0

    @property
    def exact(self) -> bool:
        return self.rel == 0.0 and self.abs == 0.0

    def allows(self, a: float, b: float) -> bool:
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= self.rel * max(abs(a), abs(b)) + self.abs

    def __str__(self) -> str:
        return "exact" if self.exact else f"{self.rel:g} relative + {self.abs:g}"


EXACT = Tolerance()
FLOAT = Tolerance(rel=1e-4, abs=1e-6)
BIN = Tolerance(rel=2**-7, abs=1e-6)
# Long-table rows whose value is a histogram quantile: (table, metric) -> tolerance.
ESTIMATES = {("massive", "median_abs"): BIN}
# Ranked tables: the columns that name one ranking, the column it is by, and the columns that
# say where an entry sits (the order of near-ties).
RANKINGS = {"massive_top": (("model", "layer", "site"), "abs_value", ("sequence", "position", "dim")),
            "received_by_token": (("model", "layer"), "score", ("token_id",))}
TOLERANCES = {"str": EXACT, "int": EXACT, "bool": EXACT, "float": FLOAT}
# Float columns that hold counts (float so that a row without one leaves the cell empty): each
# metric declares its own (probe/metrics/<m>/__init__.py `counts`), probe.results.schema.COUNTS joins them.
COUNT_COLUMNS = COUNTS
# The long tables (a `metric` column, a `value` column): metrics whose value is a count.
COUNT_METRICS = ("count", "n_queries", "nonfinite", "tokens")
# meta.json keys that differ between two runs of the same analysis: when, with which versions,
# from which command line, and the hash of config.json (which records the transformers version).
VARYING_META = ("timestamp", "versions", "command", "config_hash")
# The same within a record: a graft's base_digest hashes the base's config.json, which records
# the transformers version that saved it.
VARYING_META_NESTED = (("graft", "base_digest"),)
# The per-token series (quantised codes of the numbers the tables pool): their values are checked
# against independent computations in tests/metrics/test_token_series.py, not kept as gold.
NOT_GOLD = ("tokens.json", "tokens.npz")
ROOT = "ROOT"       # the temporary folder of the checkpoints and runs, as the gold files write it
SHOWN = 10          # differences listed in a failure message; the tool lists them all


@dataclass(frozen=True)
class Difference:
    file: str
    where: str              # a column, or a JSON key path; "" for the file as a whole
    row: int | None         # 1-based data row (the file's line is row + 1); None in JSON
    key: str                # the row's key columns, "layer 1, head 0, metric mean"
    gold: str
    now: str
    tolerance: Tolerance | None = None

    def __str__(self) -> str:
        place = self.file + (f", column {self.where}" if self.row is not None else
                             f", {self.where}" if self.where else "")
        if self.row is not None:
            place += f", row {self.row}" + (f" ({self.key})" if self.key else "")
        by = _by(self.gold, self.now) if self.tolerance is not None else ""
        return f"{place}: gold {self.gold}, now {self.now}" + (f" ({by}; tolerance {self.tolerance})" if by else "")


def _by(gold: str, now: str) -> str:
    """How far apart two numbers are; "" when either is not a finite number."""
    try:
        a, b = float(gold), float(now)
    except ValueError:
        return ""
    if not (math.isfinite(a) and math.isfinite(b)):
        return ""
    scale = max(abs(a), abs(b))
    return f"differs by {abs(a - b):.3g}" + (f", {abs(a - b) / scale:.3g} relative" if scale else "")


# -- tables ----------------------------------------------------------------------------------

def _number(text: str) -> float | None:
    """A cell as written by pandas: "" is NaN; None when it is not a number at all."""
    try:
        return float(text) if text.strip() else math.nan
    except ValueError:
        return None


def _tolerance(table: str, column: str, row: dict[str, str]) -> Tolerance:
    kind = TABLES.get(table, {}).get(column, "str")        # a column beyond the schema: as text
    if kind == "float" and (column in COUNT_COLUMNS.get(table, ()) or
                            (column == "value" and row.get("metric") in COUNT_METRICS)):
        return EXACT
    if column == "value" and (table, row.get("metric")) in ESTIMATES:
        return ESTIMATES[table, row.get("metric")]
    return TOLERANCES[kind]


def _at_the_cut(table: str, rows: list[list[str]]) -> set[int]:
    """Data row numbers (1-based) of the last entry of each ranking of a ranked table."""
    if table not in RANKINGS or not rows or any(n not in rows[0] for n in RANKINGS[table][0]):
        return set()
    index = [rows[0].index(name) for name in RANKINGS[table][0]]
    names = [tuple(row[i] for i in index) for row in rows[1:]]
    return {n for n in range(1, len(names) + 1) if n == len(names) or names[n] != names[n - 1]}


def _same_ranking_value(table: str, header: list[str], want: list[str], got: list[str]) -> bool:
    """Whether two rows rank the same: the same ranking and rank, values within FLOAT."""
    names, by, _ = RANKINGS[table]
    a, b = dict(zip(header, want)), dict(zip(header, got))
    x, y = _number(a[by]), _number(b[by])
    return (all(a[n] == b[n] for n in (*names, "rank")) and x is not None and y is not None
            and FLOAT.allows(x, y))


def canonical_ranking(table: str, rows: list[list[str]]) -> list[list[str]]:
    """The rows of a ranked table with each run of near-tied entries (consecutive ranks whose
    values agree within FLOAT) in the order of where they sit; the `rank` column keeps its
    values, so a reordering another CPU's rounding made compares equal. Other tables: as given."""
    if table not in RANKINGS or len(rows) < 2 or "rank" not in rows[0]:
        return rows
    names, by, where = RANKINGS[table]
    header, body = rows[0], [list(r) for r in rows[1:]]
    col = {name: i for i, name in enumerate(header)}
    if any(name not in col for name in (*names, by, *where)):
        return rows
    group = [col[name] for name in names]

    def value(row):
        number = _number(row[col[by]])
        return math.nan if number is None else number

    def sits(row):
        return tuple(_number(row[col[w]]) or 0.0 for w in where)

    start = 0
    while start < len(body):
        end = start + 1
        while (end < len(body) and [body[end][i] for i in group] == [body[start][i] for i in group]
               and FLOAT.allows(value(body[end - 1]), value(body[end]))):
            end += 1
        if end - start > 1:
            ranks = [row[col["rank"]] for row in body[start:end]]
            body[start:end] = sorted(body[start:end], key=sits)
            for row, rank in zip(body[start:end], ranks):
                row[col["rank"]] = rank
        start = end
    return [header] + body


def _key(table: str, row: dict[str, str], column: str) -> str:
    """The row's non-float columns but `model` (one model per run directory)."""
    kinds = TABLES.get(table, {})
    return ", ".join(f"{name} {value}" for name, value in row.items()
                     if name not in ("model", column) and kinds.get(name, "str") != "float")


def diff_table(file: str, gold_text: str, now_text: str) -> list[Difference]:
    table = file.removesuffix(".csv")
    gold, now = (canonical_ranking(table, list(csv.reader(io.StringIO(text))))
                 for text in (gold_text, now_text))
    if not gold or not now or gold[0] != now[0]:
        head = [rows[0] if rows else [] for rows in (gold, now)]
        return [Difference(file, "columns", None, "", ",".join(head[0]), ",".join(head[1]))]
    header, found = gold[0], []
    if len(gold) != len(now):
        found.append(Difference(file, "rows", None, "", str(len(gold) - 1), str(len(now) - 1)))
    cut = _at_the_cut(table, gold) if len(gold) == len(now) else set()
    for number, (want, got) in enumerate(zip(gold[1:], now[1:]), start=1):
        cells = dict(zip(header, want))
        if number in cut and _same_ranking_value(table, header, want, got):
            continue
        for column, a, b in zip(header, want, got):
            if a == b:
                continue
            tolerance = _tolerance(table, column, cells)
            x, y = _number(a), _number(b)
            textual = TABLES.get(table, {}).get(column, "str") in ("str", "bool")
            if textual or x is None or y is None or not tolerance.allows(x, y):
                found.append(Difference(file, column, number, _key(table, cells, column), a, b, tolerance))
        if len(want) != len(got):
            found.append(Difference(file, "fields", number, "", str(len(want)), str(len(got))))
    return found


# -- JSON ------------------------------------------------------------------------------------

def diff_json(file: str, gold, now, path: str = "") -> list[Difference]:
    here = path or "(the whole file)"
    if isinstance(gold, dict) and isinstance(now, dict):
        found = []
        for key in sorted(set(gold) | set(now)):
            inner = f"{path}.{key}" if path else str(key)
            if key not in now or key not in gold:
                found.append(Difference(file, inner, None, "", _show(gold.get(key, ABSENT)),
                                        _show(now.get(key, ABSENT))))
            else:
                found += diff_json(file, gold[key], now[key], inner)
        return found
    if isinstance(gold, list) and isinstance(now, list):
        if len(gold) != len(now):
            return [Difference(file, f"{here} (length)", None, "", str(len(gold)), str(len(now)))]
        return [d for i, (a, b) in enumerate(zip(gold, now)) for d in diff_json(file, a, b, f"{path}[{i}]")]
    if _is_float(gold) and _is_float(now) and (isinstance(gold, float) or isinstance(now, float)):
        return [] if FLOAT.allows(float(gold), float(now)) else [
            Difference(file, here, None, "", _show(gold), _show(now), FLOAT)]
    if gold == now and type(gold) is type(now):
        return []
    return [Difference(file, here, None, "", _show(gold), _show(now), EXACT)]


def _is_float(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


ABSENT = object()      # a key one side lacks


def _show(value) -> str:
    if value is ABSENT:
        return "absent"
    return repr(value) if isinstance(value, str) else json.dumps(value)


# -- run directories -------------------------------------------------------------------------

def diff_files(gold: dict[str, str], now: dict[str, str]) -> list[Difference]:
    """Every difference between two runs, each {file name: text} (the JSON files already
    normalised as the gold keeps them)."""
    found = [Difference(name, "", None, "", "present" if name in gold else "absent",
                        "present" if name in now else "absent")
             for name in sorted(set(gold) ^ set(now))]
    for name in sorted(set(gold) & set(now)):
        if gold[name] == now[name]:
            continue
        if name.endswith(".csv"):
            found += diff_table(name, gold[name], now[name])
        else:
            found += diff_json(name, json.loads(gold[name]), json.loads(now[name]))
    return found


def read_folder(folder: Path, root: Path | None = None) -> dict[str, str]:
    """{file name: text as the gold keeps it} of a run directory or a gold folder: the JSON files
    re-written with sorted keys, meta.json without VARYING_META, the folder `root` (the run's
    temporary checkpoints) written ROOT; a file that is neither a table nor JSON is named only."""
    files = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.name in NOT_GOLD:   # .probe-output: probe's marker
            continue
        if path.suffix == ".csv":
            files[path.name] = path.read_text(encoding="utf-8")
        elif path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if path.name == "meta.json":
                data = {key: value for key, value in data.items() if key not in VARYING_META}
                for outer, inner in VARYING_META_NESTED:
                    if isinstance(data.get(outer), dict):
                        data[outer] = {k: v for k, v in data[outer].items() if k != inner}
            text = json.dumps(data, indent=2, sort_keys=True) + "\n"
            files[path.name] = text.replace(str(root), ROOT) if root is not None else text
        else:
            files[path.name] = "(not compared)"
    return files


def write_gold(folder: Path, files: dict[str, str], differences: list[Difference]) -> None:
    """Rewrite the gold files that `differences` name with the run's `files` (and remove those
    the run no longer writes); a file within the tolerances stays as it is."""
    folder.mkdir(parents=True, exist_ok=True)
    for file in sorted({d.file for d in differences}):
        if file not in files:
            (folder / file).unlink()
        elif file.endswith((".csv", ".json")):
            (folder / file).write_text(files[file], encoding="utf-8")
        else:
            raise ValueError(f"{file} is neither a table nor JSON: a run directory holds no such file")


def summary(differences: list[Difference], shown: int = SHOWN) -> str:
    lines = [f"  {d}" for d in differences[:shown]]
    if len(differences) > shown:
        lines.append(f"  ... and {len(differences) - shown} more")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python tests/gold_diff.py GOLD_FOLDER RUN_DIRECTORY [ROOT]  (ROOT: the folder "
              "the gold writes ROOT, the gold test's temporary folder)", file=sys.stderr)
        return 2
    gold, now, *root = (Path(arg) for arg in argv)
    for folder in (gold, now):
        if not folder.is_dir():
            print(f"{folder} is not a folder (a gold folder tests/gold_runs/CASE, or a run directory)",
                  file=sys.stderr)
            return 2
    differences = diff_files(read_folder(gold), read_folder(now, *root))
    print(summary(differences, len(differences)) if differences else "no differences beyond the tolerances")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
