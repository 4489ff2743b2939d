"""The report's section "What the sink does": the loss under sink ablations (ablations.csv,
ablation_positions.csv; probe analyze --ablate, probe/run/ablations.py), gated and ungated
models side by side.

Found by reports.sections (SECTION, AFTER). One figure: Δloss against the target position for
each ablation, with its paired 95% band, a row per family of ablations and a panel per model
(one y scale per row), and a last column of F-Attn under each ablation next to the model's own.
One table: each ablation's Δloss, its interval, what it means and F-Attn. Where a gated and an
ungated run read the same token ids, a second table: the difference of their loss changes, with
a paired interval over the sequences (ablation_sequences.csv): does the gate make the model any
less dependent on its sink?
"""
from __future__ import annotations

import math
import textwrap
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure, SubFigure

from probe.intervals.bootstrap import LEVEL
from probe.reports.plots._layout import figure_or_new
from probe.reports.ablation_pairs import BETWEEN_RESAMPLES, between_models
from probe.reports.runs import Runs, load_runs
from probe.reports.sections.items import FigureItem, Section, TableItem, needing
from probe.reports.style import REFERENCE_COLOR, model_colors, styled
from probe.reports.text import plain

AFTER = "interventions"
# Δ loss spans more than this many nats (massive activations zeroed: ~15): a symlog y axis, linear
# within ±SYMLOG_LINEAR, so that effects of hundredths of a nat stay visible beside it.
SYMLOG_ABOVE = 3.0
SYMLOG_LINEAR = 0.05
TITLE = "What the sink does"


def _models(runs: Runs) -> list[str]:
    found = set(runs.ablations["model"])
    return [model for model in runs.models if model in found]


# The figure's rows: ablations that answer one question share a row, so a row holds a handful of
# lines in distinct colours and its own y scale (the massive activations zeroed cost ~15 nats,
# a window plus a sink hundredths: on one axis the second would be flat).
FAMILIES = (
    ("windows", lambda r: r.kind == "window" and not r.sinks),
    ("windows + sinks", lambda r: r.kind == "window" and bool(r.sinks)),
    ("key 0", lambda r: r.kind.startswith("key0")),
    ("first token", lambda r: r.kind.startswith("first")),
    ("massive", lambda r: r.kind.startswith("massive")),
)


