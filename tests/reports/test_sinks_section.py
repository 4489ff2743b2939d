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


def test_the_figure_has_a_panel_per_model_and_the_f_attn_panel(runs):
    fig = plot_sink_ablations(runs)
    axes = fig.get_axes()
    assert len(axes) == 3 and axes[-1].get_xlabel() == "F-Attn under the ablation"
    # one line per ablation in each model's panel, drawn at its Δ loss
    assert len(axes[0].get_lines()) == 3 + 1                       # + the zero line


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


def test_gated_against_ungated_pairs_the_same_sequences(runs):
    """The difference of the two models' loss changes: each Δ equals ablations.csv's (1e-12, the
    same float64 sums pooled), the reading follows the paired interval, and the table is shown."""
    from probe.reports.sections.sinks import between_models

    frame = between_models(runs)
    assert list(frame.ablation) == list(dict.fromkeys(runs.ablations.ablation))
    assert set(zip(frame.ungated, frame.gated)) == {("baseline", "headwise")}
    deltas = runs.ablations.set_index(["model", "ablation"])["delta_loss"]
    for r in frame.itertuples():
        assert abs(r.delta_gated - deltas[("headwise", r.ablation)]) <= 1e-12
        assert abs(r.delta_ungated - deltas[("baseline", r.ablation)]) <= 1e-12
        assert abs(r.difference - (r.delta_gated - r.delta_ungated)) <= 1e-12
        assert r.lo <= r.difference <= r.hi
        assert (r.reading == "no measurable difference") == (r.lo <= 0 <= r.hi)
    section = next(s for s in build_sections(runs) if s.id == "sinks")
    assert section.items[-1].title == "Gated against ungated, the same sequences"
    assert len(section.items[-1].frame) == len(frame)


def test_a_massive_ablation_on_other_layers_in_each_model_is_not_compared(runs):
    """'massive zeroed (where they appear)' in the first layer that has any (ablations.csv layer):
    another layer in each model is another intervention, so the pair reads 'not comparable',
    naming both."""
    import copy

    from probe.reports.sections.sinks import between_models

    other = copy.deepcopy(runs)
    ab = other.tables["ablations"]
    name = ab.ablation.iloc[0]
    ab.loc[ab.ablation == name, "kind"] = "massive_zero"
    ab.loc[(ab.ablation == name) & (ab.model == "baseline"), "layer"] = 11
    ab.loc[(ab.ablation == name) & (ab.model == "headwise"), "layer"] = 2
    frame = between_models(other)
    assert frame.set_index("ablation").loc[name, "reading"] == "not comparable: layer 2 against layer 11"
    assert (frame[frame.ablation != name].reading != "").all()


def test_a_massive_ablation_that_changed_other_sequences_is_not_compared(runs):
    """A sequence whose activations stay below the threshold is left as it was (nll == base_nll):
    where the sequences changed differ between the two models, the pair reads 'not comparable'."""
    import copy

    from probe.reports.sections.sinks import between_models

    other = copy.deepcopy(runs)
    ab, seqs = other.tables["ablations"], other.tables["ablation_sequences"]
    name = ab.ablation.iloc[0]
    ab.loc[ab.ablation == name, "kind"] = "massive_zero"
    untouched = (seqs.ablation == name) & (seqs.model == "headwise") & (seqs.sequence == 0)
    seqs.loc[untouched, "nll"] = seqs.loc[untouched, "base_nll"]
    frame = between_models(other).set_index("ablation")
    assert frame.loc[name, "reading"] == ("not comparable: it changed sequences 1, 2, 3 of the gated model, "
                                          "0, 1, 2, 3 of the ungated")
