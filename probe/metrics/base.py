"""What a metric is: its declaration (torch-free, read by the run directory's schema and by
reports/) and its `Metric` (the reducers fed by events, the tables read from them).

    Declaration          in probe/metrics/<m>/__init__.py, imports no torch
        name             the metric's name (its package's); its Metric subclass is `metric` in
                         probe/metrics/<m>/reduce.py
        order            its place in the pass (lower first): the order of the reducers (merged
                         under torchrun, saved by --resume), of its tables, of summarise()
        events           event (probe/core/events.py) -> the Metric's method the bus subscribes
        tables           table -> column -> kind ("str", "int", "float", "bool"): its files of
                         the run directory (docs/run-directory.md); probe.results.schema.TABLES joins them
        summary_keys     the summary.json keys it writes, in file order
        summary_order    where they go in summary.json (lower first; None: it writes none)
        layer_keys       its keys in each entry of summary.json `layers`, with their empty value
        layer_order      where they go in that entry (lower first; the per-head list `heads` last)
        meta_keys        the meta.json keys it writes
        option           the AnalysisOptions field that turns it on; its tables are then optional
                         (probe.results.schema.OPTIONAL_TABLES) and it writes nothing when the option is off
        counts           table -> its float columns that hold counts (compared exactly in the gold)

    class Metric(layout, options, *, vocab_size=None, sequences=None, token_groups=None, token_ids=None):
        setup()              its reducers, made once the constructor (written once, in the
                             base class) has set layout, options and context
        listens(event)       whether it subscribes to a declared event in this pass (default yes)
        reducers()           its reducers, in a fixed order (merged under torchrun, saved by --resume)
        frames(done)         {table: DataFrame} once the pass is over
        summarise(a, layers, done)  its summary keys (a dict), and its part of each layer's entry
        meta(done)           its meta.json keys
        nonfinite()          NaN/inf values it left out, by `layer:where`

`done` (Done) holds what a finished pass knows beside the reducers: the run's
name, the tokenizer, the other metrics (sparsity reads the gates' mean) and the exact control.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Declaration:
    """Everything the rest of probe (and reports/) needs to know about a metric, without torch."""

    name: str
    metric: str                                          # the Metric subclass in <m>/reduce.py
    order: int
    events: dict[str, str]                               # event -> method name
    tables: dict[str, dict[str, str]] = field(default_factory=dict)
    summary_keys: tuple[str, ...] = ()
    summary_order: int | None = None
    layer_keys: dict[str, object] = field(default_factory=dict)
    layer_order: int = 0
    meta_keys: tuple[str, ...] = ()
    option: str | None = None
    counts: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class PassContext:
    """What a metric's pass knows beside the layout and the options (Metric.context)."""

    vocab_size: int | None = None        # the model's vocabulary (sink anatomy needs it)
    sequences: int | None = None         # the dataset's row count (the per-sequence state's size)
    token_groups: object = None          # the data's token groups (data.token_types.TokenGroups)
    token_ids: object = None             # every token id of the data (an int64 tensor), when known:
                                         # the by-token tables' rows (metrics/token_index.py)


@dataclass
class Done:
    """What a finished pass knows beside its reducers."""

    name: str                            # the run's name: the model column of every table
    tokenizer: object
    metrics: dict                        # name -> Metric of the same pass
    control: dict | None = None          # layer -> the exact mean-gate control (control.py)
    resamples: int = 1000                # bootstrap resamples of the intervals (options.resamples)
    documents: list | None = None        # per sequence its document (data.Dataset.documents), or none
    derived: dict = field(default_factory=dict)   # what several metrics read from the finished tables,
                                                  # made once for this Done (`derived_from`)

    def derived_from(self, name: str, table, make):
        """make(table), once for this table: per_sequence.csv's arrays, say, which the
        per-sequence intervals and sink anatomy's both read (another table object: made again)."""
        seen = self.derived.get(name)
        if seen is None or seen[0] is not table:
            seen = self.derived[name] = (table, make(table))
        return seen[1]


class Metric:
    """A metric's reducers; a subclass names its `declaration`, from which name, TABLES,
    SUMMARY_KEYS and OPTION are read."""

    declaration: Declaration
    name = ""
    TABLES: dict[str, dict[str, str]] = {}
    SUMMARY_KEYS: tuple[str, ...] = ()
    OPTION: str | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        d = cls.__dict__.get("declaration")
        if d is not None:
            cls.name, cls.TABLES, cls.SUMMARY_KEYS, cls.OPTION = d.name, d.tables, d.summary_keys, d.option

    def __init__(self, layout, options, *, vocab_size: int | None = None, sequences: int | None = None,
                 token_groups=None, token_ids=None):
        """options: the AnalysisOptions of the pass (probe/core/options.py); vocab_size: the
        model's vocabulary; sequences: the dataset's row count (the per-sequence state's size);
        token_groups: the data's token groups (probe.data.token_types.TokenGroups), None without a gate;
        token_ids: the data's token ids, when known (the by-token tables then hold a row per id
        of the data, not of the vocabulary: metrics/token_index.py).

        Written once, here, for every metric: a metric makes its reducers in `setup`, reading
        self.layout, self.options and self.context."""
        self.layout = layout
        self.options = options
        self.context = PassContext(vocab_size, sequences, token_groups, token_ids)
        self.stats: dict = {}
        self.setup()

    def setup(self) -> None:
        """Make this pass's reducers (self.stats) from self.layout, self.options, self.context."""

    def listens(self, event: str) -> bool:
        """Whether this pass subscribes the declared method of `event` (a metric switched off
        by its option, or an ungated model's gate metric, listens to nothing)."""
        return True

    def reducers(self) -> list:
        return [self.stats[key] for key in sorted(self.stats)]

    def frames(self, done) -> dict:
        return {}

    def summarise(self, a, layers: list[dict], done) -> dict:
        return {}

    def meta(self, done) -> dict:
        return {}

    def nonfinite(self) -> dict[str, int]:
        """NaN/inf values this metric left out, by `layer:where` (meta.json nonfinite_activations)."""
        return {}


def mean(values) -> float | None:
    """The mean of the finite values, None when there are none (summary.json's convention)."""
    import math

    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(values) / len(values) if values else None


def rows_table(rows: list[dict], columns: list[str]):
    """pd.DataFrame(rows, columns=columns) for rows that each hold every column, built column by
    column (the same frame, a few times faster)."""
    import pandas as pd

    if not rows:
        return pd.DataFrame(rows, columns=columns)
    return table({c: [r[c] for r in rows] for c in columns})


def table(columns: dict[str, list]):
    """A DataFrame from its columns (equal-length lists, in table order): the frame a list of
    row dicts gives (the same dtypes), a few times faster for the thousands of rows a metric's
    table holds; no rows: the empty frame without columns that an empty list gives."""
    import numpy as np
    import pandas as pd

    if not columns or not len(next(iter(columns.values()))):
        return pd.DataFrame()
    # Numbers as numpy arrays first (numpy infers int64 or float64 as pandas would, in a fraction
    # of its time); anything else (text, None) as the list, for pandas to infer.
    arrays = {}
    for name, values in columns.items():
        array = np.asarray(values) if values and not isinstance(values[0], str) else None
        arrays[name] = array if array is not None and array.dtype.kind in "iuf" else values
    return pd.DataFrame(arrays)
