"""`Analysis.plot_*`: the report layer's figures as methods, for notebooks.

Each method calls `reports.plot_<name>(self, ...)`. Called without `ax=`, it returns the
Figure, which Jupyter draws inline (the report layer builds figures without pyplot, so a bare
Axes would not be shown); with `ax=`, it draws there and returns that Axes.
"""
from __future__ import annotations

# Listed here rather than read from reports.plots so that probe imports without the report
# layer; tests/test_results.py checks the list against reports.plots.__all__.
PLOTS = ("first_token_heatmap", "first_token_by_layer", "first_token_by_bucket", "attention_patterns",
         "massive_activations", "massive_by_layer", "gate_histograms", "gate_stats_by_layer",
         "gate_heatmap", "gate_saturation", "gate_by_token_type", "sparsity_by_layer", "sparsity_sweep",
         "interventions", "interventions_by_layer", "training")
# The one report figure that is not about an analysis: the demo's inference.csv (examples/demo.py).
NOT_METHODS = ("loss_by_length",)


def _plot_method(name: str):
    def method(self, **kwargs):
        import reports                      # imported late: probe works without the report layer

        result = getattr(reports, f"plot_{name}")(self, **kwargs)
        if "ax" not in kwargs and hasattr(result, "get_figure") and hasattr(result, "plot"):
            return result.get_figure()      # an Axes: hand back its figure so it displays
        return result

    method.__name__ = f"plot_{name}"
    method.__qualname__ = f"PlotMethods.plot_{name}"
    method.__doc__ = f"Draw `reports.plot_{name}` for this analysis; see that function for options."
    return method


class PlotMethods:
    """Mixin for Analysis: one plot_* method per figure of the report."""


for _name in PLOTS:
    setattr(PlotMethods, f"plot_{_name}", _plot_method(_name))
