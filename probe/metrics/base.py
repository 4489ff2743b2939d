"""What a metric is: reducers fed by events, the tables read from them, its summary keys.

    class Metric:
        TABLES        table -> column -> kind ("str", "int", "float", "bool"): its files of
                      the run directory (docs/run-directory.md), declared in probe/schema.py
                      (torch-free, read by reports/), whose TABLES joins them
        SUMMARY_KEYS  the summary.json keys it writes, in file order
        subscribe(on)        on(event, fn) for each event it reads (probe/events.py)
        reducers()           its reducers, in a fixed order (merged under torchrun, saved by --resume)
        frames(done)         {table: DataFrame} once the pass is over
        summarise(a, layers, done)  its summary keys (a dict), and its part of each layer's entry
        meta(done)           its meta.json keys

`done` (Done) holds what a finished pass knows beside the reducers: the run's
name, the tokenizer, the other metrics (sparsity reads the gates' mean) and the exact control.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Done:
    """What a finished pass knows beside its reducers."""

    name: str                            # the run's name: the model column of every table
    tokenizer: object
    metrics: dict                        # name -> Metric of the same pass
    control: dict | None = None          # layer -> the exact mean-gate control (control.py)
    resamples: int = 1000                # bootstrap resamples of the intervals (options.resamples)
    documents: list | None = None        # per sequence its document (data.Dataset.documents), or none


class Metric:
    name = ""
    TABLES: dict[str, dict[str, str]] = {}
    SUMMARY_KEYS: tuple[str, ...] = ()

    def __init__(self, layout, **context):
        self.layout = layout
        self.stats: dict = {}

    def subscribe(self, on) -> None:
        pass

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
