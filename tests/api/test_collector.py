"""probe/api/collector.py: the `probe` process imports its stack with the collector off, freezes
it, and freezes the rest before exit; main() called in-process leaves the collector alone."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from probe.api import collector
from probe.api.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, stack", [
    (["analyze", "ckpt"], collector.MODEL_STACK),
    (["analyze", "ckpt", "--report", "html"], collector.MODEL_STACK + collector.REPORT_STACK),
    (["compare", "a", "b", "--out", "o"], collector.MODEL_STACK + collector.REPORT_STACK),
    (["compare", "a", "b", "--out", "o", "--format", ""], collector.MODEL_STACK),
    (["check", "ckpt"], collector.MODEL_STACK),
    (["report", "run", "--out", "o"], collector.REPORT_STACK),
    (["view", "run", "--out", "o.html"], ()),
])
def test_each_command_imports_the_stack_it_will_use(argv, stack):
    assert collector.stack_of(build_parser().parse_args(argv)) == stack


def test_main_in_process_leaves_the_collector_alone(tmp_path, capsys, monkeypatch):
    """A test, a notebook or examples/demo.py calls main(): freezing there would keep the caller's
    reference cycles alive for good. (The freeze count alone cannot tell: frozen objects that die
    during the command lower it.)"""
    calls = []
    monkeypatch.setattr(collector.gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(collector.gc, "disable", lambda: calls.append("disable"))
    frozen = gc.get_freeze_count()
    assert main(["analyze", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert calls == [] and gc.get_freeze_count() <= frozen and gc.isenabled()
    assert "has no config.json" in capsys.readouterr().err


def test_python_m_probe_freezes_the_model_stack_and_exits_with_one_line(tmp_path):
    """`python -m probe analyze FOLDER` of a folder without config.json (it fails only after the
    model stack has loaded): the stack (~400k objects) is imported without a full collection and
    frozen, the collector is back on, everything is frozen by the time the interpreter exits, and
    the error is still one line with exit status 2."""
    code = ("import atexit, gc, runpy, sys\n"
            "full = []\n"
            "gc.callbacks.append(lambda phase, info: phase == 'stop' and full.append(info['generation'] == 2))\n"
            "atexit.register(lambda: print(gc.get_freeze_count(), len(gc.get_objects()), gc.isenabled(),\n"
            "                              'transformers' in sys.modules, sum(full)))\n"
            f"sys.argv = ['probe', 'analyze', {str(tmp_path)!r}, '--out', {str(tmp_path / 'out')!r}]\n"
            "runpy.run_module('probe', run_name='__main__', alter_sys=True)\n")
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "has no config.json" in done.stderr
    frozen, alive, enabled, imported, full_collections = done.stdout.split()
    assert int(frozen) > 100_000 and imported == "True" and enabled == "True"
    assert full_collections == "0"     # six while torch and transformers import, collector on
    assert int(alive) < 1_000          # what the exit's full collection would still walk
