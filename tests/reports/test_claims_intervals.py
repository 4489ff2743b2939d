"""Claims on matched pairs only (issue 25 item 1), decided with the 95% intervals (issue 21):
synthetic per_sequence.csv tables with a known spread over sequences, added to copies of the
fixture runs."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probe import reports
from probe.reports import claims
from probe.reports.claims.console import claims_text
from probe.reports.claims.pairs import NOT_COMPARABLE
from tests.reports.saved_runs import copy_runs  # noqa: F401  (the fixture)
from tests.reports.saved_runs import S, write_per_sequence


def arms_of_one_training(runs: dict[str, Path]) -> dict[str, Path]:
    """Record the same token ids and one training recipe (but the arm) in the copies' meta.json."""
    for name, run in runs.items():
        data = json.loads((run / "meta.json").read_text())
        data.update(tokens_sha256="0f1e2d3c4b5a6978", train_recipe={"arm": name, "seed": 0, "steps": 1000})
        (run / "meta.json").write_text(json.dumps(data))
    return runs


@pytest.fixture
def pair(run_dirs, tmp_path):
    def make(base_m_act, gated_m_act, f_attn=(0.5, 0.05)):
        out = {}
        for name, m, f in (("baseline", base_m_act, f_attn[0]), ("headwise", gated_m_act, f_attn[1])):
            out[name] = Path(shutil.copytree(run_dirs[name], tmp_path / name))
            write_per_sequence(out[name], m_act=m, f_attn=f, gated=name == "headwise", seed=len(out))
        return arms_of_one_training(out)
    return make


def row(table, claim):
    return table[table["claim"] == claim].iloc[0]


def test_a_clear_difference_is_consistent_and_its_interval_printed(pair):
    rng = np.random.default_rng(1)
    runs = pair(900 + rng.normal(0, 20, S), 90 + rng.normal(0, 5, S))
    table = reports.claims_table(*runs.values())
    for claim in (3, 4):
        r = row(table, claim)
        assert r["verdict"] == claims.CONSISTENT, r["these runs"]
        assert r["numbers"]["difference_lo"] > 0
        assert "paired bootstrap" in r["these runs"] and "[" in r["these runs"]


def test_a_small_drop_measured_precisely_removes_nothing(pair):
    """Claims 3-4 say the gate removes the sink and the massive activations: a 10% lower M-Act and
    F-Attn, with intervals well above zero, was "direction consistent with the paper"; it is
    below the rules' factor of 2 (the rule without intervals asked for it already)."""
    rng = np.random.default_rng(5)
    runs = pair(100 + rng.normal(0, 1, S), 90 + rng.normal(0, 1, S), f_attn=(0.5, 0.45))
    table = reports.claims_table(*runs.values())
    for claim in (3, 4):
        r = row(table, claim)
        assert r["numbers"]["difference_lo"] > 0, r["these runs"]          # the drop is not noise
        assert r["verdict"] == claims.BELOW_THRESHOLD, r["these runs"]
    assert "baseline ÷ gated ≥ 2 (a smaller drop: below the threshold)" in row(table, 4)["rule"]


def test_a_difference_inside_the_noise_is_within_noise(pair):
    rng = np.random.default_rng(2)
    noise = pair(500 + rng.normal(0, 200, S), 500 + rng.normal(0, 200, S))
    r = row(reports.claims_table(*noise.values()), 4)
    assert r["verdict"] == claims.WITHIN_NOISE and r["numbers"]["difference_lo"] < 0 < r["numbers"]["difference_hi"]


def test_a_gated_model_with_larger_activations_is_opposite(pair, tmp_path):
    rng = np.random.default_rng(3)
    runs = pair(100 + rng.normal(0, 5, S), 900 + rng.normal(0, 5, S))
    assert row(reports.claims_table(*runs.values()), 4)["verdict"] == claims.OPPOSITE


def test_claim_1_with_intervals(pair):
    rng = np.random.default_rng(4)
    runs = pair(900 + rng.normal(0, 5, S), 90 + rng.normal(0, 5, S))
    r = row(reports.claims_table(runs["headwise"]), 1)
    assert r["verdict"] == claims.CONSISTENT                   # mean gate 0.2, 40% below 0.1: every sequence
    assert "[0.2, 0.2]" in r["these runs"]


def test_pairs_on_other_token_ids_or_without_a_shared_origin_are_not_comparable(copy_runs):
    runs = arms_of_one_training(copy_runs("baseline", "headwise"))

    def meta(name, **changes):
        path = runs[name] / "meta.json"
        data = json.loads(path.read_text())
        data.update(changes)
        path.write_text(json.dumps(data))

    meta("headwise", tokens_sha256="other")
    r = row(reports.claims_table(*runs.values()), 4)
    assert r["verdict"] == f"{NOT_COMPARABLE}: not the same token ids (meta.json tokens_sha256)"
    assert "M-Act" in r["these runs"]
    text = claims_text(reports.claims_table(*runs.values()))
    assert "not comparable: not the same token ids" in text                       # and on the console

    meta("headwise", tokens_sha256=json.loads((runs["baseline"] / "meta.json").read_text())["tokens_sha256"],
         train_recipe=None)
    r = row(reports.claims_table(*runs.values()), 3)
    assert r["verdict"].startswith(f"{NOT_COMPARABLE}: not arms of one probe train run nor a graft")
    assert "--pair baseline:headwise" in r["verdict"]
    declared = reports.claims_table(*runs.values(), pairs=[("baseline", "headwise")])
    assert not row(declared, 4)["verdict"].startswith(NOT_COMPARABLE)

    # A graft names its base by the base's config hash (probe graft's record in config.json).
    meta("headwise", graft={"base": "elsewhere", "base_digest": "sha256:0123456789ab", "gate": "headwise"})
    assert not row(reports.claims_table(*runs.values()), 4)["verdict"].startswith(NOT_COMPARABLE)
    meta("headwise", graft={"base": "elsewhere", "base_digest": "sha256:feed", "gate": "headwise"})
    assert row(reports.claims_table(*runs.values()), 4)["verdict"].startswith(NOT_COMPARABLE)


