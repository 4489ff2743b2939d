"""What the report says, independent of its format: sections of figures, tables and notes.

HTML and PDF both render this list, so the two formats cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import pandas as pd
from matplotlib.figure import Figure

from reports import claims, notes, plots, tables
from reports.frames import bucket_label, interventions_by_layer, pattern_layers
from reports.plots.attention_patterns import choose_pattern_layers
from reports.plots.gates import histogram_layers
from reports.reference import figure5_caption, table4_caption
from reports.runs import Runs
from reports.schema import ATTENTION, HEADLINE_THRESHOLDS, LINEAR_ATTENTION
from reports.text import join_layers, visible_token

# Makes a new figure of the plot's own size; each format saves (or resizes) it as it needs.
Draw = Callable[[], Figure]


@dataclass(frozen=True)
class FigureItem:
    id: str
    title: str
    draw: Draw
    caption: str
    number: int = 0  # set by build_sections: "Figure 3" in HTML, PDF and --figures alike

    @property
    def label(self) -> str:
        return f"Figure {self.number}"


@dataclass(frozen=True)
class TableItem:
    id: str
    title: str
    frame: pd.DataFrame  # display strings; the index is the first column
    caption: str
    index_label: str = "model"
    free_text: bool = False  # long strings (paths, command lines) rather than numbers
    number: int = 0

    @property
    def label(self) -> str:
        return f"Table {self.number}"


Item = FigureItem | TableItem


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    intro: str
    items: list[Item]
    notes: list[str] = field(default_factory=list)
    # Why a section with nothing to show is left out; it then has no items and the contents
    # carry this one line instead of a page of empty boxes.
    omitted: str | None = None


PROVENANCE = "provenance"  # the section that also carries the report's own timestamp


def build_sections(runs: Runs) -> list[Section]:
    """Every section, in order; those with nothing to show carry `omitted` (the reason) and
    no items. Figures and tables are numbered in reading order over the shown sections."""
    return _numbered([
        _claims(runs),
        _summary(runs),
        _first_token(runs),
        _attention_patterns(runs),
        _massive(runs),
        _gates(runs),
        _sparsity(runs),
        _interventions(runs),
        _training(runs),
        _inference(runs),
        _provenance(runs),
    ])


def shown(sections: list[Section]) -> list[Section]:
    return [section for section in sections if section.omitted is None]


def left_out_line(section: Section) -> str:
    """The contents' one line for a section left out."""
    return f"Not in this report: {section.title} ({section.omitted})."


def _numbered(sections: list[Section]) -> list[Section]:
    counts = {FigureItem: 0, TableItem: 0}
    result = []
    for section in sections:
        items = []
        for item in section.items:
            counts[type(item)] += 1
            items.append(replace(item, number=counts[type(item)]))
        result.append(replace(section, items=items))
    return result


def _left_out(section_id: str, title: str, reason: str) -> Section:
    return Section(id=section_id, title=title, intro="", items=[], omitted=reason)


def _axes(plot: Callable[[], Figure]) -> Draw:
    """An axes-level plot as a figure maker (plot functions return the figure)."""
    return plot


def _claims(runs: Runs) -> Section:
    # First, so a reader sees the verdicts before the figures; the rules sit in the caption.
    return Section(
        id="claims", title="Claims of the paper",
        intro=("Does each headline claim of the paper hold in these runs, in the direction the "
               "paper reports? One row per claim and gated model, with the numbers and the rule "
               "behind each verdict. Small or briefly trained models are not expected to reach "
               "the paper's values, only to move the same way."),
        items=[TableItem("claims-table", "Claims of the paper", claims.claims_display(runs),
                         claims.claims_caption(), index_label="claim")],
    )


