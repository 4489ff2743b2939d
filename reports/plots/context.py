"""Context length: F-Attn, sink rate, M-Act and loss against the sequence length of context
sweeps (reports/context.py), and F-Attn by query position at each length."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure, SubFigure

from probe.reports.context import context_table, pooled, sweep_runs, trained_length
from probe.reports.plots._layout import figure_or_new, not_applicable
from probe.reports.runs import load_runs
from probe.reports.style import REFERENCE_COLOR, model_colors, styled
from probe.reports.text import plain

PANELS = (("f_attn", "F-Attn (t ≥ 1)"), ("sink_rate", "sink rate"), ("m_act", "M-Act"), ("loss", "loss"))


def _log2_lengths(ax, lengths) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(lengths), labels=[f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)
                                           for n in sorted(lengths)])
    ax.minorticks_off()


def _mark_training(ax, lengths_by_series: dict[str, int | None], colors) -> None:
    """A dotted line at each series' training length (the config's original positions)."""
    for series, length in lengths_by_series.items():
        if length:
            ax.axvline(length, color=colors.get(series, REFERENCE_COLOR), linestyle=":", linewidth=1.0)


@styled
def plot_context_length(runs: Any, *, fig: Figure | SubFigure | None = None) -> Figure | SubFigure:
    """Four panels against the sequence length (log2 x), one line per series (model and
    scaling); dotted: each series' training length. F-Attn carries its uniform reference."""
    runs = load_runs(runs)
    fig = figure_or_new(fig, 10.0, 6.2)
    table = context_table(runs)
    if table.empty:
        not_applicable(fig.add_subplot(), "No run is part of a context sweep (probe analyze --seq-len 512,2048,...).")
        return fig
    wide = pooled(table)
    series = list(dict.fromkeys(s for s, _, _ in sweep_runs(runs)))
    colors = model_colors(series)
    trained = {s: trained_length(sw) for s, _, sw in sweep_runs(runs)}
    lengths = sorted(set(table["length"]))
    axes = fig.subplots(2, 2, sharex=True)
    for ax, (metric, label) in zip(axes.flat, PANELS):
        for name in series:
            rows = wide.loc[name] if name in wide.index.get_level_values(0) else None
            if rows is None or metric not in rows:
                continue
            ax.plot(rows.index, rows[metric], marker="o", color=colors[name], label=plain(name))
            if metric == "f_attn" and "f_attn_uniform" in rows:
                ax.plot(rows.index, rows["f_attn_uniform"], linestyle="--", linewidth=0.8, color=colors[name])
        values = wide[metric].dropna() if metric in wide else []
        if metric == "m_act" and len(values) and values.min() > 0 and values.max() / values.min() > 10:
            ax.set_yscale("log")
        _mark_training(ax, trained, colors)
        _log2_lengths(ax, lengths)
        ax.set_ylabel(label)
    for ax in axes[1]:
        ax.set_xlabel("sequence length (tokens)")
    axes[0, 0].legend(title="model", fontsize=7)
    return fig


@styled
def plot_context_buckets(runs: Any, *, fig: Figure | SubFigure | None = None) -> Figure | SubFigure:
    """F-Attn (top) and, where the runs kept it, the loss (bottom) by query position (log2
    buckets, every layer and head) at each length, one column per series; dashed: the uniform
    reference; dotted: the training length."""
    runs = load_runs(runs)
    table = context_table(runs)
    rows = table[(table["scope"] == "bucket")]
    series = list(dict.fromkeys(table["series"]))
    with_loss = bool((rows["metric"] == "loss").any())
    fig = figure_or_new(fig, 10.0, 6.0 if with_loss else 3.4)
    if rows.empty:
        not_applicable(fig.add_subplot(), "No sweep run has F-Attn by position (first_token_buckets.csv).")
        return fig
    trained = {s: trained_length(sw) for s, _, sw in sweep_runs(runs)}
    grid = fig.subplots(2 if with_loss else 1, len(series), sharex=True, sharey="row", squeeze=False)
    lengths = sorted(set(rows["length"]))
    colors = model_colors([str(n) for n in lengths])
    for column, name in enumerate(series):
        mine = rows[rows["series"] == name]
        for T in lengths:
            at = mine[mine["length"] == T]
            f = at[at["metric"] == "f_attn"].sort_values("bucket_lo")
            u = at[at["metric"] == "f_attn_uniform"].sort_values("bucket_lo")
            loss = at[at["metric"] == "loss"].sort_values("bucket_lo")
            if len(f):
                grid[0, column].plot(f["bucket_lo"], f["value"], marker=".", color=colors[str(T)], label=f"T = {T:,}")
                grid[0, column].plot(u["bucket_lo"], u["value"], linestyle="--", linewidth=0.7, color=colors[str(T)])
            if with_loss and len(loss):
                grid[1, column].plot(loss["bucket_lo"], loss["value"], marker=".", color=colors[str(T)])
        grid[0, column].set_title(plain(name), fontsize=9)
        grid[0, column].set_yscale("log")
        for ax in grid[:, column]:
            if trained.get(name):
                ax.axvline(trained[name], color=REFERENCE_COLOR, linestyle=":", linewidth=1.0)
            ax.set_xscale("log", base=2)
        grid[-1, column].set_xlabel("query position (bucket start)")
    grid[0, 0].set_ylabel("F-Attn")
    if with_loss:
        grid[1, 0].set_ylabel("loss")
    grid[0, -1].legend(fontsize=7)
    return fig
