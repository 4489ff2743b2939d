"""Synthetic run directories, written per docs/run-directory.md with seeded numbers.

Three runs cover the cases a report must survive:
- `baseline`: 4 attention layers, no gate, a sink, a training log; F-Attn by position bucket,
  interventions (only `none` and `massive_zero`, as for any baseline) and inference.csv.
- `headwise`: 4 attention layers, headwise gate, no training log, no attention patterns; gate
  scores by token type (built-in types only) and F-Attn by position bucket; no interventions.
- `hybrid`: 6 layers of which 0-2 and 4 are linear attention (Qwen3-Next style), elementwise
  gate, a training log; tokens that need escaping ("$", "<b>", a newline); gate scores by token
  type with a user group, all interventions; no position buckets, no inference.csv.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tests.reports.saved_runs import DISPLAY_TOKENS, RunSpec, write_run


SPECS = (
    RunSpec("baseline", 4, 4, (), "none", 0.55, 900.0, training=True, patterns=True,
            interventions=True, buckets=True, inference=True),
    RunSpec("headwise", 4, 4, (), "official_headwise", 0.08, 90.0, training=False,
            patterns=False, token_types=True, buckets=True),
    RunSpec("hybrid", 6, 4, (0, 1, 2, 4), "qwen3_next", 0.05, 60.0, training=True,
            patterns=True, token_types=True, interventions=True),
)


@pytest.fixture(scope="session")
def run_dirs(tmp_path_factory) -> dict[str, Path]:
    """name -> run directory, for all three synthetic runs."""
    root = tmp_path_factory.mktemp("runs")
    return {spec.name: write_run(root, spec, seed) for seed, spec in enumerate(SPECS)}


@pytest.fixture(scope="session")
def all_runs(run_dirs):
    from probe import reports

    return reports.load_runs(list(run_dirs.values()))


@pytest.fixture(scope="session")
def specs() -> dict[str, RunSpec]:
    return {spec.name: spec for spec in SPECS}


@pytest.fixture(scope="session")
def display_tokens() -> list[str]:
    return list(DISPLAY_TOKENS)


@pytest.fixture(scope="session")
def generated_at() -> datetime:
    """The report timestamp of `built_report` (the one part of a report that may change)."""
    return datetime(2026, 11, 2, 8, 30, tzinfo=timezone.utc)


@pytest.fixture(scope="session")
def built_report(run_dirs, generated_at, tmp_path_factory) -> dict[str, Path]:
    """report.html and report.pdf of all three runs, built once for the HTML and PDF tests."""
    from probe import reports

    out = tmp_path_factory.mktemp("report")
    return reports.build_report(list(run_dirs.values()), out, generated_at=generated_at)
