"""Gated against ungated under the same sink ablation (reports/ablation_pairs.py): the difference
of two models' Δloss with its paired interval, as the report's table and as `probe compare` /
`probe report` print it (probe/api/ablation_console.py), on tiny gated and ungated runs."""
from __future__ import annotations

import re

import pytest

import probe
from probe.api.ablation_console import between_lines
from probe.api.cli import main
from probe.reports.ablation_pairs import between_models
from probe.reports.runs import load_runs
from tests.samples import TEXT


@pytest.fixture(scope="module")
def run_dirs(checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("ablation-pairs")
    return [probe.analyze(checkpoint(kind), texts=[TEXT], seq_len=24, max_sequences=4, name=name,
                          ablate="windows=4 sinks=0,1 key0", resamples=100, progress=False).save(root / name)
            for kind, name in (("official_baseline", "baseline"), ("official_headwise", "headwise"))]


@pytest.fixture(scope="module")
def runs(run_dirs):
    return load_runs(run_dirs)


def test_gated_against_ungated_pairs_the_same_sequences(runs):
    """The difference of the two models' loss changes: each Δ equals ablations.csv's (1e-12, the
    same float64 sums pooled), the reading follows the paired interval, and the table is shown."""
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


def test_a_massive_ablation_on_other_layers_in_each_model_is_not_compared(runs):
    """'massive zeroed (where they appear)' in the first layer that has any (ablations.csv layer):
    another layer in each model is another intervention, so the pair reads 'not comparable',
    naming both."""
    import copy

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

    other = copy.deepcopy(runs)
    ab, seqs = other.tables["ablations"], other.tables["ablation_sequences"]
    name = ab.ablation.iloc[0]
    ab.loc[ab.ablation == name, "kind"] = "massive_zero"
    untouched = (seqs.ablation == name) & (seqs.model == "headwise") & (seqs.sequence == 0)
    seqs.loc[untouched, "nll"] = seqs.loc[untouched, "base_nll"]
    frame = between_models(other).set_index("ablation")
    assert frame.loc[name, "reading"] == ("not comparable: it changed sequences 1, 2, 3 of the gated model, "
                                          "0, 1, 2, 3 of the ungated")


def test_runs_on_other_tokens_are_not_paired(runs, checkpoint):
    """A gated run on other token ids (here: 3 of the 4 sequences) is no pair: no rows."""
    other = probe.analyze(checkpoint("official_headwise"), texts=[TEXT], seq_len=24, max_sequences=3,
                          name="headwise-3", ablate="windows=4 sinks=0,1 key0", resamples=100, progress=False)
    frame = between_models([runs.sources["baseline"], other])
    assert frame.empty and list(frame.columns)[:3] == ["ungated", "gated", "ablation"]
    assert between_lines(frame) == []


NUMBER = r"[+-]\d+\.\d{4}"


def test_the_console_table_prints_the_frame(runs):
    """Each line: the ablation, both Δloss, the difference and the interval, as between_models has
    them to the printed digit, and its reading."""
    frame = between_models(runs)
    lines = between_lines(frame)
    assert lines[1].startswith("headwise against baseline, the same 4 sequences")
    body = lines[3:]
    assert len(body) == len(frame)
    for line, r in zip(body, frame.itertuples()):
        assert line.startswith(r.ablation) and line.endswith(r.reading)
        numbers = [float(x) for x in re.findall(NUMBER, line[len(r.ablation):])]
        assert numbers == pytest.approx([r.delta_ungated, r.delta_gated, r.difference, r.lo, r.hi], abs=5e-5)


def test_probe_report_prints_the_table(run_dirs, runs, tmp_path, capsys):
    assert main(["report", *map(str, run_dirs), "--out", str(tmp_path / "rep"), "--format", "html"]) == 0
    printed = capsys.readouterr().out
    assert "\n".join(between_lines(between_models(runs))) in printed


def test_probe_compare_prints_each_models_ablations_and_the_pair(checkpoint, text_file, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", str(checkpoint("official_baseline")), str(checkpoint("official_headwise")),
                 "--name", "baseline", "headwise", "--data", str(text_file), "--seq-len", "24",
                 "--max-sequences", "4", "--ablate", "windows=4 key0", "--resamples", "100",
                 "--out", str(out), "--format", "html"]) == 0
    printed = capsys.readouterr().out
    for name in ("baseline", "headwise"):
        assert f"{name}: loss under sink ablations, against the model on the same tokens" in printed
    lines = between_lines(between_models(out))
    assert lines and "\n".join(lines) in printed
    assert printed.index(lines[1]) < printed.index(f"wrote {out}/")


def test_the_console_columns_stay_aligned_for_wide_intervals(runs):
    """An interval of two-digit nats (massive activations zeroed: ~14) keeps the reading column
    where the header puts it."""
    frame = between_models(runs).copy()
    frame.loc[0, ["lo", "hi"]] = [-14.5616, -13.7648]
    lines = between_lines(frame)
    column = lines[2].index("reading")
    assert all(line[column - 2:column] == "  " and line[column] != " " for line in lines[3:])
