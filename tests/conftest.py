"""Shared fixtures: tiny checkpoints built from configs and saved to disk, once per session."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
# Tests of one part import helpers from another part's tests (test_resume's interrupt, test_cli's
# error reader): every part's folder is importable, so a file runs alone as in the whole suite.
sys.path[1:1] = [str(p) for p in sorted(Path(__file__).parent.iterdir())
                 if p.is_dir() and not (p / "__init__.py").exists() and any(p.glob("test_*.py"))]
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(min(2, torch.get_num_threads()))

import portable_random  # noqa: E402

# The tiny models' weights must have the same bits on every CPU (their fingerprints are gold).
portable_random.install()

import tiny  # noqa: E402

from samples import BASELINES, GATED, TEXT  # noqa: E402,F401


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """checkpoint(kind) -> path of a saved tiny checkpoint of that family (built once)."""
    root = tmp_path_factory.mktemp("checkpoints")
    made: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in made:
            made[kind] = tiny.make_checkpoint(kind, root / kind)
        return made[kind]
    return get


@pytest.fixture(scope="session")
def loaded(checkpoint):
    """loaded(kind) -> probe.load(...) result, cached."""
    import probe

    cache = {}

    def get(kind: str):
        if kind not in cache:
            cache[kind] = probe.load(checkpoint(kind))
        return cache[kind]
    return get


@pytest.fixture(scope="session")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "sample.txt"
    path.write_text(TEXT)
    return path
