"""The import graph of probe/ and reports/: no cycle at import time, and the two model sources
(analyze.py for Hugging Face models, bridge.py for TransformerLens) share pipeline.py instead of
importing each other."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    found = {}
    for package in ("probe", "reports"):
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules, *, top_level: bool) -> set[str]:
    """The modules of `modules` that `name` imports (only at module level when top_level);
    a package a module sits in is left out (Python imports it first whatever the module does)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in tree.body if top_level else ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            inner = {f"{target}.{a.name}" for a in node.names} & modules.keys()
            candidates = inner or {target}
        elif isinstance(node, ast.Import):
            candidates = {a.name for a in node.names}
        else:
            continue
        out |= {c for c in candidates if c in modules and c != name and not name.startswith(c + ".")}
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_no_import_cycle_at_import_time():
    modules = _modules()
    graph = {m: _imports(m, p, modules, top_level=True) for m, p in modules.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_sources_do_not_import_each_other():
    modules = _modules()
    everywhere = {m: _imports(m, p, modules, top_level=False) for m, p in modules.items()}
    assert "probe.analyze" not in everywhere["probe.bridge"]
    # analyze.py hands a bridge to bridge.py (inside probe.analyze, at call time only).
    assert "probe.bridge" not in _imports("probe.analyze", modules["probe.analyze"], modules, top_level=True)
    for source in ("probe.analyze", "probe.bridge"):
        assert "probe.pipeline" in everywhere[source]
    assert not {"probe.analyze", "probe.bridge", "probe.capture"} & everywhere["probe.pipeline"]


# Cycles that close only through an import inside a function, each on purpose: these edges
# (module -> what it imports at call time) are left out of the check below, and nothing else.
CALL_TIME_ONLY = {
    ("probe.events", "probe.metrics"): "a Pass builds the metrics, which import the event names",
    ("probe.adapters.official", "probe.models.official_qwen3"): "transformers' Qwen3 modeling only "
                                                                "when a model is built",
    ("probe.train.config", "probe.train.model"): "the config stays free of torch for the CLI",
}


def test_no_import_cycle_even_through_imports_inside_functions():
    """A cycle through a function's import (options -> interventions -> capture -> options was
    one) works only while every module's top level is done first: one moved import breaks it."""
    modules = _modules()
    everywhere = {m: _imports(m, p, modules, top_level=False) for m, p in modules.items()}
    for (module, imported), why in CALL_TIME_ONLY.items():
        assert imported in everywhere[module], f"{module} no longer imports {imported}: drop it here"
        assert imported not in _imports(module, modules[module], modules, top_level=True), why
        everywhere[module] = everywhere[module] - {imported}
    assert _cycle(everywhere) is None, " -> ".join(_cycle(everywhere))


def test_each_reducer_is_imported_from_its_metric():
    """The metric reducers live in probe/metrics/ only; probe.reducers (the base class and the
    generic LogHistogram) keeps no aliases for them."""
    import probe.reducers

    for name in ("GateStats", "GroupedGateStats", "FirstTokenStats", "MaxAbsStats", "SparsityStats",
                 "LossStats", "THRESHOLDS"):
        assert not hasattr(probe.reducers, name), name
