"""The report's sections on the output gate: gate scores and the sparsity of the attention output."""

from __future__ import annotations

from functools import partial

from probe.reports.sections import notes
from probe.reports import plots, tables
from probe.reports.sections.items import FigureItem, Item, Section, TableItem, axes_level, left_out
from probe.reports.plots.gates import SATURATION_THRESHOLDS, histogram_layers
from probe.reports.plots.sparsity import SHARED_SCALE_RATIO, sparsity_scales_shared
from probe.reports.claims.reference import figure5_caption
from probe.reports.runs import Runs
from probe.reports.labels import HEADLINE_THRESHOLDS
from probe.reports.sections.attention import has_linear_attention
from probe.reports.claims.scope import other_gate
from probe.reports.text import join_layers, join_names


def gates(runs: Runs) -> Section:
    if not runs.gated_models:
        return left_out("gates", "Gate scores", "no model in this report has an output gate")
    items: list[Item] = [
        FigureItem("gate-histograms", "Gate score distributions per layer",
                   partial(plots.plot_gate_histograms, runs),
                   f"Histogram of {_sigmoid_word(runs)}gate scores ({gate_bins(runs)}) per gated layer "
                   f"(layers {join_layers(histogram_layers(runs))}), summed over heads and "
                   "shown as the share of all scores of that layer; log y scale. Mass near 0 "
                   "means the gate mostly closes, which is what makes the gated output sparse."
                   + _other_gates(runs)),
        FigureItem("gate-stats", "Gate score statistics per layer",
                   axes_level(partial(plots.plot_gate_stats_by_layer, runs)),
                   "Mean gate score per layer (line) with ±1 standard deviation (band) and the "
                   "minimum and maximum (thin dashed), pooled over heads with their element "
                   "counts."),
        FigureItem("gate-heatmap", "Mean gate score per layer and head",
                   partial(plots.plot_gate_heatmap, runs),
                   "Mean gate score for every layer (rows) and head (columns) of each gated "
                   "model, one colour scale for all panels."
                   + (" Hatched rows are layers without an output gate on softmax attention "
                      "(linear attention)." if has_linear_attention(runs) else "")),
        FigureItem("gate-saturation", "Gate saturation",
                   axes_level(partial(plots.plot_gate_saturation, runs)),
                   "Cumulative share of gate scores below x at x = "
                   f"{_listed(SATURATION_THRESHOLDS)} (logit x axis; below {_listed(_ABOVE)} as "
                   "1 − the share above), pooled over layers and heads with their element "
                   "counts, one line per model. A line that rises early (many scores near 0) "
                   f"and reaches 1 before {min(_ABOVE.values()):g} (few near 1) is the sparse "
                   "gating the paper reports." + _saturation_other_gates(runs)),
        TableItem("gate-position", "Gate score by position",
                  tables.gate_position_display(runs),
                  "Mean gate score over all positions, at position 0 (the first token) and at "
                  "positions ≥ 1. A gate that closes on later queries is how a head can skip "
                  "the first token without a sink."),
    ]
    if len(runs.gates_by_token_type):
        items.append(FigureItem("gate-token-types", "Mean gate score by token type",
                   partial(plots.plot_gate_by_token_type, runs),
                   "Mean gate score per gated layer (rows) and token type (columns), pooled over "
                   "heads with their element counts; one panel per gated model with "
                   "gates_by_token_type.csv, one colour scale over the range of all panels. Types: first (position "
                   "0), special (BOS/EOS elsewhere), whitespace, digits, punctuation, "
                   "word_start (letters after a space or word marker), word_piece (letters "
                   "continuing a word), other; then user token groups (--token-groups), which "
                   "count every position they match. Types that never occur are left out; grey "
                   "cells have no gate values."))
    token_types = tables.gate_token_type_display(runs)
    if len(token_types):
        items.append(TableItem(
            "gate-token-type-table", "Gate score by token type, all gated layers",
            token_types,
            "Mean gate score per token type over all gated layers and heads (weighted by "
            "element counts), and under it how many positions of that type the data had. A "
            "gate that closes on one type (e.g. the first token or punctuation) and opens on "
            "others is input-dependent, which a constant scale cannot be."))
    return Section(
        id="gates", title="Gate scores",
        intro=("The gate multiplies each head's attention output by sigmoid(x W_g) before the "
               "output projection; scores near 0 switch the head off for that token."
               + _other_gates(runs)),
        items=items,
        notes=(notes.no_gate_notes(runs) + notes.linear_layer_notes(runs, "the output gate")
               + notes.token_type_notes(runs)),
    )


def _other_gates_by_kind(runs: Runs) -> dict[str, list[str]]:
    """{"2 * sigmoid, scores in (0, 2)": [models]} for the gated runs whose gate is not the
    paper's sigmoid (meta.json gate.activation)."""
    kinds: dict[str, list[str]] = {}
    for model in runs.gated_models:
        if (kind := other_gate(runs, model)) is not None:
            kinds.setdefault(kind, []).append(model)
    return kinds


def _sigmoid_word(runs: Runs) -> str:
    """"sigmoid " where every gated run has the paper's sigmoid gate, else "" (the caption then
    names the other gates)."""
    return "" if _other_gates_by_kind(runs) else "sigmoid "


