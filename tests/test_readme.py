"""The README as a user meets it: every code block runs as written, and its layout section is
the repository's tree.

Python blocks run top to bottom in one fresh interpreter; bash blocks run line by line with
`bash -e`. Both run in a scratch folder that holds `examples` (a link to the repository's), as
a user's clone would, with this tree's probe first on the path. The rule for what is not run:
a bash block with a line that starts with `make`, `pip`, `git` or `torchrun` (installs, the
make targets that CI runs itself, several processes) is skipped, and the test says which.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SKIPPED_COMMANDS = ("make", "pip", "git", "torchrun")


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def runnable(block: str) -> bool:
    return not any(line.split(" ", 1)[0] in SKIPPED_COMMANDS for line in block.splitlines())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("readme")
    (folder / "examples").symlink_to(ROOT / "examples")
    # `probe` as the package's console script runs it (`pip install` makes one; this venv may
    # hold another checkout's, or none): this interpreter, this tree's package.
    shim = folder / "bin" / "probe"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m probe "$@"\n')
    shim.chmod(0o755)
    return folder


def _env(workdir: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "PATH": os.pathsep.join([str(workdir / "bin"), os.environ.get("PATH", "")]), "MPLBACKEND": "Agg",
            "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def test_the_readme_has_code_to_run():
    assert blocks("python") and [b for b in blocks("bash") if runnable(b)]
    # What is skipped is only what the rule names (the install and make lines).
    skipped = [b for b in blocks("bash") if not runnable(b)]
    assert all(any(line.split(" ", 1)[0] in SKIPPED_COMMANDS for line in b.splitlines()) for b in skipped)


@pytest.mark.parametrize("index", range(len(blocks("bash"))))
def test_bash_blocks_run_as_written(index, workdir):
    block = blocks("bash")[index]
    if not runnable(block):
        pytest.skip(f"bash block {index} installs or runs make targets ({', '.join(SKIPPED_COMMANDS)})")
    done = subprocess.run(["bash", "-e", "-c", block], cwd=workdir, env=_env(workdir), capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"{block}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_blocks_run_as_written(index, workdir):
    block = blocks("python")[index]
    done = subprocess.run([sys.executable, "-c", block], cwd=workdir, env=_env(workdir), capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"{block}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def layout_entries() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Layout"):]
    body = re.search(r"```\n(.*?)```", section, re.S).group(1)
    return [line.split()[0] for line in body.splitlines() if line.strip()]


def test_the_layout_section_is_the_tree():
    """Every entry of the README's layout exists, and every top-level folder of the repository
    that git tracks is listed."""
    entries = layout_entries()
    assert entries, "the README has no layout block"
    missing = [entry for entry in entries if not (ROOT / entry.rstrip("/")).exists()]
    assert not missing, f"the README's layout names what does not exist: {missing}"
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, timeout=30)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    folders = {name.split("/", 1)[0] + "/" for name in tracked.stdout.splitlines()
               if "/" in name and not name.startswith(".")}
    unlisted = sorted(folders - set(entries))
    assert not unlisted, f"top-level folders missing from the README's layout: {unlisted}"
