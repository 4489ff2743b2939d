"""`Analysis.plot_*`: every figure of the report layer as a method, for notebooks.

Each method draws `reports.plot_<name>(self, ...)` with the same keyword arguments and returns
its Figure, which Jupyter draws inline (the report layer builds figures without pyplot); with
`ax=` or `fig=` it draws there and returns the figure holding it. The signatures are written
out so that `help()`, completion and `inspect.signature` show them; tests/test_results.py
checks them against the report layer's.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the report layer (matplotlib) is imported only when a plot is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

# Every plot of reports.plots, by name without "plot_"; tests/test_results.py checks the list
# against reports.plots.__all__ (probe imports without the report layer).
PLOTS = (
    "attention_patterns", "context_buckets", "context_length", "first_token_by_bucket", "first_token_by_layer",
    "first_token_heatmap", "gate_by_token_type", "gate_heatmap", "gate_histograms",
    "gate_saturation", "gate_stats_by_layer", "gate_vs_baseline_f_attn", "gate_vs_sink_attention",
    "interventions", "interventions_by_layer", "loss_by_length", "massive_activations",
    "massive_by_layer", "received_attention", "sparsity_by_layer", "sparsity_sweep", "training",
    "trajectory", "value_drains")
NOT_METHODS: tuple[str, ...] = ()  # every report figure has its method


def _plot(name: str, analysis, **options):
    import reports                      # imported late: probe works without the report layer

    return getattr(reports, name)(analysis, **options)


class PlotMethods:
    """Mixin for Analysis: one plot_* method per figure of the report."""

    def plot_attention_patterns(
            self, *,
            fig: Figure | SubFigure | None = None,
            layers: Sequence[int] | None = None,
            max_layers: int = 1,
    ) -> Figure | SubFigure:
        """One query x key panel per model and chosen layer, models in reading order, at most three
        panels to a row.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_attention_patterns`.
        """
        return _plot("plot_attention_patterns", self, fig=fig, layers=layers, max_layers=max_layers)

    def plot_context_buckets(
            self, *,
            fig: Figure | SubFigure | None = None,
    ) -> Figure | SubFigure:
        """F-Attn (top) and, where the runs kept it, the loss (bottom) by query position (log2
        buckets, every layer and head) at each length, one column per series; dashed: the uniform
        reference; dotted: the training length.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_context_buckets` (a context sweep's runs side by side draw every length).
        """
        return _plot("plot_context_buckets", self, fig=fig)

    def plot_context_length(
            self, *,
            fig: Figure | SubFigure | None = None,
    ) -> Figure | SubFigure:
        """Four panels against the sequence length (log2 x), one line per series (model and
        scaling); dotted: each series' training length. F-Attn carries its uniform reference.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_context_length` (a context sweep's runs side by side draw every length).
        """
        return _plot("plot_context_length", self, fig=fig)

    def plot_first_token_by_bucket(
            self, *,
            ax: Axes | None = None,
            log: bool = True,
    ) -> Figure | SubFigure:
        """F-Attn by query position, one line per model, with the uniform reference.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_first_token_by_bucket`.
        """
        return _plot("plot_first_token_by_bucket", self, ax=ax, log=log)

    def plot_first_token_by_layer(
            self, *,
            ax: Axes | None = None,
            metric: str = 'f_attn',
    ) -> Figure | SubFigure:
        """Head-mean F-Attn per layer, models overlaid, each model's uniform reference dashed.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_first_token_by_layer`.
        """
        return _plot("plot_first_token_by_layer", self, ax=ax, metric=metric)

    def plot_first_token_heatmap(
            self, *,
            fig: Figure | SubFigure | None = None,
            metric: str = 'f_attn',
            cmap: str = 'magma_r',
            vmax: float | None = None,
    ) -> Figure | SubFigure:
        """One layer x head heatmap per model, all on one colour scale (0 to the largest F-Attn).

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_first_token_heatmap`.
        """
        return _plot("plot_first_token_heatmap", self, fig=fig, metric=metric, cmap=cmap, vmax=vmax)

    def plot_gate_by_token_type(
            self, *,
            fig: Figure | SubFigure | None = None,
            cmap: str = 'viridis',
    ) -> Figure | SubFigure:
        """One layer x token-type heatmap of the mean gate score per model that has the table.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_gate_by_token_type`.
        """
        return _plot("plot_gate_by_token_type", self, fig=fig, cmap=cmap)

    def plot_gate_heatmap(
            self, *,
            fig: Figure | SubFigure | None = None,
            metric: str = 'mean',
            group: str = 'all',
            cmap: str = 'viridis',
            vmax: float | None = None,
    ) -> Figure | SubFigure:
        """Layer x head mean gate score per gated model, on one shared colour scale.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_gate_heatmap`.
        """
        return _plot("plot_gate_heatmap", self, fig=fig, metric=metric, group=group, cmap=cmap,
                     vmax=vmax)

    def plot_gate_histograms(
            self, *,
            fig: Figure | SubFigure | None = None,
            layers: Sequence[int] | None = None,
            max_layers: int = 12,
            log: bool = True,
            max_columns: int = 6,
    ) -> Figure | SubFigure:
        """One panel per layer: the share of gate scores in each of the 50 bins, models overlaid.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_gate_histograms`.
        """
        return _plot("plot_gate_histograms", self, fig=fig, layers=layers, max_layers=max_layers,
                     log=log, max_columns=max_columns)

    def plot_gate_saturation(
            self, *,
            ax: Axes | None = None,
            group: str = 'all',
    ) -> Figure | SubFigure:
        """Cumulative share of gate scores below 0.01, 0.1, 0.5, 0.9 and 0.99, one line per model,
        pooled over layers and heads with their element counts; logit x axis, on which the five
        thresholds are evenly spaced.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_gate_saturation`.
        """
        return _plot("plot_gate_saturation", self, ax=ax, group=group)

    def plot_gate_stats_by_layer(
            self, *,
            ax: Axes | None = None,
            group: str = 'all',
    ) -> Figure | SubFigure:
        """Per layer: mean gate score (line), ±1 std (band), min and max (thin dashed lines).

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_gate_stats_by_layer`.
        """
        return _plot("plot_gate_stats_by_layer", self, ax=ax, group=group)

    def plot_gate_vs_baseline_f_attn(
            self, *,
            fig: Figure | SubFigure | None = None,
            cmap: str = 'viridis',
    ) -> Figure | SubFigure:
        """Per (layer, head): the baseline's F-Attn (x) against the gated run's mean gate (y), one
        panel per (baseline, gated) pair on the same token ids, points coloured by layer.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_gate_vs_baseline_f_attn`.
        """
        return _plot("plot_gate_vs_baseline_f_attn", self, fig=fig, cmap=cmap)

    def plot_gate_vs_sink_attention(
            self, *,
            fig: Figure | SubFigure | None = None,
            cmap: str = 'viridis',
    ) -> Figure | SubFigure:
        """Mean gate score against the attention a query puts on its head's top sink key, one curve
        per layer (coloured by layer), one panel per gated run with gate_sink.csv.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_gate_vs_sink_attention`.
        """
        return _plot("plot_gate_vs_sink_attention", self, fig=fig, cmap=cmap)

    def plot_interventions(
            self, *,
            ax: Axes | None = None,
    ) -> Figure | SubFigure:
        """Δ loss of each intervention applied to all layers at once, one bar per model.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_interventions`.
        """
        return _plot("plot_interventions", self, ax=ax)

    def plot_interventions_by_layer(
            self, *,
            fig: Figure | SubFigure | None = None,
            max_columns: int = 4,
    ) -> Figure | SubFigure:
        """One panel per intervention: Δ loss when only that layer is intervened on, per model.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_interventions_by_layer`.
        """
        return _plot("plot_interventions_by_layer", self, fig=fig, max_columns=max_columns)

    def plot_loss_by_length(
            self, *,
            ax: Axes | None = None,
    ) -> Figure | SubFigure:
        """Held-out loss by input length (inference.csv of trained runs), one line per model.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_loss_by_length`.
        """
        return _plot("plot_loss_by_length", self, ax=ax)

    def plot_massive_activations(
            self, *,
            fig: Figure | SubFigure | None = None,
            sites: tuple[str, ...] = ('attn_out', 'resid_mid', 'mlp_out', 'resid_post'),
    ) -> Figure | SubFigure:
        """The four sites side by side on one shared log scale, one legend of models.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_massive_activations`.
        """
        return _plot("plot_massive_activations", self, fig=fig, sites=sites)

    def plot_massive_by_layer(
            self, *,
            site: str = 'resid_post',
            ax: Axes | None = None,
            show_median: bool = True,
            legend: bool = True,
            max_layer_ticks: int = 24,
    ) -> Figure | SubFigure:
        """max |h| per layer at one site, models overlaid, log y; median |h| dotted beside it.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_massive_by_layer`.
        """
        return _plot("plot_massive_by_layer", self, site=site, ax=ax, show_median=show_median,
                     legend=legend, max_layer_ticks=max_layer_ticks)

    def plot_received_attention(
            self, *,
            fig: Figure | SubFigure | None = None,
            cmap: str = 'magma_r',
            epsilon: float | None = None,
    ) -> Figure | SubFigure:
        """Key position x layer heatmap of the attention each key receives (Gu et al.'s importance
        score, pooled over heads), one panel per run with the table, one log colour scale.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_received_attention`.
        """
        return _plot("plot_received_attention", self, fig=fig, cmap=cmap, epsilon=epsilon)

    def plot_sparsity_by_layer(
            self, *,
            fig: Figure | SubFigure | None = None,
            thresholds: Sequence[float] = (0.01, 0.001),
    ) -> Figure | SubFigure:
        """Rows: models; columns: thresholds; bars: share of |x| < threshold per layer and variant.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_sparsity_by_layer`.
        """
        return _plot("plot_sparsity_by_layer", self, fig=fig, thresholds=thresholds)

    def plot_sparsity_sweep(
            self, *,
            fig: Figure | SubFigure | None = None,
    ) -> Figure | SubFigure:
        """Share of |x| below each threshold of the sweep (log x), one panel per variant.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_sparsity_sweep`.
        """
        return _plot("plot_sparsity_sweep", self, fig=fig)

    def plot_training(
            self, *,
            fig: Figure | SubFigure | None = None,
    ) -> Figure | SubFigure:
        """Left: train loss and eval loss (dashed, markers, drawn on top); right: gradient norm.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_training`.
        """
        return _plot("plot_training", self, fig=fig)

    def plot_trajectory(
            self, *,
            fig: Figure | SubFigure | None = None,
    ) -> Figure | SubFigure:
        """One panel per metric against the training step, one line per model with markers at the
        measured steps. A model measured at one step only (the base, before any training) is a
        dashed horizontal line across the panel, so the arms read against it.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_trajectory`.
        """
        return _plot("plot_trajectory", self, fig=fig)

    def plot_value_drains(
            self, *,
            fig: Figure | SubFigure | None = None,
    ) -> Figure | SubFigure:
        """Per layer, the value-norm ratio of the sink keys (||v_sink|| / median ||v||, log y) and
        the sink's projection share of the attention output, mean over heads, one line per run.

        Returns the Figure (with `ax=` or `fig=`, the figure holding it); see
        `reports.plot_value_drains`.
        """
        return _plot("plot_value_drains", self, fig=fig)