def _summary(runs: Runs) -> Section:
    caption = ("Mean gate: mean sigmoid gate score over all gated layers, heads, positions (and "
               "dimensions for elementwise gates). M-Act: mean over layers of the largest "
               "|layer output|. F-Attn (t ≥ 1): attention probability on the first token, "
               "averaged over heads per layer, then over attention layers, for query positions "
               "t ≥ 1; paper-style also counts t = 0, where it is 1 by causality; uniform: "
               "mean_t 1/(t+1), the value without any preference. Sink rate: share of (layer, "
               f"head) with F-Attn > {_sink_epsilon(runs):g}. Loss / perplexity: held-out "
               "next-token loss. "
               f"n/a: does not apply or was not measured. {table4_caption()}")
    return Section(
        id="summary", title="Summary",
        intro=("One row per model. The questions: does the gate lower the attention on the "
               "first token (F-Attn) and the largest activations (M-Act), and at what loss?"),
        items=[TableItem("summary-table", "Model summary (paper Table 4 style)",
                         tables.summary_display(runs), caption)],
        notes=(notes.nonfinite_notes(runs) + notes.no_gate_notes(runs)
               + notes.token_stream_notes(runs) + notes.depth_notes(runs)),
    )


def _sink_epsilon(runs: Runs) -> float:
    """The F-Attn threshold of the sink rate (Gu et al. 2024 use 0.3), as the runs saved it."""
    saved = {runs.summary[model].get("sink_epsilon") for model in runs.models} - {None}
    return float(saved.pop()) if len(saved) == 1 else 0.3


def _has_linear_attention(runs: Runs) -> bool:
    """Whether any model has linear-attention layers (drawn hatched in the layer x head maps)."""
    return any(runs.layers_of_type(model, LINEAR_ATTENTION) for model in runs.models)


def _first_token(runs: Runs) -> Section:
    heatmap = FigureItem(
        "f-attn-heatmap", "F-Attn per layer and head",
        partial(plots.plot_first_token_heatmap, runs),
        "Attention probability on the first token (key 0), averaged over sequences and over "
        "query positions t ≥ 1, for every layer (rows) and head (columns); one panel per "
        "model, one colour scale shared by all panels."
        + (" Hatched rows are linear-attention layers, where F-Attn does not apply."
           if _has_linear_attention(runs) else ""))
    by_layer = FigureItem(
        "f-attn-by-layer", "F-Attn per layer",
        _axes(partial(plots.plot_first_token_by_layer, runs)),
        "Head-mean F-Attn per attention layer (attention probability on the first token, "
        "averaged over query positions t ≥ 1 and heads), one line per model. Dashed: the "
        "uniform reference mean_t 1/(t+1), the first-token weight if every query attended "
        "evenly to all keys it can see; one grey line where all models read the same "
        "queries, else one per model in its colour. A sink shows as F-Attn far above it. "
        "Linear-attention layers have no point.")
    by_bucket = FigureItem(
        "f-attn-by-position", "F-Attn by query position",
        _axes(partial(plots.plot_first_token_by_bucket, runs)), _bucket_caption(runs))
    return Section(
        id="first-token", title="Attention on the first token (F-Attn)",
        intro=("Attention sinks: heads that park their attention on the first token. The paper "
               "finds that an output gate removes them because the gate, not the softmax, can "
               "now switch a head off."),
        items=[heatmap, by_layer, *([by_bucket] if len(runs.first_token_buckets) else [])],
        notes=(notes.linear_layer_notes(runs, "F-Attn") + notes.depth_notes(runs)
               + notes.missing_table_notes(runs, "first_token_buckets",
                                           "F-Attn by query position")),
    )


def _bucket_caption(runs: Runs) -> str:
    """What the F-Attn-by-position figure pools, from the buckets the runs saved."""
    edges = sorted(set(zip(runs.first_token_buckets["bucket_lo"],
                           runs.first_token_buckets["bucket_hi"])))
    powers = all(hi == 2 * lo or (hi == float("inf") and lo >= 1 << 20) for lo, hi in edges)
    if powers and edges:
        pooled = (f"each point pools the query positions t with 2^k ≤ t < 2^(k+1) ({len(edges)} "
                  f"buckets, from t = 1 up to the longest sequence analysed, "
                  f"{int(edges[-1][1]) - 1 if edges[-1][1] != float('inf') else 'and beyond'}), "
                  "drawn at its first position on a log2 axis")
    else:
        pooled = ("each point pools the query positions of one bucket ("
                  + ", ".join(bucket_label(lo, hi) for lo, hi in edges)
                  + "), drawn at its first position on a log2 axis")
    # The figure's title already says "F-Attn by query position"; the caption goes on from it.
    return (pooled[0].upper() + pooled[1:] + "; per bucket the attention probability "
            "on the first token, averaged over the bucket's queries and over heads per "
            "attention layer, then over layers; one solid line per model. Dashed: the "
            "uniform reference, mean 1/(t+1) over the same queries (grey where all models "
            "share it), which falls with distance. A sink keeps F-Attn high however far the "
            "query is from the first token.")


