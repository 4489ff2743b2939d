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


def test_missing_weights_come_back_from_the_cache_with_their_recorded_digest(tmp_path, monkeypatch):
    """examples/checkpoints/weights.py: an arm without model.safetensors gets the cached file whose
    name is its recorded SHA-256 (the weights are not in git); a present, matching one is kept."""
    import importlib.util
    import shutil

    spec = importlib.util.spec_from_file_location("arm_weights", ROOT / "examples" / "checkpoints" / "weights.py")
    weights = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(weights)
    arms = tmp_path / "checkpoints"
    cache = tmp_path / "cache"
    cache.mkdir()
    arms.mkdir()
    shutil.copy(ROOT / "examples" / "checkpoints" / "weights.sha256", arms)
    for arm, digest in weights.recorded().items():
        (arms / arm).mkdir()
        shutil.copy(ROOT / "examples" / "checkpoints" / arm / "model.safetensors", cache / f"{digest}.safetensors")
    monkeypatch.setattr(weights, "HERE", arms)
    monkeypatch.setenv("PROBE_ARMS_CACHE", str(cache))
    weights.ensure()
    for arm, digest in weights.recorded().items():
        assert weights.sha256(arms / arm / "model.safetensors") == digest
