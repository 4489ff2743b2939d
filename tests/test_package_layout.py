"""The layout a newcomer reads: probe/ in parts, the report layer as probe.reports (its folder at
the top of the repository), the tests mirroring the parts, and a package that ships that way.

probe.reports from a source checkout comes from probe/__init__.py's finder; from an install,
from pyproject's package-dir. The top-level name `reports` is refused: the folder would
otherwise import a second time under it (reports.runs beside probe.reports.runs)."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# probe/'s own files; every other module sits in a part (a subpackage). The three pending ones
# go into probe/metrics/ with the metric declarations (docs/redesign-plan.md, step 1).
ROOT_MODULES = {"__init__.py", "__main__.py"}


def _python(code: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_probe_reports_is_the_folder_reports_imported_once():
    import probe.reports
    import probe.reports.runs

    assert Path(probe.reports.__file__) == ROOT / "reports" / "__init__.py"
    assert probe.reports.Runs is probe.reports.runs.Runs
    assert not [m for m in sys.modules if m == "reports" or m.startswith("reports.")]


def test_the_old_top_level_name_is_refused_in_one_line():
    done = _python("import reports")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: the report layer is probe.reports now: `from probe import reports` "
        "(the top-level `reports` package was removed)")


def _tree_packages() -> set[str]:
    found = set()
    for top in ("probe", "reports"):
        for init in (ROOT / top).rglob("__init__.py"):
            parts = list(init.parent.relative_to(ROOT).parts)
            found.add(".".join(["probe", *parts] if top == "reports" else parts))
    return found


def test_pyproject_lists_every_package_of_the_tree():
    tomllib = pytest.importorskip("tomllib")
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"probe.reports": "reports"}
    assert sorted(setuptools["packages"]) == sorted(_tree_packages())


def test_probe_holds_parts_not_a_flat_room():
    loose = {p.name for p in (ROOT / "probe").glob("*.py")} - ROOT_MODULES
    assert not loose, f"modules at probe/'s top (put each in its part): {sorted(loose)}"


def test_the_tests_mirror_the_parts():
    """tests/<part>/ for a part of probe (probe/<part>/) or the report layer (tests/reports/)."""
    parts = {p.name for p in (ROOT / "probe").iterdir() if (p / "__init__.py").is_file()} | {"reports"}
    folders = {p.name for p in (ROOT / "tests").iterdir()
               if p.is_dir() and any(p.glob("test_*.py"))}
    assert folders <= parts, folders - parts


def test_the_wheel_ships_probe_reports_and_no_top_level_reports(tmp_path):
    """Built from a copy of what the wheel needs (setuptools writes build/ beside the sources),
    with this interpreter's setuptools: nothing is downloaded."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((ROOT / name).read_bytes())
    for top in ("probe", "reports"):
        for path in (ROOT / top).rglob("*.py"):
            target = src / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel, = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "probe/reports/__init__.py" in names and "probe/reports/plots/__init__.py" in names
    assert "probe/reports/sections/__init__.py" in names and "probe/api/cli.py" in names
    assert not [n for n in names if n.startswith("reports/")]
    shipped = {n for n in names if n.endswith(".py") and not n.startswith("gated_probe")}
    expected = {p.relative_to(ROOT).as_posix() for top in ("probe", "reports") for p in (ROOT / top).rglob("*.py")}
    assert shipped == {("probe/" + n if n.startswith("reports/") else n) for n in expected}