def _attention_patterns(runs: Runs) -> Section:
    if not any(pattern_layers(runs, model) for model in runs.models):
        return _left_out("attention-patterns", "Attention patterns",
                         "no run saved attention patterns of a display prompt "
                         "(attention_patterns.csv)")
    prompts: dict[str, list[str]] = {}  # prompt text -> models that used it
    for model in runs.models:
        tokens = runs.meta[model].get("display_tokens")
        if tokens:
            text = " ".join(visible_token(token, 24) for token in tokens)
            prompts.setdefault(text, []).append(model)
    shown = "; ".join(f"{model}: layer{'s' if len(layers) > 1 else ''} "
                      f"{', '.join(map(str, layers))}"
                      for model in runs.models
                      if (layers := choose_pattern_layers(runs, model)))
    caption = ("Softmax attention of a short display prompt, averaged over heads, one panel "
               "per model at its layer with the most weight on the first key (mean over "
               "queries t ≥ 1, among the attention layers with a saved pattern)"
               f"{' (' + shown + ')' if shown else ''}. Rows are query tokens, columns key "
               "tokens; a bright first column is a sink. Colour: square root of the weight, "
               "0 to 1, shared by all panels. Grey cells above the diagonal are masked by "
               "causality. ␣ marks a space, ↵ a newline.")
    if len(prompts) == 1:
        caption += f" Prompt tokens: {next(iter(prompts))}"
    elif prompts:
        caption += " Prompt tokens: " + "; ".join(f"{', '.join(models)}: {text}"
                                                   for text, models in prompts.items())
    figure = FigureItem("attention-patterns-figure", "Attention patterns of the display prompt",
                        partial(plots.plot_attention_patterns, runs),
                        caption)
    return Section(
        id="attention-patterns", title="Attention patterns",
        intro="What the heads attend to on one short prompt, one panel per model side by side.",
        items=[figure],
        notes=notes.pattern_notes(runs) + notes.linear_layer_notes(runs, "an attention pattern"),
    )


def _massive(runs: Runs) -> Section:
    figure = FigureItem(
        "m-act-figure", "M-Act per layer at four sites",
        partial(plots.plot_massive_activations, runs),
        "Largest |activation| over all tokens and hidden dimensions per layer (solid, log "
        "scale) at four points of each decoder layer: the attention branch output (after "
        "o_proj), the residual stream after attention, the MLP output and the layer output. "
        "Dotted: median |activation| of the same tensor (from a log-spaced histogram), for the "
        "typical scale. Every layer type has M-Act, linear-attention layers included.")
    top = TableItem(
        "m-act-top", "Largest activations",
        tables.massive_top_display(runs),
        "The largest |activation| values of each model over all layers and sites, grouped by "
        "layer, site, position in the sequence and hidden dimension: value is the largest "
        "there (signed), count how many of the values saved in massive_top.csv (the largest "
        "few per layer and site, over all sequences) fall on that place, token the token of "
        "the largest. Massive activations concentrate on few dimensions and often on the "
        "first token, which then recurs with a high count.")
    return Section(
        id="massive-activations", title="Massive activations (M-Act)",
        intro=("Massive activations are a few hidden-state values orders of magnitude above the "
               "rest; in the paper they go together with attention sinks and shrink with the "
               "gate."),
        items=[figure, *([top] if len(runs.massive_top) else [])],
        notes=notes.depth_notes(runs),
    )


