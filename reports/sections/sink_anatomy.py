"""The report's section on sink anatomy (probe analyze --anatomy): attention received by every
key position, the tokens and secondary sinks that receive it, value drains, gate-sink coupling;
and, for a gated and a baseline run on the same tokens, F-Attn beside the mean gate per head.

Runs without these tables get no section at all (not even a left-out line): a report of runs
analysed without --anatomy reads exactly as before.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from probe.reports import plots
from probe.reports.tables import anatomy as tables_anatomy
from probe.reports.tables.anatomy import position0_token_id
from probe.reports.sections.items import FigureItem, Item, Section, TableItem
from probe.reports.plots.anatomy import (anatomy_models, few_query_columns, key_label, log_norm,
                                         received_buckets, received_matrix, sink_bar)
from probe.reports.claims.pairs import gate_pairs
from probe.reports.runs import Runs
from probe.reports.labels import SINK_EPSILON
from probe.reports.text import join_names, plain

TOP_TOKENS = 8            # rows per run of the sink-token table
TOP_SECONDARY = 10        # rows per run of the secondary-sink table


def anatomy(runs: Runs) -> Section | None:
    """The sink-anatomy section, or None when no run has anything for it."""
    items: list[Item] = []
    epsilon = anatomy_epsilon(runs)
    if anatomy_models(runs):
        items.append(FigureItem(
            "received-attention", "Attention received per key position and layer",
            partial(plots.plot_received_attention, runs, epsilon=_single(epsilon)),
            received_caption(runs, epsilon)))
    key0 = tables_anatomy.key0_display(runs)
    if len(key0):
        items.append(TableItem(
            "key0-intervals", "Attention received by key 0, with 95% intervals", key0,
            "Per run: key 0's importance score (the mean of P[t, 0] over the queries that see it, "
            "query 0 included; mean over sequences, heads and layers), its sink rate (the share of "
            f"(sequence, layer, head) cells above ε = {_listed(epsilon)}) and the count of "
            "secondary-sink cells. Brackets: 95% percentile bootstrap intervals over the sequences "
            "(per_sequence.csv); a count's interval is that of the total over a resample."))
    sink_tokens = tables_anatomy.sink_tokens_display(runs, TOP_TOKENS)
    if len(sink_tokens):
        items.append(TableItem("sink-tokens", "Tokens that receive the most attention",
                               sink_tokens, sink_tokens_caption(runs)))
    if len(runs.secondary_sinks):
        items.append(TableItem(
            "secondary-sinks", "Secondary sinks",
            tables_anatomy.secondary_sinks_display(runs, TOP_SECONDARY),
            f"The {TOP_SECONDARY} highest-scoring secondary sinks of each run: a (layer, head, "
            "sequence, key position ≥ 1) cell whose importance score (the mean attention the "
            "key receives from the queries that see it) exceeds "
            f"ε = {_listed(epsilon)}, highest first; the token is the one at that position. "
            "Only keys seen by at least "
            + ", ".join(str(b) for b in sorted({sink_bar(runs, m) for m in anatomy_models(runs)}))
            + " queries count (fewer read high from recency alone). "
            "A sink away from position 0 (a delimiter, a newline, a repeated special token) "
            "is one F-Attn cannot see."))
    sinks = sink_models(runs)
    # Without a sink in any run the "sink key" is an ordinary key: the figures about sinks and
    # their captions would describe what is not there.
    if len(runs.value_drains) and sinks:
        items.append(FigureItem(
            "value-drains", "Value drains per layer",
            partial(plots.plot_value_drains, runs),
            "Left: the norm of the value vector at each head's sink keys over the median value "
            "norm of its keys (log scale; dashed: equal to the median), mean over heads with a "
            "sink key. Right: the share of the attention output along the sink's contribution "
            "(over all keys the shares sum to 1), mean over heads. One line per run. A sink "
            "that receives much attention but carries a small value (ratio below 1, small "
            "share) is a no-op: the head parks its attention there to pass nothing on."))
    if len(runs.gate_sink) and sinks:
        items.append(FigureItem(
            "gate-vs-sink", "Gate score against attention on the sink",
            partial(plots.plot_gate_vs_sink_attention, runs), gate_sink_caption(runs)))
    pairs = [(baseline, gated) for baseline, gated in gate_pairs(runs)
             if has_sink_head(runs, baseline, _single(epsilon) or SINK_EPSILON)]
    if pairs:
        items.append(FigureItem(
            "f-attn-vs-gate", "Baseline F-Attn against the gated model's gate, per head",
            partial(plots.plot_gate_vs_baseline_f_attn, runs),
            "One point per (layer, head): x the baseline's F-Attn (attention on the first "
            "token, mean over queries t ≥ 1, first_token.csv), y the gated run's mean gate "
            "score of the same layer and head (all positions, gates.csv); one panel per "
            "gated run and baseline that read the same token ids ("
            + "; ".join(f"{plain(gated)} vs {plain(baseline)}" for baseline, gated in pairs)
            + "), colour: layer. Heads that are sinks in the baseline (right) and have a "
            "nearly closed gate in the gated model (bottom) are where the gate took over "
            "the sink's job of passing nothing on."))
    if not items:
        return None
    return Section(
        id="sink-anatomy", title="Sink anatomy",
        intro=("Where attention goes beyond the first token: which key positions and tokens "
               "receive it, whether the sinks carry any value, and whether a gated head "
               "closes its gate where it would otherwise dump attention on a sink."),
        items=items,
        notes=(_missing_notes(runs) + _no_sink_notes(runs, sinks, epsilon)
               + _no_sink_head_notes(runs, pairs, epsilon)),
    )


def _no_sink_head_notes(runs: Runs, shown: list, epsilon) -> list[str]:
    """One line per baseline whose pairs the F-Attn-against-gate figure leaves out (its gated
    runs named together: a line per pair repeated the same sentence)."""
    left: dict[str, list[str]] = {}
    for baseline, gated in gate_pairs(runs):
        if (baseline, gated) not in shown:
            left.setdefault(baseline, []).append(plain(gated))
    return [f"Baseline F-Attn against the gate is left out for {join_names(gated)} vs {plain(baseline)}: "
            f"no head of {plain(baseline)} has F-Attn above ε = {_listed(epsilon)}, so there is no sink "
            "head whose gate to compare." for baseline, gated in left.items()]


def sink_models(runs: Runs) -> list[str]:
    """The runs with a sink to show: some (layer, head, key bucket) whose keys' importance score
    exceeds ε in at least one cell (received_by_position.csv's sink_rate > 0, per head), in a
    bucket whose keys are seen by the run's bar of queries on average."""
    rows = runs.received_by_position
    if rows.empty:
        return []
    # Only buckets whose keys are seen by enough queries: the last keys of a sequence read
    # above ε from recency alone (the hatched columns of the heatmap).
    rows = rows[(rows["head"] >= 0) & (rows["sink_rate"] > 0) & (rows["cells"] > 0)]
    if rows.empty:
        return []
    bars = np.array([sink_bar(runs, model) for model in rows["model"]], dtype=float)
    enough = (rows["queries"] / rows["cells"]).to_numpy(dtype=float) >= bars
    found = set(rows[enough]["model"])
    return [model for model in runs.models if model in found]


def has_sink_head(runs: Runs, model: str, epsilon: float) -> bool:
    """Whether some head of `model` is a first-token sink: F-Attn above ε (first_token.csv)."""
    rows = runs.rows("first_token", model)
    rows = rows[rows["metric"] == "f_attn"]
    return bool((rows["value"] > epsilon).any())


def _no_sink_notes(runs: Runs, sinks: list[str], epsilon: dict[str, float]) -> list[str]:
    """Which runs have no sink (no key above ε), and, where none has, that the figures about
    sinks are left out."""
    none = [model for model in anatomy_models(runs) if model not in sinks]
    if not none:
        return []
    names = ", ".join(plain(model) for model in none)
    if sinks:
        return [f"{names}: no key receives an importance score above ε = {_listed(epsilon)} (no "
                "attention sink); in the figures about sinks its \"sink key\" is its top key."]
    return [f"No run has an attention sink (no key receives an importance score above ε = "
            f"{_listed(epsilon)}): the value-drain and gate-against-sink figures are left out."]


def anatomy_epsilon(runs: Runs) -> dict[str, float]:
    """Each anatomy run's sink threshold as summary.json saved it (Gu et al.'s 0.3 where it
    does not say)."""
    saved = {}
    for model in runs.models:
        value = (runs.summary[model].get("anatomy") or {}).get("epsilon")
        saved[model] = float(SINK_EPSILON if value is None else value)
    with_tables = anatomy_models(runs) + anatomy_models(runs, "secondary_sinks")
    return {model: saved[model] for model in runs.models if model in with_tables} or saved


def _single(epsilon: dict[str, float]) -> float | None:
    return next(iter(epsilon.values())) if len(set(epsilon.values())) == 1 else None


def _listed(epsilon: dict[str, float]) -> str:
    if len(set(epsilon.values())) == 1:
        return f"{next(iter(epsilon.values())):g}"
    return "(" + ", ".join(f"{plain(model)}: {value:g}" for model, value in epsilon.items()) + ")"


def received_caption(runs: Runs, epsilon: dict[str, float]) -> str:
    buckets = received_buckets(runs)
    exact = [lo for lo, hi in buckets if hi - lo == 1]
    ranges = [(lo, hi) for lo, hi in buckets if hi - lo != 1]
    norm = log_norm([received_matrix(runs, model) for model in anatomy_models(runs)])
    columns = (f"the exact key positions {int(min(exact))}-{int(max(exact))}" if exact else "")
    if ranges:
        columns += ((", then " if exact else "") + f"{len(ranges)} buckets of doubling width "
                    f"({key_label(*ranges[0])} to {key_label(*ranges[-1])})")
    marked = (f"; the line on the colour bar is ε = {_listed(epsilon)}"
              if _single(epsilon) is not None and norm.vmin < _single(epsilon) < norm.vmax
              else "")
    return ("Each cell is Gu et al.'s importance score of a key (ICLR 2025): the attention "
            "probability P[t, k] the key k receives, averaged over the queries t that can see it, "
            "then over sequences and heads, and over the keys of the cell's bucket. Columns: "
            f"{columns}; rows: layers; one panel per run analysed with --anatomy. Uniform "
            "attention gives key k the mean of 1/(t+1) over t ≥ k, between 1/T and about "
            f"ln(T)/T for T keys; a sink is near 1. Colour: log scale from {norm.vmin:.2g} to "
            f"{norm.vmax:.2g}, shared by all panels (smaller values at its bottom); a key whose score exceeds ε = "
            f"{_listed(epsilon)} is a sink in Gu et al.'s sense{marked}. Grey: no such key "
            "(a bucket past the longest sequence, a layer without softmax attention)."
            + few_queries_sentence(runs))


def few_queries_sentence(runs: Runs) -> str:
    """What the hatched columns mean, where a panel has one: buckets of keys seen by fewer
    queries than a secondary sink needs (the end of the sequences)."""
    marked = [model for model in anatomy_models(runs) if few_query_columns(runs, model)]
    if not marked:
        return ""
    bars = sorted({sink_bar(runs, model) for model in marked})
    return (" Hatched: buckets whose keys are seen by fewer than "
            f"{', '.join(map(str, bars))} queries on average (" + ", ".join(plain(m) for m in marked)
            + "): the last keys of a sequence are seen only by their nearest queries, which "
            "attend to recent keys, so their scores read high from recency, not as sinks; "
            "such keys are not listed as secondary sinks." + _all_hatched(runs, marked))


def _all_hatched(runs: Runs, models: list[str]) -> str:
    """A sentence for the runs whose sequences are no longer than the bar: there every key after
    position 0 is seen by fewer queries than a secondary sink needs (a key at s by T - s)."""
    def length(model: str) -> int:           # runs saved before longest_sequence: the cut length
        meta = runs.meta[model]
        return int(meta.get("longest_sequence") or meta.get("seq_len") or 0)
    short = [m for m in models if 0 < length(m) <= sink_bar(runs, m)]
    if not short:
        return ""
    longest = max(length(m) for m in short)
    return (f" In {', '.join(plain(m) for m in short)}, whose sequences have at most {longest} tokens, "
            "that is every key after position 0: no secondary sink can be named there; analyse "
            f"sequences longer than {max(sink_bar(runs, m) for m in short)} tokens (--seq-len) to read them.")


def sink_tokens_caption(runs: Runs) -> str:
    least = {runs.meta[model].get("anatomy_min_queries") for model in anatomy_models(
        runs, "received_by_token")}
    least.discard(None)
    seen = (f"cells seen by at least {', '.join(str(n) for n in sorted(least))} queries"
            if least else "cells seen by enough queries")
    # Only a run whose sequences all start with one token (its BOS, or one shared first token)
    # has a position-0 token to mark; the others' first tokens are ordinary text.
    unmarked = [m for m in anatomy_models(runs, "received_by_token") if position0_token_id(runs.meta[m]) is None]
    return (f"Per run the {TOP_TOKENS} tokens with the highest mean importance score over the "
            "whole model: the mean over every layer, head and (sequence, key) cell of the token "
            "(received_by_token.csv, layer -1; summary.json's top_sink_tokens are its first "
            "rows). Sink share: the share of those cells and heads above ε; cells counts the "
            "token's cells summed over layers. Only " + seen + " count, as the last keys of a "
            "sequence are seen by few queries. Where every sequence starts with one token (a BOS), "
            f"that token is marked (position 0) and listed after the top {TOP_TOKENS} where it is not "
            "among them"
            + (f"; {join_names(unmarked)} "
               + ("starts its" if len(unmarked) == 1 else "start their")
               + " sequences with different tokens: none is marked." if unmarked else "."))


def gate_sink_caption(runs: Runs) -> str:
    # The bins as saved (empty bins have no row, so they are counted from their width).
    widths = (runs.gate_sink["attention_hi"] - runs.gate_sink["attention_lo"]).round(9)
    width = float(widths.median())
    return ("Per gated layer (one curve, coloured by layer) the mean gate score of the queries "
            "binned by the attention they put on their head's top sink key "
            f"({round(1 / width)} bins of width {width:.2g} on [0, 1]; bins without queries "
            "have no point), each bin drawn at the mean "
            "attention of its queries, pooled over heads weighted by their queries "
            "(gate_sink.csv); one panel per gated run. A curve that falls to the right is a head "
            "that closes its gate where its attention would go to the sink.")


def _missing_notes(runs: Runs) -> list[str]:
    with_tables = set(anatomy_models(runs))
    if not with_tables:
        return []
    secondary = set(runs.secondary_sinks["model"]) if len(runs.secondary_sinks) else set()
    epsilon = anatomy_epsilon(runs)
    # One sentence per group, not one per model (a report of five runs read five near-identical
    # bullets): the runs without anatomy, then the runs without a secondary sink by their ε.
    plain_runs = [model for model in runs.models if model not in with_tables]
    notes = ([f"{join_names(plain_runs)} {'was' if len(plain_runs) == 1 else 'were'} analysed without --anatomy: "
              f"{'it has' if len(plain_runs) == 1 else 'they have'} no received-attention tables."]
             if plain_runs else [])
    by_epsilon: dict[float, list[str]] = {}
    for model in runs.models:
        if model in with_tables and model not in secondary:
            by_epsilon.setdefault(epsilon.get(model, SINK_EPSILON), []).append(model)
    for value, models in by_epsilon.items():
        notes.append(f"{join_names(models)} {'has' if len(models) == 1 else 'have'} no secondary sink: no key away "
                     f"from position 0 received a score above ε = {value:g} (secondary_sinks.csv is empty).")
    return notes
