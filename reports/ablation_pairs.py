"""Gated against ungated under the same sink ablation: the difference of two models' loss changes
on the same sequences, with a paired interval (the report's table "Gated against ungated, the
same sequences", and what `probe compare` / `probe report` print under it).

Two models measured on the same hard and easy sequences share much of their noise; resampling
the sequences once for both models and both passes (probe.intervals.paired_loss) leaves it out,
where two intervals side by side would count it twice. Read from ablation_sequences.csv (the
per-sequence nll sums) of each pair of runs that read the same token ids.

    from probe.reports.ablation_pairs import between_models
    between_models(["runs/base", "runs/grafted"])       # run directories, Analysis objects or Runs
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from probe.intervals.paired_loss import paired_difference
from probe.reports.claims.pairs import gate_pairs
from probe.reports.runs import load_runs

BETWEEN_RESAMPLES = 2000     # the paired intervals of gated − ungated (fixed seed: the same runs, the same interval)


def between_models(runs: Any, resamples: int = BETWEEN_RESAMPLES) -> pd.DataFrame:
    """Per (ungated, gated) pair of runs (claims.pairs.gate_pairs: the matched pairs, else those
    that read the same token ids, meta.json tokens_sha256) and
    per ablation both ran on the same tokens of each sequence: ungated, gated, ablation, sequences,
    tokens, delta_ungated, delta_gated, difference (gated − ungated), lo, hi (its paired interval,
    the sequences resampled together for both models) and reading. Empty (those columns) where
    no such pair ran the same ablations."""
    runs = load_runs(runs)
    seqs = runs.ablation_sequences
    layer_of = {(r.model, r.ablation): (r.kind, r.layer) for r in runs.ablations.itertuples()}
    rows = []
    for ungated, gated in gate_pairs(runs):
        mine, theirs = (seqs[seqs["model"] == m] for m in (gated, ungated))
        both = mine.merge(theirs, on=["ablation", "sequence"], suffixes=("_g", "_u"))
        for name, got in both.groupby("ablation", sort=False):
            if not (got["tokens_g"] == got["tokens_u"]).all():      # not the same targets: no pairing
                continue
            d = paired_difference(got["nll_g"], got["base_nll_g"], got["nll_u"], got["base_nll_u"],
                                  got["tokens_g"], resamples)
            reading = reading_of(d["lo"], d["hi"])
            (kind, layer_g), (_, layer_u) = layer_of.get((gated, name), ("", -1)), layer_of.get((ungated, name), ("", -1))
            if str(kind).startswith("massive") and layer_g != layer_u:
                # "where they appear" (the first layer that has any) is another layer in each
                # model: two different interventions ("every layer" is one rule in both)
                reading = f"not comparable: layer {layer_g} against layer {layer_u}"
            elif str(kind).startswith("massive"):
                # a sequence whose activations stay below the threshold is left as it was (its nll
                # unchanged to the bit): where that differs between the models, so do the interventions
                touched = [set(got["sequence"][got[f"nll_{m}"] != got[f"base_nll_{m}"]]) for m in "gu"]
                if touched[0] != touched[1]:
                    reading = (f"not comparable: it changed sequences {listed(touched[0])} of the gated model, "
                               f"{listed(touched[1])} of the ungated")
            rows.append(dict(ungated=ungated, gated=gated, ablation=name, sequences=len(got),
                             tokens=int(got["tokens_g"].sum()), delta_ungated=d["second"], delta_gated=d["first"],
                             difference=d["difference"], lo=d["lo"], hi=d["hi"], reading=reading))
    order = {n: i for i, n in enumerate(dict.fromkeys(runs.ablations["ablation"]))}
    frame = pd.DataFrame(rows, columns=["ungated", "gated", "ablation", "sequences", "tokens", "delta_ungated",
                                        "delta_gated", "difference", "lo", "hi", "reading"])
    return frame.sort_values(["ungated", "gated", "ablation"], key=lambda c: c.map(order) if c.name == "ablation"
                             else c, kind="stable").reset_index(drop=True)


def listed(sequences: set) -> str:
    return ", ".join(map(str, sorted(sequences))) or "none"


def reading_of(lo: float, hi: float) -> str:
    """A direction only where the paired interval excludes 0."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no interval (one sequence)"
    return ("the gated model loses less" if hi < 0 else "the gated model loses more" if lo > 0
            else "no measurable difference")