def _other_gates(runs: Runs) -> str:
    """" X's gate is 2 * sigmoid, scores in (0, 2)." for gates other than the paper's sigmoid."""
    return "".join(f" {join_names(models)}'s gate{'s are' if len(models) > 1 else ' is'} {kind}."
                   for kind, models in _other_gates_by_kind(runs).items())


def _saturation_other_gates(runs: Runs) -> str:
    """The thresholds are multipliers on the head's output, whatever the gate: said where a gate
    reaches past 1, whose scores from 0.99 up all count as above 0.99."""
    kinds = _other_gates_by_kind(runs)
    if not kinds:
        return ""
    models = [model for names in kinds.values() for model in names]
    return (f"{_other_gates(runs)} The thresholds are the same multipliers of the head's output for "
            f"{'these gates' if len(models) > 1 else 'this gate'}: a score of 1 passes the output "
            f"unchanged, and every score above {max(_ABOVE.values()):g}, those that amplify it "
            "included, counts as above it.")


# The saturation thresholds gates.csv saves as a share above (frac_gt_*).
_ABOVE = {m: t for m, t in SATURATION_THRESHOLDS.items() if m.startswith("frac_gt")}


def _listed(thresholds: dict[str, float]) -> str:
    """0.01, 0.1 and 0.5"""
    values = [f"{t:g}" for t in thresholds.values()]
    return ", ".join(values[:-1]) + " and " + values[-1] if len(values) > 1 else "".join(values)


def gate_bins(runs: Runs) -> str:
    """The bins of the gate score histograms, as gate_hist.csv saved them: "50 equal bins on
    [0, 1]" (each model's bins, when they differ)."""
    hist = runs.gate_hist
    described = {}
    for model in runs.gated_models:
        rows = hist[hist["model"] == model]
        edges = sorted(set(zip(rows["bin_lo"].astype(float), rows["bin_hi"].astype(float))))
        if not edges:
            continue
        widths = [hi - lo for lo, hi in edges]
        # The edges are float32 (torch.linspace): 2 / 50 steps round ~1e-7 apart near 2.
        equal = max(widths) - min(widths) <= 1e-4 * max(widths)
        described[model] = (f"{len(edges)}{' equal' if equal else ''} bins on "
                            f"[{edges[0][0]:.3g}, {edges[-1][1]:.3g}]")
    if len(set(described.values())) == 1:
        return next(iter(described.values()))
    if not described:
        return "no gate_hist.csv"
    return "; ".join(f"{model}: {text}" for model, text in described.items())


def _sparsity_scales(runs: Runs) -> str:
    """Whether the rows of the per-layer sparsity figure compare by bar height (one y scale per
    column) or only by their ticks (a scale per panel), for more than one model."""
    if len(runs.models) < 2:
        return ""
    if sparsity_scales_shared(runs):
        return "The panels of a column share one y scale. "
    return (f"Each panel has its own y scale (the models' largest shares differ more than "
            f"{SHARED_SCALE_RATIO:g}-fold): compare models by the tick labels, not the bar heights. ")


def _error_bars(runs: Runs) -> str:
    """The sentence on the bars' whiskers, when any run has per-layer sparsity intervals."""
    if not any(entry.get("sparsity_lo") for m in runs.models for entry in runs.summary[m].get("layers") or []):
        return ""
    exact = any(runs.meta[m].get("sparsity_control") == "second pass" for m in runs.models)
    return ("Whiskers: 95% bootstrap intervals over sequences"
            + (" (the control's only with --exact-control, its scale held at the run's mean gate). "
               if not exact else " (the exact control's with its scale held at the run's mean gate). "))


def sparsity(runs: Runs) -> Section:
    if runs.sparsity.empty:
        return left_out("sparsity", "Sparsity of the attention output",
                        "no run has a sparsity table (sparsity.csv)")
    thresholds = " and ".join(f"{t:g}" for t in HEADLINE_THRESHOLDS)
    if runs.gated_models:
        variants = ("the ungated output O, the uniform control O × (the layer's mean gate score), "
                    "and the dynamically gated O ⊙ g that o_proj receives. If the dynamic gate is "
                    "sparser than the control, sparsity comes from where the gate closes, not from "
                    "scaling. ")
        panels = "one panel per variant"
    else:       # only O is drawn: the control and the gated output need a gate
        variants = ("the attention output O (no run has a gate, so there is no mean-gate control "
                    "and no gated output to draw beside it). ")
        panels = "the ungated output O"
    by_layer = FigureItem(
        "sparsity-by-layer", "Sparsity per layer",
        partial(plots.plot_sparsity_by_layer, runs),
        f"Share of attention-output elements with |x| below {thresholds}, per layer: {variants}"
        f"{_sparsity_scales(runs)}{_error_bars(runs)}{figure5_caption()}")
    sweep = FigureItem(
        "sparsity-sweep", "Sparsity over the threshold sweep",
        partial(plots.plot_sparsity_sweep, runs),
        "Share of attention-output elements with |x| < τ over the saved threshold sweep (log "
        f"x), averaged over layers; {panels}, one line per model.")
    return Section(
        id="sparsity", title="Sparsity of the attention output",
        intro="How much of what the attention passes on is (near) zero, with and without gate.",
        items=[by_layer, sweep],
        notes=notes.sparsity_notes(runs),
    )
