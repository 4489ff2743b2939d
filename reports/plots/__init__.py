"""Plot functions: each takes runs (paths, analyses or `Runs`) and returns the Figure it drew
(with `ax=` or `fig=` given, the figure that holds it)."""

from probe.reports.plots.anatomy import (plot_gate_vs_baseline_f_attn, plot_gate_vs_sink_attention,
                                         plot_received_attention, plot_value_drains)
from probe.reports.plots.attention_patterns import plot_attention_patterns
from probe.reports.plots.context import plot_context_buckets, plot_context_length
from probe.reports.plots.first_token import (plot_first_token_by_bucket, plot_first_token_by_layer,
                                             plot_first_token_heatmap)
from probe.reports.plots.gates import (plot_gate_heatmap, plot_gate_histograms, plot_gate_saturation,
                                       plot_gate_stats_by_layer)
from probe.reports.plots.massive import plot_massive_activations, plot_massive_by_layer
from probe.reports.plots.sparsity import plot_sparsity_by_layer, plot_sparsity_sweep
from probe.reports.plots.interventions import plot_interventions, plot_interventions_by_layer
from probe.reports.plots.token_types import plot_gate_by_token_type
from probe.reports.plots.training import plot_loss_by_length, plot_training
from probe.reports.plots.trajectory import plot_trajectory

__all__ = [
    "plot_attention_patterns",
    "plot_context_buckets",
    "plot_context_length",
    "plot_first_token_by_bucket",
    "plot_first_token_by_layer",
    "plot_first_token_heatmap",
    "plot_gate_by_token_type",
    "plot_gate_heatmap",
    "plot_gate_vs_baseline_f_attn",
    "plot_gate_vs_sink_attention",
    "plot_gate_histograms",
    "plot_gate_saturation",
    "plot_gate_stats_by_layer",
    "plot_interventions",
    "plot_interventions_by_layer",
    "plot_loss_by_length",
    "plot_massive_activations",
    "plot_massive_by_layer",
    "plot_received_attention",
    "plot_sparsity_by_layer",
    "plot_sparsity_sweep",
    "plot_training",
    "plot_trajectory",
    "plot_value_drains",
]
