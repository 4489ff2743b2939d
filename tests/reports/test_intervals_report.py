"""Intervals in the report: brackets beside the summary's numbers, paired differences, bands on
the layer-wise figures; a run written before per_sequence.csv reports without them and says so;
--pair and --group mistakes are one line."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

import probe  # noqa: E402
from probe.api.cli import main  # noqa: E402
from probe.reports import plots  # noqa: E402
from probe.reports.differences import differences_table  # noqa: E402
from probe.reports.runs import load_runs  # noqa: E402
from probe.reports.sections import build_sections  # noqa: E402
from probe.reports.tables import summary_display  # noqa: E402
from tests.samples import TEXT  # noqa: E402

OLD_RUN = Path(__file__).parents[1] / "gold_runs" / "qwen3"        # made old by _as_before_intervals


@pytest.fixture(scope="module")
def pair(checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("interval-runs")
    out = []
    for kind in ("official_baseline", "official_headwise"):
        a = probe.analyze(checkpoint(kind), texts=[TEXT[:2500]], seq_len=32, batch_size=4, max_sequences=12,
                          display_len=0, progress=False)
        out.append(a.save(root / kind))
    return out


def section(sections, id_):
    return next(s for s in sections if s.id == id_)


def _as_before_intervals(run: Path, into: Path) -> Path:
    """A copy of `run` as probe wrote it before per-sequence values: no per_sequence.csv, no
    *_lo / *_hi or intervals keys in summary.json, no per_sequence entry in meta.json's tables."""
    import json
    import shutil

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()
                    if not (k.endswith("_lo") or k.endswith("_hi") or k == "intervals")}
        return [strip(v) for v in x] if isinstance(x, list) else x

    old = shutil.copytree(run, into / run.name)
    (old / "per_sequence.csv").unlink()
    meta = json.loads((old / "meta.json").read_text())
    meta["tables"].pop("per_sequence", None)
    meta.pop("resamples", None)
    (old / "meta.json").write_text(json.dumps(meta))
    (old / "summary.json").write_text(json.dumps(strip(json.loads((old / "summary.json").read_text()))))
    return old


def test_an_old_run_reports_without_intervals_and_says_so(tmp_path):
    old_run = _as_before_intervals(OLD_RUN, tmp_path)
    runs = load_runs([old_run])
    summary = section(build_sections(runs), "summary")
    caption = summary.items[0].caption
    assert "No intervals for" in caption and "per_sequence.csv" in caption
    assert "[" not in " ".join(summary_display(runs).astype(str).to_numpy().ravel())
    assert probe.Analysis.load(old_run).per_sequence.empty


def test_brackets_differences_and_bands_with_per_sequence_values(pair):
    runs = load_runs(pair)
    display = summary_display(runs)
    for model in runs.models:
        cell = display.loc[model, "F-Attn (t ≥ 1)"]
        lo, hi = runs.summary[model]["f_attn_lo"], runs.summary[model]["f_attn_hi"]
        assert cell.endswith(f"[{lo:.3f}, {hi:.3f}]") and lo < runs.summary[model]["f_attn"] < hi
    summary = section(build_sections(runs), "summary")
    assert "No intervals" not in summary.items[0].caption and "Brackets: 95%" in summary.items[0].caption
    assert [item.id for item in summary.items] == ["summary-table", "differences-table"]
    diff = differences_table(runs)
    f = diff[diff["quantity"] == "F-Attn"].iloc[0]
    assert f["difference"] == pytest.approx(runs.summary[runs.models[1]]["f_attn"] - runs.summary[runs.models[0]]["f_attn"],
                                            rel=1e-9)
    assert f["difference_lo"] <= f["difference"] <= f["difference_hi"]
    fig = plots.plot_first_token_by_layer(runs)
    assert sum(len(ax.collections) for ax in fig.axes) >= 2        # one band per model
    # and the legend says what the shades are, after the models and the reference
    legend = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert legend[-1] == "95% interval" and legend[:len(runs.models)] == list(runs.models)
    legend = [text.get_text() for text in plots.plot_massive_by_layer(runs).axes[0].get_legend().get_texts()]
    assert legend == [*runs.models, "median |h|", "95% interval"]


