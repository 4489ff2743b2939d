"""The report's sections on attention: first-token attention (F-Attn), attention patterns of the
display prompt, massive activations (M-Act)."""

from __future__ import annotations

from functools import partial

from probe.reports.sections import notes
from probe.reports import plots, tables
from probe.reports.tables.frames import bucket_label, pattern_layers
from probe.reports.sections.items import FigureItem, Section, TableItem, axes_level, left_out
from probe.reports.plots.attention_patterns import choose_pattern_layers
from probe.reports.runs import Runs
from probe.reports.labels import LINEAR_ATTENTION
from probe.reports.text import visible_token


def has_linear_attention(runs: Runs) -> bool:
    """Whether any model has linear-attention layers (drawn hatched in the layer x head maps)."""
    return any(runs.layers_of_type(model, LINEAR_ATTENTION) for model in runs.models)


def first_token(runs: Runs) -> Section:
    heatmap = FigureItem(
        "f-attn-heatmap", "F-Attn per layer and head",
        partial(plots.plot_first_token_heatmap, runs),
        "Attention probability on the first token (key 0), averaged over sequences and over "
        "query positions t ≥ 1, for every layer (rows) and head (columns); one panel per "
        "model, one colour scale shared by all panels."
        + (" Hatched rows are linear-attention layers, where F-Attn does not apply."
           if has_linear_attention(runs) else ""))
    by_layer = FigureItem(
        "f-attn-by-layer", "F-Attn per layer",
        axes_level(partial(plots.plot_first_token_by_layer, runs)),
        "Head-mean F-Attn per attention layer (attention probability on the first token, "
        "averaged over query positions t ≥ 1 and heads), one line per model. Dashed: the "
        "uniform reference mean_t 1/(t+1), the first-token weight if every query attended "
        "evenly to all keys it can see; one grey line where all models read the same "
        "queries, else one per model in its colour. A sink shows as F-Attn far above it. "
        "Linear-attention layers have no point." + band_caption(runs, "95% interval over sequences (pooled queries)"))
    by_bucket = FigureItem(
        "f-attn-by-position", "F-Attn by query position",
        axes_level(partial(plots.plot_first_token_by_bucket, runs)), bucket_caption(runs))
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


def bucket_caption(runs: Runs) -> str:
    """What the F-Attn-by-position figure pools, from the buckets the runs saved."""
    edges = sorted(set(zip(runs.first_token_buckets["bucket_lo"],
                           runs.first_token_buckets["bucket_hi"])))
    powers = all(hi == 2 * lo or (hi == float("inf") and lo >= 1 << 20) for lo, hi in edges)
    # The last query position: meta.json's longest_sequence, not the last bucket's edge (a
    # 306-token text fills the bucket [256, 512) only up to t = 305).
    longest = [int(runs.meta[m]["longest_sequence"]) for m in runs.models
               if runs.meta[m].get("longest_sequence")]
    if longest:
        last = (f"up to t = {max(longest) - 1}, the last position of the longest sequence "
                f"analysed ({max(longest)} tokens)")
    else:
        last = ("below " + (f"{int(edges[-1][1])}" if edges and edges[-1][1] != float("inf")
                            else "any bound"))
    if powers and edges:
        pooled = (f"each point pools the query positions t with 2^k ≤ t < 2^(k+1) ({len(edges)} "
                  f"buckets, from t = 1 {last}), drawn at its first position on a log2 axis")
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


def attention_patterns(runs: Runs) -> Section:
    if not any(pattern_layers(runs, model) for model in runs.models):
        return left_out("attention-patterns", "Attention patterns",
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
               "tokens; a dark first column is a sink. Colour: square root of the weight, "
               "0 to 1, shared by all panels. Grey cells above the diagonal are masked by "
               "causality. ␣ marks a space, ↵ a newline.")
    if len(prompts) == 1:
        caption += f" Prompt tokens: {next(iter(prompts))}"
    elif prompts:
        caption += " Prompt tokens: " + "; ".join(f"{', '.join(models)}: {text}"
                                                   for text, models in prompts.items())
    figure = FigureItem("display-prompt-patterns", "Attention patterns of the display prompt",
                        partial(plots.plot_attention_patterns, runs),
                        caption, shrinkable=False)
    return Section(
        id="attention-patterns", title="Attention patterns",
        intro="What the heads attend to on one short prompt, one panel per model side by side.",
        items=[figure],
        notes=notes.pattern_notes(runs) + notes.linear_layer_notes(runs, "an attention pattern"),
    )


def band_caption(runs: Runs, what: str) -> str:
    """The caption's sentence on the shaded bands, when some run has intervals."""
    if any(not runs.rows("per_sequence", m).empty for m in runs.models):
        return f" Shaded: {what}."
    return ""


def massive(runs: Runs) -> Section:
    figure = FigureItem(
        "m-act-by-site", "M-Act per layer at four sites",
        partial(plots.plot_massive_activations, runs),
        "Largest |activation| over all tokens and hidden dimensions per layer (solid, log "
        "scale) at four points of each decoder layer: the attention branch output (after "
        "o_proj), the residual stream after attention, the MLP output and the layer output. "
        "Dotted: median |activation| of the same tensor (from a log-spaced histogram), for the "
        "typical scale. Every layer type has M-Act, linear-attention layers included."
        + band_caption(runs, "bootstrap interval of the maximum over sequences, biased low: it cannot "
                             "rise above the largest value seen"))
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
