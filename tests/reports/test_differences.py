"""reports/differences.py: who is compared with whom. A gated hybrid beside a softmax baseline
and the hybrid's own baseline was paired with the first run (the softmax one): its "gate effect"
mixed the gate with the architecture and the training budget."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from probe import reports
from probe.reports.differences import differences_notes, differences_table
from probe.reports.sections import build_sections
from tests.reports.saved_runs import S, write_per_sequence


def _run(source: Path, into: Path, name: str, arm: str, m_act: float, gated: bool, steps: int = 1000) -> Path:
    """A copy of a fixture run named `name`, an arm of one training recipe, on shared token ids,
    with per-sequence values around m_act."""
    run = Path(shutil.copytree(source, into / name))
    for file, changes in (("summary.json", {"model": name}),
                          ("meta.json", {"tokens_sha256": "0f1e2d3c4b5a6978",
                                         "train_recipe": {"arm": arm, "seed": 0, "steps": steps}})):
        data = json.loads((run / file).read_text())
        data.update(changes)
        (run / file).write_text(json.dumps(data))
    write_per_sequence(run, m_act=np.full(S, m_act) + np.arange(S) * 0.01, f_attn=0.3, gated=gated, seed=len(name))
    return run


@pytest.fixture
def softmax_and_hybrid_arms(run_dirs, tmp_path):
    """none (softmax, first), hybrid-none and hybrid-gated: the gated hybrid's matched baseline
    is hybrid-none, not the first run."""
    return [_run(run_dirs["baseline"], tmp_path, "none", "none", 50.0, False),
            _run(run_dirs["baseline"], tmp_path, "hybrid-none", "hybrid-none", 40.0, False),
            _run(run_dirs["headwise"], tmp_path, "hybrid-gated", "hybrid-gated", 10.0, True)]


def test_a_gated_model_is_paired_with_its_matched_baseline_not_the_first_run(softmax_and_hybrid_arms):
    runs = reports.load_runs(softmax_and_hybrid_arms)
    table = differences_table(runs)
    assert set(zip(table["model"], table["reference"])) == {("hybrid-gated", "hybrid-none")}
    m_act = table[table["quantity"] == "M-Act"].iloc[0]
    assert m_act["difference"] == pytest.approx(m_act["value"] - m_act["reference value"], rel=1e-12)
    assert m_act["reference value"] == pytest.approx(40.0 + 0.01 * (S - 1), rel=1e-9)   # hybrid-none's largest
    summary = next(s for s in build_sections(runs) if s.id == "summary")
    item = next(i for i in summary.items if i.id == "differences-table")
    assert item.title == "Paired differences: each gated model against its matched baseline"
    assert "minus its matched baseline" in item.caption


def test_runs_without_a_matched_pair_are_compared_with_the_first(softmax_and_hybrid_arms):
    none, hybrid_none, _ = softmax_and_hybrid_arms
    table = differences_table(reports.load_runs([none, hybrid_none]))   # two baselines: no pair
    assert set(zip(table["model"], table["reference"])) == {("hybrid-none", "none")}


def test_a_declared_pair_decides(softmax_and_hybrid_arms):
    runs = reports.load_runs(softmax_and_hybrid_arms)
    table = differences_table(runs, [("none", "hybrid-gated")])          # --pair none:hybrid-gated
    assert set(zip(table["model"], table["reference"])) == {("hybrid-gated", "none")}
    assert differences_notes(runs) == []


def test_a_gated_model_without_a_matched_baseline_is_named_not_paired_with_the_first(
        softmax_and_hybrid_arms, run_dirs, tmp_path):
    other = _run(run_dirs["headwise"], tmp_path, "elementwise-long", "elementwise", 20.0, True, steps=5000)
    runs = reports.load_runs([*softmax_and_hybrid_arms, other])
    table = differences_table(runs)
    assert set(zip(table["model"], table["reference"])) == {("hybrid-gated", "hybrid-none")}
    assert differences_notes(runs) == [
        "No paired differences for elementwise-long: no matched baseline among these runs (the claims say "
        "why; --pair BASE:GATED declares one)."]


def test_the_figures_and_tables_of_the_gate_s_effect_use_the_same_pairs(softmax_and_hybrid_arms):
    """claims.pairs.gate_pairs (the F-Attn-against-gate figure, its notes and the ablations'
    gated − ungated table): the matched pairs where there are any, else every same-token pair."""
    from probe.reports.claims.pairs import gate_pairs
    from probe.reports.runs import same_token_pairs

    runs = reports.load_runs(softmax_and_hybrid_arms)
    assert set(same_token_pairs(runs)) == {("none", "hybrid-gated"), ("hybrid-none", "hybrid-gated")}
    assert gate_pairs(runs) == [("hybrid-none", "hybrid-gated")]
    assert gate_pairs(runs, [("none", "hybrid-gated")]) == [("none", "hybrid-gated")]
    for run in softmax_and_hybrid_arms:                 # no recipe recorded: nothing is matched
        meta = json.loads((run / "meta.json").read_text())
        meta.pop("train_recipe")
        (run / "meta.json").write_text(json.dumps(meta))
    runs = reports.load_runs(softmax_and_hybrid_arms)
    assert gate_pairs(runs) == same_token_pairs(runs)
