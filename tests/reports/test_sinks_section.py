"""The report's "What the sink does" section (reports/sections/sinks.py) and claim 5
(reports/claims/sink_need.py), on tiny gated and ungated runs with sink ablations."""
from __future__ import annotations

import math

import pytest

import probe
from probe import reports
from probe.reports.claims import sink_need
from probe.reports.runs import load_runs
from probe.reports.sections import build_sections
from probe.reports.sections.sinks import plot_sink_ablations
from tests.samples import TEXT


@pytest.fixture(scope="module")
def runs(checkpoint):
    out = []
    for kind, name in (("official_baseline", "baseline"), ("official_headwise", "headwise")):
        out.append(probe.analyze(checkpoint(kind), texts=[TEXT], seq_len=24, max_sequences=4, name=name,
                                 ablate="windows=4 sinks=0,1 key0", resamples=100, progress=False))
    return load_runs(out)


def test_the_figure_has_a_row_per_family_a_panel_per_model_and_the_f_attn_panel(runs):
    from probe.reports.sections.sinks import ablation_families

    families = ablation_families(runs.ablations)
    assert [f for f, _ in families] == ["windows", "windows + sinks", "key 0"]
    assert [names for _, names in families] == [["window 4"], ["window 4 + 1 sink"], ["key 0 masked"]]
    fig = plot_sink_ablations(runs)
    axes = fig.get_axes()
    # per family: a panel per model and the legend's cell; then the F-Attn column
    assert len(axes) == 3 * (2 + 1) + 1 and axes[-1].get_xlabel() == "F-Attn under the ablation"
    positions = runs.ablation_positions
    for row, (family, names) in enumerate(families):
        panels = axes[3 * row:3 * row + 2]
        assert family in panels[0].get_ylabel()
        assert panels[0].get_ylim() == panels[1].get_ylim()          # one y scale per row
        for panel, model in zip(panels, ["baseline", "headwise"]):
            lines = panel.get_lines()
            assert len(lines) == len(names) + 1                      # + the zero line
            want = positions.query("model == @model and ablation == @names[0]").sort_values("bucket_lo")
            assert list(lines[0].get_ydata()) == list(want["delta_loss"])   # drawn at its Δ loss
        legend = axes[3 * row + 2].get_legend()
        assert [t.get_text() for t in legend.get_texts()] == names


def test_the_section_and_its_table(runs):
    section = next(s for s in build_sections(runs) if s.id == "sinks")
    assert section.omitted is None
    table = section.items[1].frame
    assert len(table) == len(runs.ablations) == 6


def test_claim_5_reads_the_key_0_ablation_of_the_gated_model(runs):
    # Two tiny checkpoints of one family, declared a pair (as --pair BASE:GATED): its baseline beside it.
    table = reports.claims_table(runs, pairs=[("baseline", "headwise")])
    row = table[table["claim"] == 5].iloc[0]
    alone = reports.claims_table(runs)                      # not a matched pair: no baseline named
    assert "baseline" not in alone[alone["claim"] == 5]["these runs"].iloc[0]
    assert row["models"] == "headwise" and "baseline (its baseline, no gate)" in row["these runs"]
    r = runs.ablations.query("model == 'headwise' and kind == 'key0_mask'").iloc[0]
    lo, hi = r.delta_lo, r.delta_hi
    assert math.isfinite(lo)
    want = ("direction consistent" if -sink_need.NEGLIGIBLE < lo and hi < sink_need.NEGLIGIBLE
            else "opposite" if lo > sink_need.NEGLIGIBLE else "within noise")
    assert row["verdict"].startswith(want)


def test_without_ablations_the_section_is_left_out_and_claim_5_has_no_row(checkpoint):
    plain = load_runs(probe.analyze(checkpoint("official_headwise"), texts=[TEXT], seq_len=24, max_sequences=2,
                                    progress=False))
    assert next(s for s in build_sections(plain) if s.id == "sinks").omitted
    assert 5 not in set(reports.claims_table(plain)["claim"])


def test_the_section_shows_the_gated_against_ungated_table(runs):
    """The pairing itself is tests/reports/test_ablation_pairs.py; here: the section shows it whole."""
    from probe.reports.ablation_pairs import between_models

    section = next(s for s in build_sections(runs) if s.id == "sinks")
    assert section.items[-1].title == "Gated against ungated, the same sequences"
    assert len(section.items[-1].frame) == len(between_models(runs)) > 0