def _gates(runs: Runs) -> Section:
    if not runs.gated_models:
        return _left_out("gates", "Gate scores", "no model in this report has an output gate")
    items: list[Item] = [
        FigureItem("gate-histograms", "Gate score distributions per layer",
                   partial(plots.plot_gate_histograms, runs),
                   "Histogram of sigmoid gate scores (50 equal bins on [0, 1]) per gated layer "
                   f"(layers {join_layers(histogram_layers(runs))}), summed over heads and "
                   "shown as the share of all scores of that layer; log y scale. Mass near 0 "
                   "means the gate mostly closes, which is what makes the gated output sparse."),
        FigureItem("gate-stats", "Gate score statistics per layer",
                   _axes(partial(plots.plot_gate_stats_by_layer, runs)),
                   "Mean gate score per layer (line) with ±1 standard deviation (band) and the "
                   "minimum and maximum (thin dashed), pooled over heads with their element "
                   "counts."),
        FigureItem("gate-heatmap", "Mean gate score per layer and head",
                   partial(plots.plot_gate_heatmap, runs),
                   "Mean gate score for every layer (rows) and head (columns) of each gated "
                   "model, one colour scale for all panels."
                   + (" Hatched rows are layers without an output gate on softmax attention "
                      "(linear attention)." if _has_linear_attention(runs) else "")),
        FigureItem("gate-saturation", "Gate saturation",
                   _axes(partial(plots.plot_gate_saturation, runs)),
                   "Cumulative share of gate scores below x at x = 0.01, 0.1, 0.5, 0.9 and "
                   "0.99 (logit x axis; below 0.9 and 0.99 as 1 − the share above), pooled "
                   "over layers and heads with their element counts, one line per model. A "
                   "line that rises early (many scores near 0) and reaches 1 before 0.9 (few "
                   "near 1) is the sparse gating the paper reports."),
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
               "output projection; scores near 0 switch the head off for that token."),
        items=items,
        notes=(notes.no_gate_notes(runs) + notes.linear_layer_notes(runs, "the output gate")
               + notes.token_type_notes(runs)),
    )


def _sparsity(runs: Runs) -> Section:
    if runs.sparsity.empty:
        return _left_out("sparsity", "Sparsity of the attention output",
                         "no run has a sparsity table (sparsity.csv)")
    thresholds = " and ".join(f"{t:g}" for t in HEADLINE_THRESHOLDS)
    by_layer = FigureItem(
        "sparsity-by-layer", "Sparsity per layer",
        partial(plots.plot_sparsity_by_layer, runs),
        f"Share of attention-output elements with |x| below {thresholds}, per layer: the "
        "ungated output O, the uniform control O × (the layer's mean gate score), and the "
        "dynamically gated O ⊙ g that o_proj receives. If the dynamic gate is sparser than the "
        f"control, sparsity comes from where the gate closes, not from scaling. "
        f"{figure5_caption()}")
    sweep = FigureItem(
        "sparsity-sweep", "Sparsity over the threshold sweep",
        partial(plots.plot_sparsity_sweep, runs),
        "Share of attention-output elements with |x| < τ over the saved threshold sweep (log "
        "x), averaged over layers; one panel per variant, one line per model.")
    return Section(
        id="sparsity", title="Sparsity of the attention output",
        intro="How much of what the attention passes on is (near) zero, with and without gate.",
        items=[by_layer, sweep],
        notes=notes.sparsity_notes(runs),
    )


def _training(runs: Runs) -> Section:
    if runs.training.empty:
        return _left_out("training", "Training", "no run has a training log (training.csv): "
                         "these runs were analysed, not trained by probe")
    figure = FigureItem(
        "training-curves", "Training curves",
        partial(plots.plot_training, runs),
        "Left: training loss per step, right: gradient norm, per model (training.csv): faint, "
        "the raw value of every logged step; solid, its centred moving average over 2% of "
        "the logged steps. Dashed with black-edged markers, drawn on top: the held-out loss "
        "at the steps where it was evaluated."
        + (" Black crosses mark steps flagged as loss spikes in training.csv."
           if bool(runs.training["spike"].astype(bool).any()) else " No step was flagged as a loss spike."))
    return Section(
        id="training", title="Training",
        intro=("The training log of each run (probe train records loss and gradient norm per "
               "step); the paper finds that the gate damps loss spikes."),
        items=[figure],
        notes=notes.training_notes(runs),
    )


