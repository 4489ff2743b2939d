"""Reports on saved probe runs: figures, tables, one self-contained HTML file and a PDF.

Reads run directories (docs/run-directory.md) or in-memory analyses only; it never imports
anything that loads a model.

    import reports
    reports.plot_first_token_heatmap("runs/baseline")          # -> Figure
    reports.plot_first_token_by_layer(["runs/base", "runs/gated"])  # -> Axes
    reports.build_report(["runs/base", "runs/gated"], "out")   # -> {"html": ..., "pdf": ...}
"""

from reports.build import build_report
from reports.plots import (plot_attention_patterns, plot_first_token_by_bucket,
                           plot_first_token_by_layer, plot_first_token_heatmap,
                           plot_gate_by_token_type, plot_gate_heatmap, plot_gate_histograms,
                           plot_gate_saturation, plot_gate_stats_by_layer, plot_interventions,
                           plot_interventions_by_layer, plot_loss_by_length,
                           plot_massive_activations, plot_massive_by_layer,
                           plot_sparsity_by_layer, plot_sparsity_sweep, plot_training)
from reports.runs import Runs, load_runs
from reports.tables import (gate_position_table, gate_token_type_table, inference_table,
                            interventions_table, massive_top_table, provenance_table,
                            summary_table)

__all__ = [
    "Runs",
    "build_report",
    "gate_position_table",
    "gate_token_type_table",
    "inference_table",
    "interventions_table",
    "load_runs",
    "massive_top_table",
    "plot_attention_patterns",
    "plot_first_token_by_bucket",
    "plot_first_token_by_layer",
    "plot_first_token_heatmap",
    "plot_gate_by_token_type",
    "plot_gate_heatmap",
    "plot_gate_histograms",
    "plot_gate_saturation",
    "plot_gate_stats_by_layer",
    "plot_interventions",
    "plot_interventions_by_layer",
    "plot_loss_by_length",
    "plot_massive_activations",
    "plot_massive_by_layer",
    "plot_sparsity_by_layer",
    "plot_sparsity_sweep",
    "plot_training",
    "provenance_table",
    "summary_table",
]
