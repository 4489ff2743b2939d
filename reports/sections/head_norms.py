"""The report's section on what the gate does to the size of each head's contribution: per-head
attention-output norms before and after the gate (head_norms.csv, probe/metrics/head_norms/).

Found by reports.sections (SECTION, AFTER): one figure, the layer x head heatmap of post / pre
per gated model, and one table, the ratio by token type. A model without a gate has post / pre = 1
by construction (nothing between the head's output and o_proj), so its panel and rows would be a
page of 1s: it is named in a note instead, and a report of ungated models leaves the section out
with one line, as the gate-score section does.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure, SubFigure

from probe.reports.tables.frames import layer_head_matrix
from probe.reports.sections.attention import has_linear_attention
from probe.reports.sections.items import FigureItem, Section, TableItem, left_out, needing
from probe.reports.plots._layout import figure_or_new, model_heatmaps
from probe.reports.runs import Runs, load_runs
from probe.reports.style import styled
from probe.reports.text import plain

AFTER = "gates"          # placed after the gate-score section
ALL = "all"              # the rows over every token (probe.metrics.head_norms.ALL)


def _models(runs: Runs) -> list[str]:
    """The gated models with head_norms.csv, or, where none has a gate, every model with it."""
    found = set(runs.head_norms["model"])
    models = [model for model in runs.models if model in found]
    return [model for model in models if runs.is_gated(model)] or models


def _ungated(runs: Runs) -> list[str]:
    """The models with head_norms.csv but no gate: post / pre is 1 for every head and token."""
    found = set(runs.head_norms["model"])
    return [model for model in runs.ungated_models if model in found]


def ratio_matrix(runs: Runs, model: str) -> np.ndarray:
    """(layers, heads) post / pre of the mean norms over every token; NaN where a layer has none
    (linear attention)."""
    rows = runs.rows("head_norms", model)
    rows = rows[rows["token_type"] == ALL].rename(columns={"ratio_of_means": "value"})
    return layer_head_matrix(rows, runs.num_layers(model), runs.num_heads(model))


@styled
def plot_head_norm_ratio(runs: Any, *, fig: Figure | SubFigure | None = None,
                         cmap: str = "magma") -> Figure | SubFigure:
    """Layer x head ratio of the mean attention-output norm after the gate to the one before it
    (post / pre), one panel per model, on one colour scale."""
    runs = load_runs(runs)
    models = _models(runs)
    fig = figure_or_new(fig, 1.2 + 2.4 * max(len(models), 1), 3.9)
    matrices = [ratio_matrix(runs, model) for model in models]
    # Up to the largest ratio, at least 1; a map with no finite ratio (a NaN model) adds none.
    top = max([1.0, *(float(np.nanmax(m)) for m in matrices if np.isfinite(m).any())])
    model_heatmaps(fig, runs, models, matrices, cmap=cmap, vmax=top,
                   label="post / pre (mean norms)", notes=[None] * len(models))
    return fig


def by_token_type(runs: Runs) -> pd.DataFrame:
    """Per model and token type, over every attention layer and head: the mean norms before and
    after the gate (token-weighted), their ratio, and the mean of the per-token ratio."""
    rows = runs.head_norms[runs.head_norms["model"].isin(_models(runs))].copy()
    rows["pre_sum"], rows["post_sum"] = rows["pre"] * rows["tokens"], rows["post"] * rows["tokens"]
    rows["ratio_sum"] = rows["mean_ratio"] * rows["tokens"]
    out = []
    for (model, token_type), group in rows.groupby(["model", "token_type"], sort=False):
        n = group["tokens"].sum()
        if not n:
            continue
        pre, post = group["pre_sum"].sum() / n, group["post_sum"].sum() / n
        out.append({"model": plain(model), "token type": token_type, "tokens": f"{int(group['tokens'].max())}",
                    "pre": f"{pre:.4g}", "post": f"{post:.4g}", "post / pre": f"{post / pre:.3f}",
                    "mean of ratios": f"{group['ratio_sum'].sum() / n:.3f}"})
    return pd.DataFrame(out).set_index("model") if out else pd.DataFrame()


@needing("head_norms", id="head-norms", title="Head output size before and after the gate")
def head_norms(runs: Runs) -> Section:
    if not runs.gated_models:
        return left_out("head-norms", "Head output size before and after the gate",
                        "no model in this report has an output gate: every head's output reaches "
                        "o_proj unchanged, post / pre = 1")
    if not any(runs.is_gated(model) for model in _models(runs)):
        return left_out("head-norms", "Head output size before and after the gate",
                        "no gated run has head_norms.csv: the runs were written before probe "
                        "measured it; analyse them again")
    models = _models(runs)
    return Section(
        id="head-norms", title="Head output size before and after the gate",
        intro=("How much of each head's attention output the gate lets through: the norm of the "
               "head's output before the gate (||O[t, h]||) and after it (||(g ⊙ O)[t, h]||, what "
               "o_proj receives). A ratio of 1 means the gate leaves the head's contribution its "
               "size (every ungated model); a small one means the gate mutes the head there."),
        items=[
            FigureItem("head-norm-ratio", "Post-gate over pre-gate output norm per head",
                       partial(plot_head_norm_ratio, runs),
                       "Per layer (rows) and head (columns): the mean over every analysed token of "
                       "the head's output norm after the gate, over the mean before it "
                       "(head_norms.csv ratio_of_means, token type all); one panel per gated model ("
                       + ", ".join(plain(m) for m in models) + ")."
                       + (" Hatched rows: linear-attention layers, which have no softmax head output."
                          if has_linear_attention(runs) else "")),
            TableItem("head-norms-by-token-type", "Head output norms by token type", by_token_type(runs),
                      "Per model and token type, pooled over attention layers and heads: the mean "
                      "output norm before (pre) and after (post) the gate, their ratio, and the mean "
                      "of the per-token ratio post / pre (tokens whose head output is zero left out). "
                      "Tokens: positions of that type (a position may have several types)."),
        ],
        notes=[f"{plain(model)} has no output gate: its post / pre is 1 for every head and token "
               "type, so it has no panel or rows here." for model in _ungated(runs)],
    )


SECTION = head_norms
