"""`Analysis.plot_*`: every figure of the report layer as a method, for notebooks.

`analysis.plot_<name>(...)` draws `reports.plot_<name>(analysis, ...)` and returns its Figure,
which Jupyter draws inline (the report layer builds figures without pyplot); with `ax=` or
`fig=` it draws there and returns the figure holding it. The methods come from the figure
registry, reports.plots.__all__, when first asked for: a new plot there is a method here with
no code of its own, and each carries its plot's docstring and signature (without the runs
argument), which `help()`, completion and `inspect.signature` show.
"""
from __future__ import annotations

import functools
import inspect

PREFIX = "plot_"


def _registry():
    import probe.reports.plots  # imported late: probe works without the report layer (matplotlib)
    from probe import reports

    return reports.plots


def plot_method(analysis, name: str):
    """`reports.plots.<name>` bound to `analysis`, with the plot's own docstring and signature."""
    plots = _registry()
    if name not in plots.__all__:
        raise AttributeError(f"{type(analysis).__name__!s} has no attribute {name!r}")
    plot = getattr(plots, name)

    @functools.wraps(plot)
    def method(*args, **kwargs):
        return plot(analysis, *args, **kwargs)

    signature = inspect.signature(plot)
    method.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])
    return method


class PlotMethods:
    """Mixin for Analysis: one plot_* method per figure of the report (reports.plots.__all__),
    and view(), the per-token viewer."""

    def view(self, other=None, *, height: int = 760):
        """The per-token viewer of this run (beside `other`, an Analysis or run directory on the
        same tokens, when given), inline in Jupyter or VS Code: no ipywidgets, no extension.
        `.save(path)` writes the standalone page, as `probe view` does."""
        from probe.reports.viewer import View    # imported late, as the figures are

        return View([self] if other is None else [self, other], height=height)

    def __getattr__(self, name: str):
        if name.startswith(PREFIX):
            return plot_method(self, name)
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def __dir__(self):
        names = set(super().__dir__())
        try:
            names.update(_registry().__all__)
        except ImportError:              # no report layer installed: no figures to offer
            pass
        return sorted(names)
