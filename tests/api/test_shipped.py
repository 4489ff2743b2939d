"""probe.shipped_checkpoints: the demo arms from anywhere, or one line saying where to point."""
from __future__ import annotations

from pathlib import Path

import pytest

import probe

ROOT = Path(__file__).resolve().parents[2]


def test_the_arms_are_found_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PROBE_CHECKPOINTS", raising=False)
    found = probe.shipped_checkpoints()
    assert found.resolve() == ROOT / "examples" / "checkpoints"
    assert {p.name for p in found.iterdir() if p.is_dir()} >= {"none", "headwise", "elementwise"}


def test_a_wrong_override_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBE_CHECKPOINTS", str(tmp_path))
    with pytest.raises(probe.ProbeError, match="does not hold the arms none, headwise, elementwise"):
        probe.shipped_checkpoints()
