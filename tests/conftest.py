"""Shared fixtures: tiny checkpoints built from configs and saved to disk, once per session.

tests/ is a package (the repository root is pytest's rootdir, so `tests` imports as any
package): shared helpers sit in modules named for what they build (tests/tiny.py: tiny
checkpoints; tests/reports/saved_runs.py: saved run directories; tests/test_real_models.py's
real models come from probe.load.real_models) and are imported by name, `from tests import tiny`."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Reports draw their figures here, serially: the suite already runs one process per core, and a
# forked pool per report would only add forks (tests/reports/test_parallel.py runs the pool).
os.environ.setdefault("PROBE_REPORT_WORKERS", "1")
# One thread per process when pytest-xdist runs the suite in several (make test: one per core).
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, torch.get_num_threads()))

from tests import portable_random

# The tiny models' weights must have the same bits on every CPU (their fingerprints are gold).
portable_random.install()

from tests import tiny
from tests.samples import BASELINES, GATED, TEXT  # noqa: F401
from probe.api import collector

# A test process's full collections walked every object that torch, transformers and matplotlib
# leave behind their imports (8% of tests/metrics' time): imported and frozen once here, they are
# skipped from then on. What a test creates is collected as usual.
collector.import_frozen(collector.MODEL_STACK + collector.REPORT_STACK)


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
