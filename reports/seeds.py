"""Runs that differ only in seed, as one group: the mean over seeds with its 95% t interval, the
per-seed values beside it, and the two spreads kept apart (between seeds: the sd of the per-seed
values; within a seed: the bootstrap standard error over sequences, averaged over the seeds).

A group is the arms of `probe train` runs whose recipes differ only in the seed (meta.json
train_recipe), grafts whose records differ only in the seed (meta.json graft), or a group the
user names (`groups`, the command line's --group NAME:RUN,RUN,...).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from probe.intervals import seed_interval
from probe.intervals.bootstrap import MIN_RESAMPLES
from probe.reports.claims.intervals import resamples_of, values_of
from probe.reports.claims.numbers import fmt as _f
from probe.reports.runs import Runs, load_runs
from probe.reports.labels import SINK_EPSILON

QUANTITIES = {
    "F-Attn": ("f_attn", lambda v, W: v.f_attn(W)),
    "sink rate": ("sink_rate", lambda v, W: v.sink_rate(W, SINK_EPSILON)),
    "M-Act": ("m_act", lambda v, W: v.m_act(W)),
    "mean gate": ("mean_gate", lambda v, W: v.mean_gate(W)),
    "loss": ("loss", lambda v, W: v.loss(W)),
}
COLUMNS = ["group", "quantity", "seeds", "mean", "lo", "hi", "per_seed", "seed_sd", "sequence_sd"]


def _without_seed(record) -> tuple | None:
    if not isinstance(record, dict):
        return None
    return tuple(sorted((k, repr(v)) for k, v in record.items() if k != "seed"))


def parse_groups(texts) -> dict[str, list[str]]:
    """--group NAME:RUN,RUN ... -> {name: [runs]}; ValueError naming a malformed one."""
    groups = {}
    for text in texts or ():
        name, sep, members = str(text).partition(":")
        runs = [m for m in members.split(",") if m]
        if not sep or not name or len(runs) < 2:
            raise ValueError(f"--group {text}: give NAME:RUN,RUN,... (two runs or more, by their names)")
        groups[name] = runs
    return groups


def seed_groups(runs: Runs, declared: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """{group name: models} of two or more runs each."""
    if declared:
        for name, members in declared.items():
            unknown = [m for m in members if m not in runs.models]
            if unknown:
                raise ValueError(f"--group {name}: no run is named {unknown[0]!r} (the runs: {', '.join(runs.models)})")
        return dict(declared)
    found: dict[tuple, list[str]] = {}
    for model in runs.models:
        meta = runs.meta[model]
        for key in ("train_recipe", "graft"):
            rest = _without_seed(meta.get(key))
            if rest is not None and meta[key].get("seed") is not None:
                found.setdefault((key, rest), []).append(model)
                break
    groups = {}
    for (key, rest), members in found.items():
        if len(members) > 1:
            recipe = runs.meta[members[0]][key]
            base = str(recipe.get("arm") or recipe.get("gate") or members[0])
            name = base if base not in groups else f"{base} ({members[0]})"
            groups[name] = members
    return groups


def _point(v, statistic) -> float:
    out = statistic(v, np.ones((1, v.sequences)))
    return math.nan if out is None else float(out[0])


def _sequence_sd(runs: Runs, model: str, statistic) -> float:
    v = values_of(runs, model)
    resamples = resamples_of(runs, model)
    if v is None or v.units < 2 or resamples < MIN_RESAMPLES:
        return math.nan
    samples = statistic(v, v.weights(resamples))
    return math.nan if samples is None else float(np.nanstd(samples, ddof=1))


def seed_table(runs: Any, groups: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """One row per group and quantity (COLUMNS); per_seed lists each seed's value in run order."""
    runs = load_runs(runs)
    groups = seed_groups(runs, groups)
    rows = []
    for name, members in groups.items():
        for label, (key, statistic) in QUANTITIES.items():
            per_seed = [_number(runs.summary[m].get(key)) for m in members]
            if all(math.isnan(x) for x in per_seed):
                continue
            mean, lo, hi, sd = seed_interval(per_seed)
            within = [_sequence_sd(runs, m, statistic) for m in members]
            within = [w for w in within if not math.isnan(w)]
            rows.append({"group": name, "quantity": label, "seeds": len(members), "mean": mean, "lo": lo, "hi": hi,
                         "per_seed": dict(zip(members, per_seed)), "seed_sd": sd,
                         "sequence_sd": float(np.mean(within)) if within else math.nan})
    return pd.DataFrame.from_records(rows, columns=COLUMNS)


def seed_display(runs: Any, groups=None) -> pd.DataFrame:
    frame = seed_table(runs, groups)
    return pd.DataFrame({
        "group": [f"{g} ({n} seeds)" for g, n in zip(frame["group"], frame["seeds"])],
        "quantity": frame["quantity"],
        "mean [95% over seeds]": [f"{_f(m)} [{_f(lo)}, {_f(hi)}]" for m, lo, hi in zip(frame["mean"], frame["lo"], frame["hi"])],
        "per seed": ["; ".join(f"{k} {_f(v)}" for k, v in d.items()) for d in frame["per_seed"]],
        "sd between seeds": [_f(x) for x in frame["seed_sd"]],
        "sd over sequences": [_f(x) for x in frame["sequence_sd"]],
    }).set_index("group")


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
