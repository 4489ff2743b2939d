"""M-Act: the largest |activation| per layer at the four sites of a layer (paper Figure 6)."""

from __future__ import annotations

from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from probe.reports.tables.frames import massive_by_layer
from probe.reports.plots._layout import (axes_or_new, figure_or_new, key_band, key_line, legend_beside,
                                         legend_entries, legend_outside, log_headroom, not_applicable,
                                         set_layer_ticks, shares_y)
from probe.reports.plots.intervals import BAND_ALPHA, draw_band
from probe.reports.plots.choices import check_choice
from probe.reports.runs import load_runs
from probe.reports.labels import SITE_LABELS, SITES
from probe.reports.style import model_colors, styled
from probe.reports.text import plain


@styled
def plot_massive_by_layer(runs: Any, *, site: str = "resid_post", ax: Axes | None = None,
                          show_median: bool = True, legend: bool = True,
                          max_layer_ticks: int = 24) -> Figure | SubFigure:
    """max |h| per layer at one site, models overlaid, log y; median |h| dotted beside it.

    The median shows the typical magnitude, so the gap between the lines is how "massive" the
    largest activation is.
    """
    check_choice("site", site, SITES)
    runs = load_runs(runs)
    ax = axes_or_new(ax, 6.4, 3.6)
    maxima = massive_by_layer(runs, site, "max_abs")
    medians = massive_by_layer(runs, site, "median_abs")
    if maxima.empty:
        return not_applicable(ax, f"No M-Act at site {site} in these runs.")
    colors = model_colors(runs.models)
    layers: set[int] = set()
    banded = median = False
    for model in runs.models:
        layers.update(runs.layers(model))
        rows = maxima[maxima["model"] == model]
        if rows.empty:
            continue
        ax.plot(rows["layer"], rows["value"], marker="o", markersize=3.5, color=colors[model],
                label=plain(model))
        banded |= draw_band(ax, runs, model, "m_act", colors[model], site=site)   # bootstrap of a maximum
        typical = medians[medians["model"] == model]
        if show_median and not typical.empty:
            median = True
            ax.plot(typical["layer"], typical["value"], linestyle=":", color=colors[model],
                    label="_median")
    if median:
        key_line(ax, "median |h|", linestyle=":")
    if banded:
        key_band(ax, "95% interval", BAND_ALPHA)
    ax.set_yscale("log")
    if not shares_y(ax):    # panels of one shared axis: plot_massive_activations, once all drawn
        log_headroom(ax)    # a labelled decade above the largest M-Act (54 had none above 10)
    set_layer_ticks(ax, sorted(layers), max_ticks=max_layer_ticks)
    ax.set_ylabel("max |h|")
    ax.set_title(SITE_LABELS.get(site, site))
    if legend:
        legend_beside(ax)
    return ax


@styled
def plot_massive_activations(runs: Any, *, fig: Figure | SubFigure | None = None,
                             sites: tuple[str, ...] = SITES) -> Figure | SubFigure:
    """The four sites side by side on one shared log scale, one legend of models."""
    for site in sites:
        check_choice("site", site, SITES)
    runs = load_runs(runs)
    fig = figure_or_new(fig, 3.0 * len(sites) + 0.6, 3.5)
    axes = fig.subplots(1, len(sites), squeeze=False, sharey=True)[0]
    for ax, site in zip(axes, sites):
        plot_massive_by_layer(runs, site=site, ax=ax, legend=False, max_layer_ticks=8)
    log_headroom(axes[0])   # a labelled decade above the largest M-Act of any panel
    axes[0].set_ylabel("max |h|")
    for ax in axes[1:]:
        ax.set_ylabel("")
    legend_outside(axes[-1], *legend_entries(axes))
    return fig