def ablation_families(ablations: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """[(family, [ablation names in the run's order])] for the families these runs hold.
    ablations: ablations.csv rows (kind, sinks, ablation)."""
    rows = ablations.drop_duplicates("ablation")
    rows = rows.assign(sinks=rows["sinks"].fillna(0))
    out = []
    for family, member in FAMILIES:
        names = [r.ablation for r in rows.itertuples() if member(r)]
        if names:
            out.append((family, names))
    return out


@styled
def plot_sink_ablations(runs: Any, *, fig: Figure | SubFigure | None = None) -> Figure | SubFigure:
    """Δloss (ablated − unablated, same tokens) by target position: a row per family of
    ablations (windows without and with the first keys as sinks, key 0, the first token,
    massive activations), a panel per model in each row on the row's own y scale, the row's
    legend beside it; F-Attn under each ablation per model in the last column."""
    runs = load_runs(runs)
    models = _models(runs)
    positions = runs.ablation_positions
    ran = set(positions["ablation"])
    families = [(f, [n for n in names if n in ran]) for f, names in ablation_families(runs.ablations)]
    families = [(f, names) for f, names in families if names] or [("", [])]
    names = list(dict.fromkeys(runs.ablations["ablation"]))
    fig = figure_or_new(fig, 1.2 + 2.9 * len(models) + 2.6 + 3.4,
                        max(1.0 + 0.2 * (len(names) + 1), 0.6 + 2.1 * len(families)))
    grid = fig.add_gridspec(len(families), len(models) + 2, width_ratios=[2.9] * len(models) + [2.6, 3.4])
    palette = sns.color_palette("colorblind", 10)
    label = "Δ loss"
    for row, (family, members) in enumerate(families):
        axes = [fig.add_subplot(grid[row, col]) for col in range(len(models))]
        lows, highs = [], []
        for ax, model in zip(axes, models):
            mine = positions[positions["model"] == model]
            for i, name in enumerate(members):
                rows = mine[mine["ablation"] == name].sort_values("bucket_lo")
                if rows.empty:
                    continue
                x = np.sqrt(rows["bucket_lo"].to_numpy() * rows["bucket_hi"].to_numpy())   # bucket's geometric middle
                color = palette[i % len(palette)]
                ax.plot(x, rows["delta_loss"], marker="o", markersize=2.5, linewidth=1.1, color=color, label=name)
                if rows["delta_lo"].notna().any():
                    ax.fill_between(x, rows["delta_lo"], rows["delta_hi"], color=color, alpha=0.15, linewidth=0)
                lows.append(np.nanmin(rows[["delta_loss", "delta_lo"]].to_numpy()))
                highs.append(np.nanmax(rows[["delta_loss", "delta_hi"]].to_numpy()))
            ax.axhline(0.0, color=REFERENCE_COLOR, linewidth=0.8)
            ax.set_xscale("log", base=2)
            if row == len(families) - 1:
                ax.set_xlabel("target position")
            if row == 0:
                gated = "gated" if runs.is_gated(model) else "ungated"
                # long run names side by side: wrapped (at hyphens first), the gate on a line of its own
                ax.set_title(textwrap.fill(plain(model), 24) + f"\n({gated})", fontsize=9)
        text = f"{family}\n{label}" if family else label
        if lows:
            pad = 0.05 * (max(highs) - min(lows) or 1.0)
            for ax in axes:                 # one y scale per row: the models compare at a glance
                ax.set_ylim(min(lows) - pad, max(highs) + pad)
                if max(highs) - min(lows) > SYMLOG_ABOVE:   # one ablation of many nats must not flatten the rest
                    ax.set_yscale("symlog", linthresh=SYMLOG_LINEAR)
            if max(highs) - min(lows) > SYMLOG_ABOVE:
                text += ", symlog"               # linear within ±SYMLOG_LINEAR: the caption says so
        for ax in axes[1:]:
            ax.tick_params(labelleft=False)
        axes[0].set_ylabel(text, fontsize=8)
        found = {}                              # the row's ablations, once each
        for ax in axes:
            for handle, name in zip(*ax.get_legend_handles_labels()):
                found.setdefault(name, handle)
        side = fig.add_subplot(grid[row, len(models)])
        side.axis("off")
        if found:                               # beside the row: the lines are the same in each panel
            legend = side.legend(list(found.values()), [textwrap.fill(n, 20) for n in found], loc="center left",
                                 fontsize=6.5, frameon=False, borderaxespad=0, handlelength=1.5, labelspacing=0.3)
            # Out of the layout: else a legend taller than its row (a page-high figure in the PDF)
            # makes constrained layout squeeze every panel of the row to a strip.
            legend.set_in_layout(False)
    _f_attn_panel(fig.add_subplot(grid[:, -1]), runs, models, names)
    return fig


def _f_attn_panel(ax, runs: Runs, models: list[str], names: list[str]) -> None:
    colors = model_colors(runs.models)
    width = 0.8 / max(len(models), 1)
    rows_all = runs.ablations[runs.ablations["model"].isin(models)]
    names = [n for n in names if rows_all.loc[rows_all["ablation"] == n, "f_attn"].notna().any()]   # those that ran
    labels = ["none", *names]
    for i, model in enumerate(models):
        rows = rows_all[rows_all["model"] == model].set_index("ablation")
        values = [float(rows["base_f_attn"].iloc[0])] + [float(rows["f_attn"].get(n, math.nan)) for n in names]
        ax.barh(np.arange(len(labels)) + (i - (len(models) - 1) / 2) * width, values, width * 0.9,
                color=colors[model], label=plain(model))
    ax.set_yticks(range(len(labels)), labels=labels, fontsize=6.5)
    ax.invert_yaxis()
    ax.set_xlabel("F-Attn under the ablation")
    ax.set_title("F-Attn under each ablation", fontsize=9)
    if len(models) > 1:
        # below the panel: inside, it covers the bars of the last ablations
        ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, 0), borderaxespad=4.5, ncol=1)


