"""The docs (README.md, docs/*.md) name files, modules and functions that exist: a module that
moved or a function that was renamed leaves no stale reference behind."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("probe", "reports", "tests", "benchmarks", "examples")


def _stale(doc: Path) -> list[str]:
    """References in `doc` to a missing file, or to a name its file does not hold."""
    sources = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    found = []
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        where = f"{doc.name}:{n}"
        for path in re.findall(r"\b((?:%s)/[\w/]+\.py)\b" % "|".join(PACKAGES), line):
            if not (ROOT / path).is_file():
                found.append(f"{where}: {path} does not exist")
        # `file.py` `name` or file.py (`name`): the name must be in that file.
        for file, name in re.findall(r"([\w/]+\.py)`?[ ,(]+`(\w+)`", line):
            files = [p for p in sources if p.as_posix().endswith("/" + file.lstrip("/"))]
            if not files:
                found.append(f"{where}: no file {file}")
            elif not any(re.search(rf"\b{name}\b", p.read_text()) for p in files):
                found.append(f"{where}: {file} has no {name}")
        # `probe.module.NAME` (not `reports.plot_*`): the module exists and holds the name.
        for dotted in re.findall(r"`((?:probe|reports)\.[\w.]+)(?![\w*])", line):
            *module, name = dotted.split(".")
            base = ROOT.joinpath(*module)
            file = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
            if file is not None and not re.search(rf"\b{name}\b", file.read_text()):
                found.append(f"{where}: {'.'.join(module)} has no {name}")
    return found


def test_the_docs_name_only_what_exists():
    assert [s for doc in DOCS for s in _stale(doc)] == []


def test_a_stale_reference_is_found(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("Written by `probe.analyze` (analyze.py `build_meta`), see probe/families.py and "
                   "`probe.results.analysis.FRAMES`; pipeline.py `build_meta` is right.\n")
    assert _stale(doc) == ["doc.md:1: probe/families.py does not exist", "doc.md:1: analyze.py has no build_meta",
                           "doc.md:1: probe.results.analysis has no FRAMES"]