def test_brackets_over_few_sequences_are_flagged_in_the_captions(pair, tmp_path):
    """Intervals over 12 sequences carry no warning; a run whose bootstrap had 2 sequences (the
    real-model demo's 2 x 512 tokens) is named beside the brackets, in the summary and claims."""
    import json
    import shutil

    from probe.reports.claims import claims_caption

    assert "Few sequences" not in section(build_sections(load_runs(pair)), "summary").items[0].caption
    few = Path(shutil.copytree(pair[1], tmp_path / "few"))
    summary = json.loads((few / "summary.json").read_text())
    summary["intervals"]["sequences"] = 2
    (few / "summary.json").write_text(json.dumps(summary))
    runs = load_runs([pair[0], few])
    warning = f"Few sequences behind the brackets of {runs.models[1]} (2): a bootstrap over fewer than 10"
    assert warning in section(build_sections(runs), "summary").items[0].caption
    assert warning in claims_caption(runs)
    assert runs.models[0] + " (" not in claims_caption(runs)


def test_pair_and_group_mistakes_are_one_line(pair, tmp_path, capsys):
    names = [p.name for p in pair]
    assert main(["report", *map(str, pair), "--out", str(tmp_path / "r"), "--pair", names[1]]) == 2
    assert "give BASE:GATED" in capsys.readouterr().err
    assert main(["report", *map(str, pair), "--out", str(tmp_path / "r"), "--pair", f"{names[1]}:{names[0]}"]) == 2
    assert "baseline first" in capsys.readouterr().err
    assert main(["report", *map(str, pair), "--out", str(tmp_path / "r"), "--group", f"g:{names[0]}"]) == 2
    assert "NAME:RUN,RUN" in capsys.readouterr().err


def test_a_declared_pair_is_judged_with_its_interval_on_the_console(pair, tmp_path, capsys):
    names = [p.name for p in pair]
    assert main(["report", *map(str, pair), "--out", str(tmp_path / "r"), "--format", "html",
                 "--pair", f"{names[0]}:{names[1]}"]) == 0
    out = capsys.readouterr().out
    assert "(paired bootstrap)" in out and "not comparable" not in out
    assert main(["report", *map(str, pair), "--out", str(tmp_path / "r2"), "--format", "html"]) == 0
    assert "not comparable: not arms of one probe train run" in capsys.readouterr().out


def test_ungated_runs_say_once_that_the_claims_need_a_gated_model(run_dirs):
    """Issue 25 item 10: no "Gated attention report" title, no table of "not testable" rows."""
    from probe.reports.build import default_title
    from probe.reports.claims import NO_GATED

    runs = load_runs([run_dirs["baseline"]])
    claims = section(build_sections(runs), "claims")
    assert claims.items == [] and claims.omitted == NO_GATED     # one line among the left out
    assert not default_title(runs).startswith("Gated attention report")
    assert default_title(load_runs(list(run_dirs.values()))).startswith("Gated attention report")


