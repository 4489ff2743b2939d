"""The floors of probe (docs/architecture.md): each part imports only the parts below it, counting
the imports inside functions, apart from the few listed in EXCEPTIONS with their reason.

Measure the tree (arrows against the order, file-level import cycles, modules over 400 lines):

    python -m tests.test_layers
"""
from __future__ import annotations

import sys

from tests.import_graph import ROOT, _graph, _modules

# Bottom to top: a part may import the parts before it in this list, never one after it.
# core: what every part may import (errors, options, reprs, event / intervention / token type
# names, atomic writes, the .probe-output marker); then the data-flow order: the user's data,
# what probe knows of each family, a checkpoint loaded, the statistics (numpy only), the
# metrics, a forward pass turned into events that feed them, the run directory, the pass over
# the batches, training, the report layer, and what a user calls.
FLOORS = ("core", "data", "families", "load", "intervals", "metrics", "capture", "results", "run",
          "train", "reports", "api")
# probe/__init__.py (the public names) and probe/__main__.py (`python -m probe`) are the roof:
# they sit above every floor.
ROOF = ("probe", "probe.__main__")

# The imports that climb, on purpose: (importing file, imported module) -> why. A new climbing
# import fails test_each_part_imports_only_parts_below_it until it is listed here; a listed one
# that is gone fails test_every_exception_is_still_needed.
EXCEPTIONS = {
    # The options check each value when the object is made, so that a wrong value fails before
    # anything loads; four values are checked by their own part's parser, imported inside the
    # check (never at import time: core imports no other part when it loads).
    ("probe/core/option_checks.py", "probe.data.token_types"):
        "--token-groups: the groups file read as the pass reads it",
    ("probe/core/option_checks.py", "probe.families.gates"): "--gate: GateSpec.parse, the family part's spec",
    ("probe/core/option_checks.py", "probe.load.rope"): "--rope-scaling: rope.parse, the spec load applies",
    ("probe/core/option_checks.py", "probe.load.checkpoint_files"):
        "--tokenizer: check_tokenizer_dir, load's own check",
    # Analysis.plot_* are the report's figures (reports/plots/__init__.py __all__), read inside
    # the function, so that an analysis never loads the report layer.
    ("probe/results/plotting.py", "probe.reports.plots"): "Analysis.plot_* from the figure registry",
    ("probe/results/plotting.py", "probe.reports.viewer"): "Analysis.view(): the report's per-token viewer",
}
# The issue's bound on the folder-level arrows that climb (all of them listed above).
MAX_FOLDER_ARROWS = 9
LINES = 400


def floor(module: str) -> str:
    """The part a module belongs to: probe.<part>.…, probe.reports.… is `reports`; the roof."""
    if module in ROOF:
        return "roof"
    return module.split(".")[1]


def _rank(part: str) -> int:
    return len(FLOORS) if part == "roof" else FLOORS.index(part)


def _file(module: str) -> str:
    return _modules()[module].relative_to(ROOT).as_posix()


def climbing() -> set[tuple[str, str]]:
    """(file, imported module) for every import, at import time or inside a function, of a part
    above the importing one. Only the most specific module counts: `from ..reports.plots import x`
    names probe.reports.plots, not also the package probe.reports Python loads first."""
    out = set()
    for module, targets in _graph(top_level=False).items():
        specific = {t for t in targets if not any(o.startswith(t + ".") for o in targets)}
        for target in specific:
            if target == "probe" or floor(target) == floor(module):
                continue
            if _rank(floor(target)) > _rank(floor(module)):
                out.add((_file(module), target))
    return out


def _part_of_file(file: str) -> str:
    parts = file.removesuffix(".py").split("/")
    return "reports" if parts[0] == "reports" else ("roof" if len(parts) == 2 else parts[1])


def folder_arrows(arrows) -> set[tuple[str, str]]:
    return {(_part_of_file(file), floor(target)) for file, target in arrows}


def cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each is a cycle."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def long_modules() -> dict[str, int]:
    return {name: n for name, path in _modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > LINES}


def test_every_folder_of_probe_is_a_floor():
    folders = {p.name for p in (ROOT / "probe").iterdir() if (p / "__init__.py").exists()}
    assert folders | {"reports"} == set(FLOORS), sorted(folders ^ (set(FLOORS) - {"reports"}))


def test_each_part_imports_only_parts_below_it():
    new = climbing() - EXCEPTIONS.keys()
    assert not new, ("these imports climb against the floors (docs/architecture.md); move the name "
                     "to a lower part, or list the import in EXCEPTIONS with its reason: "
                     + "; ".join(f"{file} imports {target}" for file, target in sorted(new)))


def test_every_exception_is_still_needed():
    stale = EXCEPTIONS.keys() - climbing()
    assert not stale, f"no longer imported, take them off EXCEPTIONS: {sorted(stale)}"


def test_the_climbing_folder_arrows_are_few():
    arrows = folder_arrows(climbing())
    assert len(arrows) <= MAX_FOLDER_ARROWS, sorted(arrows)


def test_the_ground_floor_imports_no_other_part_when_it_loads():
    at_import = _graph(top_level=True)
    for module, targets in at_import.items():
        if floor(module) == "core":
            assert {t for t in targets if t != "probe" and floor(t) != "core"} == set(), module


def test_the_walk_sees_a_climbing_import(monkeypatch):
    """The check is not vacuous: a capture module importing the pass is reported."""
    import tests.import_graph as walk

    graph = dict(walk._graph(top_level=False))
    graph["probe.capture.hf"] = graph["probe.capture.hf"] | {"probe.run.pipeline"}
    monkeypatch.setattr(walk, "_graph", lambda top_level: graph)
    monkeypatch.setattr(sys.modules[__name__], "_graph", lambda top_level: graph)
    assert ("probe/capture/hf.py", "probe.run.pipeline") in climbing()


def test_no_file_level_import_cycle():
    assert cycles(_graph(top_level=False)) == []
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def main() -> int:
    arrows = climbing()
    folders = folder_arrows(arrows)
    print(f"folder-level arrows against the order: {len(folders)} "
          f"({', '.join(f'{a} -> {b}' for a, b in sorted(folders))}); "
          f"file-level imports against it: {len(arrows)}, listed: {len(arrows & EXCEPTIONS.keys())}")
    print(f"file-level import cycles (imports inside functions counted): {len(cycles(_graph(top_level=False)))}")
    print(f"modules over {LINES} lines: {len(long_modules())} {long_modules() or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