def ablation_display(runs: Runs) -> pd.DataFrame:
    rows = []
    for r in runs.ablations.itertuples():
        ok = math.isfinite(r.delta_loss)
        interval = f"[{r.delta_lo:+.4f}, {r.delta_hi:+.4f}]" if ok and math.isfinite(r.delta_lo) else "–"
        rows.append({"model": plain(r.model), "ablation": r.ablation,
                     "Δ loss": f"{r.delta_loss:+.4f}" if ok else "–", "95% interval": interval,
                     "effect": r.effect if ok else r.note,
                     "F-Attn": f"{r.f_attn:.3f} (was {r.base_f_attn:.3f})" if ok else "–",
                     "top keys": (f"{r.top_keys} (was {r.base_top_keys})" if ok and isinstance(r.top_keys, str)
                                  and r.top_keys else "–"),
                     "tokens": f"{int(r.tokens)}"})
    return pd.DataFrame(rows).set_index("model") if rows else pd.DataFrame()


def between_display(frame: pd.DataFrame) -> pd.DataFrame:
    rows = [{"gated": plain(r.gated), "against": plain(r.ungated), "ablation": r.ablation,
             "Δ loss, ungated": f"{r.delta_ungated:+.4f}", "Δ loss, gated": f"{r.delta_gated:+.4f}",
             "gated − ungated": f"{r.difference:+.4f}",
             f"{LEVEL:.0%} interval": f"[{r.lo:+.4f}, {r.hi:+.4f}]" if math.isfinite(r.lo) else "–",
             "reading": r.reading, "sequences": f"{r.sequences}"} for r in frame.itertuples()]
    return pd.DataFrame(rows).set_index("gated") if rows else pd.DataFrame()


@needing("ablations", id="sinks", title=TITLE)
def sinks(runs: Runs) -> Section:
    models = _models(runs)
    between = between_models(runs)
    paired = [TableItem("sink-ablations-between", "Gated against ungated, the same sequences", between_display(between),
                        "For each gated run and an ungated run that read the same token ids: each model's Δ loss "
                        "under the ablation, the difference (gated − ungated; below 0: the gated model loses less "
                        f"without its sink) and its paired {LEVEL:.0%} bootstrap interval over sequences "
                        f"(ablation_sequences.csv; {BETWEEN_RESAMPLES} resamples, each drawing the sequences once for "
                        "both models, so what they share stays out of the interval). A direction is read only "
                        "where the interval excludes 0; a massive-activation ablation is marked not comparable "
                        "where it acted on another layer, or on other sequences (those with an activation past "
                        "the threshold), in the two models.",
                        index_label="gated")] if len(between) else []
    return Section(
        id="sinks", title=TITLE,
        intro=("What the first token's attention is for, measured by taking it away: the held-out loss "
               "under masks in probe's own attention back-end (a sliding window of W keys, with or without "
               "the first k keys; key 0 masked and the softmax renormalised; key 0's value zeroed), under "
               "changes of position 0 (removed, replaced, a BOS prepended) and with the massive "
               "activations set to zero or to their mean, against the unablated model on the same tokens. "
               "A Δ loss whose paired interval holds 0 is reported as no measurable effect."),
        items=[
            FigureItem("sink-ablations", "Loss change by position under each sink ablation",
                       partial(plot_sink_ablations, runs),
                       "A row per family of ablations, a panel per model (" + ", ".join(plain(m) for m in models)
                       + "): Δ loss of each ablation (ablation_positions.csv) by target position bucket "
                       "[2^k, 2^(k+1)), drawn at the bucket's geometric middle; bands: paired 95% bootstrap "
                       "intervals over sequences. The panels of a row share its y scale; a row whose Δ loss "
                       f"spans more than {SYMLOG_ABOVE:g} nats is drawn on a symlog scale, linear within "
                       f"±{SYMLOG_LINEAR:g}. "
                       "Last panel: F-Attn (mean attention on key 0 over queries t ≥ 1) under each "
                       "ablation, and without one (none).",
                       shrinkable=False),   # a row per ablation in the last panel: squeezed, its labels overlap
            TableItem("sink-ablations-table", "Loss under sink ablations", ablation_display(runs),
                      "ablations.csv: Δ loss = loss under the ablation − the unablated model's on the same "
                      "target tokens, its paired 95% interval, the effect (a direction only where the interval "
                      "excludes 0), F-Attn under the ablation and, for runs with --anatomy, the three key positions "
                      "that receive the most attention (position:share of all attention, every layer and head)."),
            *paired,
        ],
    )


SECTION = sinks