def test_probe_analyze_prints_the_intervals(checkpoint, tmp_path, capsys):
    assert main(["analyze", str(checkpoint("official_headwise")), "--seq-len", "32", "--max-sequences", "6",
                 "--out", str(tmp_path / "run"), "--quiet"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if "95% intervals" in l)
    assert "over 6 sequences (1000 bootstrap resamples): F-Attn [" in line


def test_claim_2_is_judged_against_the_exact_controls_interval_too(checkpoint, tmp_path):
    """With --exact-control the control has per-sequence counts: claim 2 prints the interval of
    dynamic minus control and decides on it with dynamic minus ungated (both must be above 0);
    the numbers it prints are the bootstrap of the saved table."""
    import numpy as np

    from probe.intervals import SequenceValues, intervals_of
    from probe.reports.claims import CONSISTENT, OPPOSITE, WITHIN_NOISE, claims_table

    a = probe.analyze(checkpoint("official_elementwise"), texts=[TEXT[:2500]], seq_len=32, batch_size=4,
                      max_sequences=12, display_len=0, progress=False, exact_control=True)
    runs = load_runs([a.save(tmp_path / "elementwise")])
    row = claims_table(runs).query("claim == 2").iloc[0]
    measured, numbers = row["these runs"], row["numbers"]
    assert "dynamic minus control" in measured
    v = SequenceValues.from_frame(runs.rows("per_sequence", runs.models[0]))

    def gain(W):
        return v.sparsity_mean(W, "gated", 0.01) - v.sparsity_mean(W, "mean_gate", 0.01)
    point, lo, hi = intervals_of(v, gain, 1000)
    assert lo < point < hi
    want = CONSISTENT if lo > 0 and numbers["gain_lo"] > 0 else (
        OPPOSITE if hi < 0 or numbers["gain_hi"] < 0 else WITHIN_NOISE)
    assert row["verdict"].startswith(want), (row["verdict"], measured)
    assert np.isclose(numbers["control_gain_lo"], lo) and np.isclose(numbers["control_gain_hi"], hi)


def test_sparsity_bars_carry_the_summarys_per_layer_intervals(pair):
    """The whiskers of the sparsity-per-layer bars run from summary.json's sparsity_lo to _hi of
    that layer, variant and threshold; the caption says what they are."""
    import numpy as np
    from matplotlib.container import ErrorbarContainer

    runs = load_runs(pair)
    gated = runs.models[1]
    fig = plots.plot_sparsity_by_layer(runs)
    ax = fig.axes[2]                                        # second model's row, threshold 0.01
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 2                                   # ungated O and O ⊙ g (no exact control)
    segments = bars[1].lines[2][0].get_segments()           # the gated bars' whiskers, by layer
    entries = runs.summary[gated]["layers"]
    for layer, seg in enumerate(segments):
        lo, hi = entries[layer]["sparsity_lo"]["gated"]["0.01"], entries[layer]["sparsity_hi"]["gated"]["0.01"]
        np.testing.assert_allclose([seg[0][1], seg[1][1]], [lo, hi], rtol=1e-9)
    caption = next(i for i in section(build_sections(runs), "sparsity").items if i.id == "sparsity-by-layer").caption
    assert "Whiskers: 95% bootstrap intervals" in caption


@pytest.mark.parametrize("edit", ["nan", "inf", "1e308", "-1", "resamples 1000000000", "resamples 1",
                                  "sequence 1e9"])
def test_a_run_whose_intervals_cannot_be_trusted_is_refused_by_report(tmp_path, capsys, edit):
    """Issue 37 #5 and #11: probe report built intervals and claims from a per_sequence.csv with
    NaN, inf or 1e308 cells (a paired difference of 1e308 printed), and drew a meta.json's
    resamples of 1e9 (29.8 GiB): each is refused in one line naming the file, nothing written."""
    import json
    import shutil

    run = shutil.copytree(OLD_RUN, tmp_path / "qwen3")
    table = run / "per_sequence.csv"
    if edit.startswith("resamples"):
        meta = json.loads((run / "meta.json").read_text())
        meta["resamples"] = int(edit.split()[1])
        (run / "meta.json").write_text(json.dumps(meta))
        where = "meta.json"
    elif edit.startswith("sequence"):
        lines = table.read_text().splitlines()
        lines[1] = lines[1].replace("tiny,0,", "tiny,1000000000,", 1)
        table.write_text("\n".join(lines) + "\n")
        where = "per_sequence.csv"
    else:
        lines = table.read_text().splitlines()
        row = next(i for i, line in enumerate(lines) if ",nll," in line)
        lines[row] = lines[row].rsplit(",", 1)[0] + "," + edit
        table.write_text("\n".join(lines) + "\n")
        where = "per_sequence.csv"
    out = tmp_path / "report"
    code = main(["report", str(run), "--out", str(out), "--format", "html"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("probe: error: ") and where in err[0], err
    assert not out.exists()


def test_a_quantity_at_zero_in_both_models_reads_once():
    """A sink rate of 0 in both models (every resample 0) printed "0 [0, 0], ratio n/a [n/a, n/a]";
    it reads "0 (both 0), ratio n/a (reference 0)", and a row with a real interval is unchanged."""
    import pandas as pd

    from probe.reports.differences import COLUMNS, differences_text

    nan = float("nan")
    frame = pd.DataFrame([
        ["gated", "base", "sink rate", 0.0, 0.0, 0.0, 0.0, 0.0, nan, nan, nan],
        ["gated", "base", "F-Attn", 0.1, 0.2, -0.1, -0.12, -0.08, 0.5, 0.45, 0.55],
    ], columns=COLUMNS)
    lines = differences_text(frame).splitlines()
    assert lines[1] == "  gated − base, sink rate: 0 (both 0), ratio n/a (reference 0)"
    assert lines[2] == "  gated − base, F-Attn: -0.1 [-0.12, -0.08], ratio 0.5 [0.45, 0.55]"
