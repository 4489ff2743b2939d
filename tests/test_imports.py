"""The import graph of probe/ and reports/: no cycle, neither at import time nor through imports
inside functions; the event names apart from the bus that builds the metrics; the attention
kernel asking the family adapter (probe/families/attention_terms.py) instead of naming a family;
the run-directory reader in probe, which reports/ imports (never the other way round); one
analysis (analyze.py) over the model sources (source.py: the hooks of probe/capture/hf.py and bridge.py,
which import neither it nor each other) and one batch loop (batches.py); and no module of either
package over LINES lines.
"""
from __future__ import annotations

from tests.import_graph import ROOT, _cycle, _graph, _modules  # noqa: F401  (the walk, shared with test_layers.py)


def test_no_import_cycle_at_import_time():
    graph = _graph(top_level=True)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_one_analysis_over_the_sources():
    """One recipe (analyze.py) over the sources (source.py); the hooks of each source (probe/capture/hf.py,
    bridge.py) know neither the recipe nor the other source, and the pass (pipeline.py) no source."""
    everywhere = _graph(top_level=False)
    assert "probe.run.source" in _graph(top_level=True)["probe.api.analyze"]
    assert not {"probe.capture.bridge", "probe.capture.hf"} & _graph(top_level=True)["probe.api.analyze"]
    for hooks in ("probe.capture.bridge", "probe.capture.hf"):
        assert not {"probe.api.analyze", "probe.run.source", "probe.run.pipeline"} & everywhere[hooks], hooks
    assert "probe.capture.hf" not in everywhere["probe.capture.bridge"] and "probe.capture.bridge" not in everywhere["probe.capture.hf"]
    assert not {"probe.api.analyze", "probe.run.source", "probe.capture.bridge", "probe.capture.hf"} & everywhere["probe.run.pipeline"]
    # The one batch loop: the pass, the interventions and the exact control, none with its own.
    for loop in ("probe.run.pipeline", "probe.run.interventions", "probe.run.control"):
        assert "probe.run.batches" in everywhere[loop], loop


def test_no_import_cycle_even_through_imports_inside_functions():
    """A cycle through a function's import (options -> interventions -> capture -> options was
    one) works only while every module's top level is done first: one moved import breaks it.
    None is allowed: a module that needs a name from one that imports it takes the name from a
    lower module both import (the event names, the official gate flags, the training Shape)."""
    everywhere = _graph(top_level=False)
    assert _cycle(everywhere) is None, " -> ".join(_cycle(everywhere))


def test_the_event_names_import_nothing_of_probe():
    """probe/core/events.py names the events; the bus (probe/capture/bus.py) builds the metrics, which import
    the names: a name module that imported a metric would close the circle again."""
    assert _graph(top_level=False)["probe.core.events"] == set()


def test_the_attention_kernel_names_no_family():
    """The kernel reads a family's extra softmax terms through families/attention_terms.py only."""
    imported = _graph(top_level=False)["probe.capture.attention"]
    families = {m for m in imported if m.startswith("probe.families.")}
    assert families == {"probe.families.attention_terms"}, families


# The modules of probe that write or draw reports, and so import reports/ (inside functions, so
# that `probe --help` and an analysis never load it). reports/ imports the run-directory reader,
# the schema and the intervention names from probe, none of these.
REPORT_FRONT_ENDS = {"probe.api.cli", "probe.api.outputs", "probe.results.plotting", "probe.api.report_args",
                     "probe.api.sweep", "probe.api.view_cli"}


def test_probe_imports_reports_only_from_its_front_ends():
    modules = _modules()
    at_import, everywhere = _graph(top_level=True), _graph(top_level=False)
    importers = {m for m, targets in everywhere.items()
                 if not m.startswith("probe.reports") and any(t.startswith("probe.reports") for t in targets)}
    assert importers <= REPORT_FRONT_ENDS, importers - REPORT_FRONT_ENDS
    for module in importers:
        assert not any(t.startswith("probe.reports") for t in at_import[module]), module
    # The reader Analysis.load and reports.runs share never reaches reports/, even at call time.
    reached, todo = set(), ["probe.results.run_files"]
    while todo:
        for target in everywhere[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    assert not {m for m in reached if m.startswith("probe.reports")}, reached
    assert "probe.results.run_files" in everywhere["probe.reports.runs"] and "probe.results.run_files" in modules


def test_reports_runs_still_names_the_reader():
    """reports.runs re-exports what it used to define (the reader moved to probe/results/run_files.py)."""
    import probe.results.run_files
    import probe.reports.runs
    from probe import reports

    assert reports.runs.read_run_dir is probe.results.run_files.read_run_dir
    assert reports.runs.RunDirectoryError is probe.results.run_files.RunDirectoryError


LINES = 400     # a module longer than this does more than one job: split it by job


def test_no_module_is_over_the_line_limit():
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > LINES}
    assert not long, f"modules over {LINES} lines (split them by job): {long}"


def test_each_reducer_is_imported_from_its_metric():
    """The metric reducers live in probe/metrics/ only; probe.metrics.reducers (the base class and the
    generic LogHistogram) keeps no aliases for them."""
    import probe.metrics.reducers

    for name in ("GateStats", "GroupedGateStats", "FirstTokenStats", "MaxAbsStats", "SparsityStats",
                 "LossStats", "THRESHOLDS"):
        assert not hasattr(probe.metrics.reducers, name), name


def test_dir_of_probe_lists_its_names_not_the_modules_it_imports_for_itself():
    """dir(probe) (tab completion in a notebook) listed importlib, os, sys and types."""
    import probe

    names = dir(probe)
    assert set(probe.__all__) <= set(names)
    assert not {"importlib", "os", "sys", "types"} & set(names)
    assert "core" in names                         # a subpackage imported at import probe stays