def test_arms_of_one_training_run_pair_only_with_the_same_recipe(copy_runs):
    runs = arms_of_one_training(copy_runs("baseline", "headwise"))
    assert not row(reports.claims_table(*runs.values()), 4)["verdict"].startswith(NOT_COMPARABLE)
    path = runs["headwise"] / "meta.json"
    data = json.loads(path.read_text())
    data["train_recipe"] = {**data["train_recipe"], "seed": 7}
    path.write_text(json.dumps(data))
    assert row(reports.claims_table(*runs.values()), 4)["verdict"].startswith(NOT_COMPARABLE)


def test_a_qwen3_baseline_is_no_control_for_a_gated_hybrid(copy_runs):
    """The same recipe trains the Qwen3 arms and the hybrid arms: only arms of one set pair."""
    runs = arms_of_one_training(copy_runs("baseline", "headwise"))

    def arms(base, gated):
        for name, arm in (("baseline", base), ("headwise", gated)):
            data = json.loads((runs[name] / "meta.json").read_text())
            data["train_recipe"] = {**data["train_recipe"], "arm": arm}
            (runs[name] / "meta.json").write_text(json.dumps(data))
        return row(reports.claims_table(*runs.values()), 4)["verdict"]

    assert arms("none", "hybrid-gated").startswith(f"{NOT_COMPARABLE}: arms of one recipe but not of one matched set")
    assert not arms("hybrid-none", "hybrid-gated").startswith(NOT_COMPARABLE)
    assert not arms("none", "elementwise").startswith(NOT_COMPARABLE)


def test_a_declared_pair_must_name_a_baseline_then_a_gated_run(run_dirs):
    from probe.reports.claims.pairs import check_declared, parse_pairs
    from probe.reports.runs import load_runs

    runs = load_runs(list(run_dirs.values()))
    with pytest.raises(ValueError, match="give BASE:GATED"):
        parse_pairs(["baseline"])
    with pytest.raises(ValueError, match="baseline first"):
        check_declared(runs, [("headwise", "baseline")])
    with pytest.raises(ValueError, match="no run is named 'nope'"):
        check_declared(runs, [("nope", "headwise")])
    # one run named twice: it said "baseline is ungated; give the baseline first", which it was
    with pytest.raises(ValueError, match="names one run twice"):
        check_declared(runs, [("baseline", "baseline")])


def test_runs_without_token_ids_pair_only_when_declared(run_dirs):
    table = reports.claims_table(*run_dirs.values())
    assert row(table, 4)["verdict"].startswith(f"{NOT_COMPARABLE}: token ids not recorded")
    declared = reports.claims_table(*run_dirs.values(), pairs=[("baseline", "headwise")])
    assert not row(declared, 4)["verdict"].startswith(NOT_COMPARABLE)


def test_runs_without_per_sequence_values_say_so_and_keep_the_point_rules(run_dirs):
    table = reports.claims_table(*run_dirs.values(), pairs=[("baseline", "headwise"), ("baseline", "hybrid")])
    r = row(table, 4)
    assert r["verdict"] in (claims.CONSISTENT, claims.BELOW_THRESHOLD, claims.NOT_CONSISTENT)
    assert "[" not in r["these runs"]
    from probe.reports.runs import load_runs

    caption = claims.claims_caption(load_runs(list(run_dirs.values())))
    assert "No intervals for baseline, headwise, hybrid (no per_sequence.csv" in caption


def test_intervals_are_never_those_of_an_earlier_runs_object(pair, tmp_path, monkeypatch):
    """Runs objects come and go (each claims_table call reads its runs anew), and a new table of
    per-sequence values may sit where a freed one sat, at the same id(). Every table is given one
    id here, the worst case: the intervals must still be those of the runs passed."""
    from probe.reports.claims import intervals

    rng = np.random.default_rng(5)
    clear = pair(900 + rng.normal(0, 20, S), 90 + rng.normal(0, 5, S))
    noisy = {}
    for name, path in clear.items():                 # the same models, per-sequence values in the noise
        noisy[name] = Path(shutil.copytree(path, tmp_path / "noisy" / name))
        write_per_sequence(noisy[name], m_act=500 + rng.normal(0, 200, S), f_attn=0.5 if name == "baseline"
                           else 0.05, gated=name == "headwise", seed=7)
    monkeypatch.setattr(intervals, "_CACHE", {})
    monkeypatch.setattr(intervals, "id", lambda obj: 0, raising=False)    # every table at one address
    for dirs, verdict in ((clear, claims.CONSISTENT), (noisy, claims.WITHIN_NOISE), (clear, claims.CONSISTENT)):
        assert row(reports.claims_table(*dirs.values()), 4)["verdict"] == verdict
