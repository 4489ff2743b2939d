"""Reports on saved probe runs: figures, tables, one self-contained HTML file and a PDF.

Reads run directories (docs/run-directory.md) or in-memory analyses only; it never imports
anything that loads a model.

    from probe import reports
    reports.plot_first_token_heatmap("runs/baseline")          # -> Figure
    reports.plot_first_token_by_layer(["runs/base", "runs/gated"])  # -> Figure (every plot)
    reports.build_report(["runs/base", "runs/gated"], "out")   # -> {"html": ..., "pdf": ...}
    reports.write_figures(["runs/base", "runs/gated"], "figs")  # each figure: PDF, SVG, caption
    reports.claims_table("runs/base", "runs/gated")             # the paper's claims, checked
"""

if __name__ != "probe.reports":
    # From a source checkout the folder is also importable as `reports`: that would load every
    # module a second time (reports.runs beside probe.reports.runs, two Runs classes).
    raise ImportError("the report layer is probe.reports now: `from probe import reports` "
                      "(the top-level `reports` package was removed)")

from probe.reports import plots
from probe.reports.build import build_report, write_figures
from probe.reports.claims import claims_table
# Every plot function is public here too; reports.plots.__all__ is the one list of them.
from probe.reports.plots import *  # noqa: F401,F403
from probe.reports.runs import Runs, load_runs
from probe.reports.tables import (gate_position_table, gate_token_type_table, inference_table,
                                  interventions_table, massive_top_table, provenance_table, summary_table)
from probe.reports.tables.anatomy import secondary_sinks_table, sink_tokens_table

_TABLES = ["claims_table", "gate_position_table", "gate_token_type_table", "inference_table",
           "interventions_table", "massive_top_table", "provenance_table",
           "secondary_sinks_table", "sink_tokens_table", "summary_table"]

__all__ = sorted(["Runs", "build_report", "load_runs", "write_figures", *_TABLES,
                  *plots.__all__])
