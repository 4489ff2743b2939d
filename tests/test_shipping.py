"""The project as shipped: the Makefile installs once; no file names a path of the machine it was made on."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_installs_the_package_once(tmp_path):
    """With a venv in place and the package installed after pyproject.toml last changed, `make
    test` only runs the tests (dry run: the commands make would run)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for tool in ("python", "pip"):
        (venv / "bin" / tool).touch(mode=0o755)

    def would_run(target):
        done = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    first = would_run("test")
    assert "install -q -e '.[test]'" in first                 # a fresh venv: install once
    stamp = venv / ".probe-installed"
    stamp.touch()
    newer = (ROOT / "pyproject.toml").stat().st_mtime + 1
    os.utime(stamp, (newer, newer))
    again = would_run("test")
    assert "pip install" not in again and "pytest" in again
    assert "pip install" not in would_run("demo")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_first_make_prints_no_editable_installation_notice(tmp_path):
    """The Makefile's install command, run as written (with --no-deps --no-build-isolation into a
    scratch venv, so that it needs no network), prints nothing: setuptools' "Editable
    installation" block used to end the first `make`. --ignore-installed: without it pip
    uninstalls this venv's own editable install of the project before installing into the prefix."""
    import site
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    dry = subprocess.run(["make", "-n", "-C", str(ROOT), "setup", f"VENV={venv}"], capture_output=True,
                         text=True, timeout=30).stdout
    line = next(line for line in dry.splitlines() if "install -q -e" in line)
    command = line.replace(f"{venv}/bin/pip", f"{sys.executable} -m pip").replace(
        "install -q -e '.[test]'", f"install -q --no-deps --no-build-isolation --ignore-installed --prefix {tmp_path / 'prefix'} "
        f"-e {ROOT}")
    # This interpreter's setuptools builds it (no build isolation: nothing is downloaded).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(site.getsitepackages())}
    done = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Editable installation" not in done.stdout + done.stderr
    assert not (done.stdout + done.stderr).strip(), done.stdout + done.stderr


MACHINE_PATHS = re.compile(r"(?<![\w.])/(?:work|home|root|Users|tmp)/")


def test_nothing_shipped_carries_a_path_of_the_machine_it_was_made_on():
    """Shipped text (code, docs, notebooks, the checkpoints' configs and logs) names no path of
    the machine it was made on (/work/..., /tmp/..., /home/...); commands use relative folders."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, timeout=30)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    found = []
    for name in files.stdout.splitlines():
        path = ROOT / name
        if name == "tests/test_shipping.py" or not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:                        # weights and other binaries
            continue
        found += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if MACHINE_PATHS.search(line)]
    assert not found, found
