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


def test_the_tracked_weights_are_the_recorded_ones():
    """The demo's documented numbers were made with these exact bits (retraining does not give
    them back), so every tracked model.safetensors must match the SHA-256 weights.sha256 records."""
    import hashlib

    folder = ROOT / "examples" / "checkpoints"
    lines = [line.split() for line in (folder / "weights.sha256").read_text().splitlines() if line.strip()]
    assert {name.split("/")[0] for _, name in lines} == {"none", "headwise", "elementwise", "hybrid-none",
                                                         "hybrid-gated"}
    for digest, name in lines:
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


def test_missing_weights_say_how_to_restore_them(tmp_path, monkeypatch):
    """A checkout whose arms have configs but no weights (a filtered clone) gets one line."""
    import shutil

    from probe.api import shipped

    for arm in ("none", "headwise", "elementwise"):
        (tmp_path / "checkpoints" / arm).mkdir(parents=True)
        shutil.copy(ROOT / "examples" / "checkpoints" / arm / "config.json", tmp_path / "checkpoints" / arm)
    monkeypatch.chdir(tmp_path)
    # Not beside an installed source tree: the search falls through to ./checkpoints.
    monkeypatch.setattr(shipped, "__file__", str(tmp_path / "site" / "probe" / "shipped.py"))
    monkeypatch.delenv("PROBE_CHECKPOINTS", raising=False)
    with pytest.raises(probe.ProbeError, match="no model.safetensors; they are tracked in git"):
        probe.shipped_checkpoints()