def _interventions(runs: Runs) -> Section:
    if runs.interventions.empty:
        return _left_out("interventions", "Interventions",
                         "no run has intervention results (probe analyze --interventions)")
    explained = ("gate → layer mean: every gate score replaced by its layer's mean gate over the "
                 "same data, the input-independent scaling control run through the model; "
                 "gate = 1: gates forced open (the model without its gate); gate = 0: gates "
                 "forced shut (the attention branch removed, residual stream and MLP kept); "
                 "massive activations → 0: layer-output elements with |h| ≥ max(100, 1000 × "
                 "the layer's median |h|) set to 0.")
    items: list[Item] = [FigureItem(
        "interventions-figure", "Loss change under interventions, all layers",
        _axes(partial(plots.plot_interventions, runs)),
        "Held-out next-token loss with the intervention applied to every layer at once, minus "
        f"the unmodified model's loss, one bar per model. {explained} Baselines have only the "
        "massive-activation intervention. A small Δ for gate → layer mean would mean the gate "
        "acts as a constant scale; a large one, that the model relies on where it closes.")]
    table = tables.interventions_display(runs)
    if len(table):
        items.append(TableItem(
            "interventions-table", "Loss under interventions",
            table,
            "Loss of the unmodified model on the analysis data and Δ loss (intervened − "
            "unmodified) of each intervention applied to all layers at once, and how many "
            "elements the massive-activation intervention set to 0 (0: the model has none "
            "above the threshold); n/a: does not apply (no gate) or not measured."))
    if len(interventions_by_layer(runs)):
        items.append(FigureItem(
            "interventions-by-layer", "Loss change per intervened layer",
            partial(plots.plot_interventions_by_layer, runs),
            "Δ loss when the intervention is applied to one layer only (x), per model; one "
            "panel per intervention. Shows which layers the loss depends on."))
    return Section(
        id="interventions", title="Interventions",
        intro=("Does the model need its dynamic gate, or would a constant do? Each intervention "
               "changes the gate or the massive activations and measures the held-out loss."),
        items=items,
        notes=notes.intervention_notes(runs),
    )


def _inference(runs: Runs) -> Section:
    if not (runs.inference["metric"] == "eval_loss").any():
        return _left_out("inference", "Held-out loss by input length",
                         "no run has held-out loss by input length (inference.csv, written "
                         "by examples/demo.py for trained checkpoints)")
    items: list[Item] = [FigureItem(
        "loss-by-length", "Held-out loss by input length",
        _axes(partial(plots.plot_loss_by_length, runs)),
        "Held-out next-token loss of rows of each length (log2 x), per trained model, from "
        "inference.csv. Dotted: the analysed sequence length (meta.json seq_len), which "
        "examples/demo.py sets to the training length; beyond the training length RoPE "
        "extrapolates; "
        "a model whose loss rises less there generalises better to long inputs.")]
    # Latency is left out: inference.csv holds one timing per arm (the best of a few rounds),
    # and for models this small two runs of examples/demo.py can flip the arms' order; a
    # table of such numbers would read as a finding. reports.inference_table(runs) has them.
    return Section(
        id="inference", title="Held-out loss by input length",
        intro=("For trained runs (examples/demo.py): how the loss holds up at and beyond the "
               "training length. Latency and memory (inference.csv) are not shown: single "
               "timings of models this small vary between runs by more than between arms; "
               "reports.inference_table(runs) returns them."),
        items=items,
        notes=notes.missing_table_notes(runs, "inference", "inference measurements"),
    )


def _provenance(runs: Runs) -> Section:
    table = TableItem(
        "provenance-table", "Provenance", tables.provenance_table(runs),
        "From each run's meta.json: the checkpoint and data analysed, token counts, what sits "
        "at position 0 (BOS policy), thresholds, package versions and the command line.",
        index_label="field", free_text=True)
    attention = {model: len(runs.layers_of_type(model, ATTENTION)) for model in runs.models}
    return Section(
        id=PROVENANCE, title="Provenance",
        intro=("Where the numbers come from. Models: "
               + ", ".join(f"{model} ({runs.num_layers(model)} layers, {attention[model]} with "
                           "softmax attention)" for model in runs.models) + "."),
        items=[table],
    )
