"""reports/seeds.py: runs that differ only in seed shown as the mean over seeds with a t interval,
per-seed values beside it, seed and sequence spreads apart."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from probe.intervals.bootstrap import t_quantile
from probe.reports.seeds import parse_groups, seed_groups, seed_table
from probe.reports.runs import load_runs
from tests.reports.saved_runs import S, write_per_sequence


@pytest.fixture
def seeds(run_dirs, tmp_path):
    """Three copies of the headwise run, seeds 0-2 of one recipe, with their own M-Act."""
    out = []
    for seed, m_act in enumerate((90.0, 100.0, 120.0)):
        run = Path(shutil.copytree(run_dirs["headwise"], tmp_path / f"s{seed}"))
        for name, change in (("meta.json", {"name": f"headwise-s{seed}",
                                            "train_recipe": {"arm": "headwise", "seed": seed, "steps": 1000}}),
                             ("summary.json", {"model": f"headwise-s{seed}", "m_act": m_act})):
            data = json.loads((run / name).read_text())
            data.update(change)
            (run / name).write_text(json.dumps(data))
        write_per_sequence(run, m_act=m_act + np.random.default_rng(seed).normal(0, 3, S), f_attn=0.05,
                           gated=True, seed=seed)
        out.append(run)
    return out


def test_runs_of_one_recipe_but_the_seed_are_one_group(seeds, run_dirs):
    runs = load_runs([*seeds, run_dirs["baseline"]])
    assert seed_groups(runs) == {"headwise": ["headwise-s0", "headwise-s1", "headwise-s2"]}


def test_the_group_is_the_mean_over_seeds_with_a_t_interval_and_both_spreads(seeds):
    table = seed_table(seeds)
    row = table[table["quantity"] == "M-Act"].iloc[0]
    values = [90.0, 100.0, 120.0]
    assert row["mean"] == pytest.approx(np.mean(values))
    assert row["seed_sd"] == pytest.approx(np.std(values, ddof=1))
    assert row["hi"] - row["mean"] == pytest.approx(t_quantile(0.975, 2) * np.std(values, ddof=1) / math.sqrt(3))
    assert row["per_seed"] == dict(zip(["headwise-s0", "headwise-s1", "headwise-s2"], values))
    # Within a seed: the bootstrap spread of one run's maximum, far below the spread between seeds.
    assert 0 < row["sequence_sd"] < row["seed_sd"] / 3


def test_a_group_the_user_names(seeds):
    runs = load_runs(seeds)
    groups = parse_groups(["mine:headwise-s0,headwise-s2"])
    assert seed_table(runs, groups)["seeds"].iloc[0] == 2
    with pytest.raises(ValueError, match="NAME:RUN,RUN"):
        parse_groups(["mine:headwise-s0"])
    with pytest.raises(ValueError, match="no run is named 'x'"):
        seed_groups(runs, {"g": ["x", "headwise-s0"]})
