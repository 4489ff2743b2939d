"""The import graph of probe/ and reports/ (the package probe.reports), from an AST walk of every
import statement: module -> the modules it imports, at import time only or counting the imports
inside functions too. tests/test_imports.py (no cycle, the sources apart) and tests/test_layers.py
(the floors' order) read the same walk."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    found = {}
    for package in ("probe", "reports"):
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            parts = ["probe", *parts] if package == "reports" else parts      # reports/ is probe.reports
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules, *, top_level: bool) -> set[str]:
    """The modules of `modules` that `name` imports (only at module level when top_level), with
    the packages they sit in (Python runs a package's __init__ before its module); a package
    `name` itself sits in is left out (Python imports it first whatever the module does)."""
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
        for c in candidates:
            out |= {p for p in _packages_of(c) if p in modules and p != name and not name.startswith(p + ".")}
    return out


def _packages_of(module: str) -> list[str]:
    """`module` and every package above it: a.b.c -> [a, a.b, a.b.c]."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


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


@functools.cache
def _graph(*, top_level: bool) -> dict[str, frozenset[str]]:
    """module -> what it imports (parsed once per session: every test here reads the same tree)."""
    modules = _modules()
    return {m: frozenset(_imports(m, p, modules, top_level=top_level)) for m, p in modules.items()}
