"""reports.claims (with reports/claims/numbers.py, the numbers judged, and reports/claims/paper.py, the paper's
side): verdicts on the paper's four claims, recomputed here from the CSV files.

The numbers below are read with plain pandas from the run directories, not through reports,
and the rules are applied here again; every verdict is then pushed across its rule by editing
the CSV numbers, so each test would fail if a verdict ignored the numbers it claims to use.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probe import reports
import probe.reports.sections
from probe import reports
from probe.reports import claims
from probe.reports.claims import rules
from probe.reports.claims import BELOW_THRESHOLD, CONSISTENT, NOT_CONSISTENT, NOT_TESTABLE
from probe.reports.claims.console import PAIRING_RULE, claims_text
from tests.reports.saved_runs import copy_runs  # noqa: F401  (copy_runs: fixtures)

# --- The numbers, independently of reports ------------------------------------------------


def csv_numbers(run: Path) -> dict[str, float]:
    """What the claims rest on, straight from one run directory's CSV files."""
    numbers: dict[str, float] = {}
    gates = pd.read_csv(run / "gates.csv")  # a baseline's has a header and no rows
    if len(gates):
        wide = gates[gates["group"] == "all"].pivot_table(
            index=["layer", "head"], columns="metric", values="value")
        numbers["mean_gate"] = np.average(wide["mean"], weights=wide["count"])
        numbers["low_share"] = np.average(wide["frac_lt_0.1"], weights=wide["count"])
    sparsity = pd.read_csv(run / "sparsity.csv")
    at = sparsity[np.isclose(sparsity["threshold"], 1e-2)]
    for variant, rows in at.groupby("variant"):
        numbers[f"sparsity_{variant}"] = rows.groupby("layer")["value"].mean().mean()
    first = pd.read_csv(run / "first_token.csv")
    first = first[(first["metric"] == "f_attn") & (first["layer_type"] == "attention")]
    numbers["f_attn"] = first.groupby("layer")["value"].mean().mean()
    numbers["uniform"] = json.loads((run / "summary.json").read_text())["f_attn_uniform"]
    massive = pd.read_csv(run / "massive.csv")
    numbers["m_act"] = massive[(massive["site"] == "resid_post")
                               & (massive["metric"] == "max_abs")]["value"].mean()
    return numbers


def expected(claim: int, gated: dict, base: dict | None = None) -> str:
    """The verdict the rules give for these numbers (thresholds from reports.claims)."""
    if claim == 1:
        holds = (gated["mean_gate"] <= rules.MEAN_GATE_MAX
                 and gated["low_share"] >= rules.LOW_GATE_SHARE_MIN)
        # Direction only: below a gate without preference (0.5), more low scores than a
        # uniform spread (0.1 below 0.1).
        direction = gated["mean_gate"] < 0.5 and gated["low_share"] > 0.1
    elif claim == 2:
        ungated, control, dynamic = (gated[f"sparsity_{v}"]
                                     for v in ("ungated", "mean_gate", "gated"))
        holds = (control - ungated >= rules.SPARSITY_MIN_STEP
                 and dynamic - control >= rules.SPARSITY_MIN_STEP)
        direction = ungated < control < dynamic
    elif claim == 3:
        base_ratio = base["f_attn"] / base["uniform"]
        if base_ratio < rules.SINK_MIN_RATIO:
            return NOT_TESTABLE
        gated_ratio = gated["f_attn"] / gated["uniform"]
        holds = gated_ratio <= base_ratio / rules.F_ATTN_MIN_REDUCTION
        direction = gated_ratio < base_ratio
    else:
        holds = gated["m_act"] <= base["m_act"] / rules.M_ACT_MIN_REDUCTION
        direction = gated["m_act"] < base["m_act"]
    if holds:
        return CONSISTENT
    return BELOW_THRESHOLD if direction else NOT_CONSISTENT


def verdict(table: pd.DataFrame, claim: int, models: str) -> str:
    rows = table[(table["claim"] == claim) & (table["models"] == models)]
    assert len(rows) == 1, (claim, models, table[["claim", "models"]])
    return rows["verdict"].iloc[0]


def kind(text: str) -> str:
    """The verdict without its reason: consistent, not consistent, or not testable."""
    return NOT_TESTABLE if text.startswith(NOT_TESTABLE + ":") else text


# --- Editing the CSV numbers across a rule ------------------------------------------------


def edit(run: Path, table: str, change) -> None:
    frame = pd.read_csv(run / f"{table}.csv", keep_default_na=False, na_values=[""])
    change(frame)
    frame.to_csv(run / f"{table}.csv", index=False)


def set_gates(run: Path, metric: str, value: float) -> None:
    def change(frame):
        frame.loc[(frame["group"] == "all") & (frame["metric"] == metric), "value"] = value
    edit(run, "gates", change)


def set_sparsity(run: Path, ungated: float, control: float, dynamic: float) -> None:
    def change(frame):
        at = np.isclose(frame["threshold"], 1e-2)
        for variant, value in (("ungated", ungated), ("mean_gate", control), ("gated", dynamic)):
            frame.loc[at & (frame["variant"] == variant), "value"] = value
    edit(run, "sparsity", change)


def set_f_attn(run: Path, value: float) -> None:
    def change(frame):
        rows = (frame["metric"] == "f_attn") & (frame["layer_type"] == "attention")
        frame.loc[rows, "value"] = value
    edit(run, "first_token", change)


def scale_m_act(run: Path, factor: float) -> None:
    def change(frame):
        rows = (frame["site"] == "resid_post") & (frame["metric"] == "max_abs")
        frame.loc[rows, "value"] = frame.loc[rows, "value"] * factor
    edit(run, "massive", change)


def claims_table(*args) -> pd.DataFrame:
    """The claims with every (baseline, gated) pair of the fixture runs declared matched (--pair):
    the fixtures record no token ids, as runs written before tokens_sha256."""
    from probe.reports.runs import load_runs

    runs = load_runs(args[0] if len(args) == 1 else list(args))
    return reports.claims_table(runs, pairs=[(b, g) for g in runs.gated_models for b in runs.ungated_models])


def table_of(runs: dict[str, Path]) -> pd.DataFrame:
    return claims_table(*runs.values())


# --- Verdicts on the fixture runs ---------------------------------------------------------


def test_verdicts_follow_the_csv_numbers(run_dirs):
    table = claims_table(list(run_dirs.values()))
    numbers = {name: csv_numbers(path) for name, path in run_dirs.items()}
    assert list(table.columns) == claims.COLUMNS
    assert table["claim"].tolist() == [1, 1, 2, 2, 3, 3, 4, 4]
    for gated in ("headwise", "hybrid"):
        for claim in (1, 2):
            assert verdict(table, claim, gated) == expected(claim, numbers[gated])
        for claim in (3, 4):
            got = verdict(table, claim, f"baseline vs {gated}")
            assert kind(got) == expected(claim, numbers[gated], numbers["baseline"])
    # The fixture runs were made to follow the paper: every verdict is "consistent" here, so
    # the flips below each start from a consistent verdict.
    assert set(table["verdict"]) == {CONSISTENT}


def test_numbers_column_holds_what_the_verdict_used(run_dirs):
    table = claims_table(run_dirs["baseline"], run_dirs["headwise"])
    csv = {name: csv_numbers(run_dirs[name]) for name in ("baseline", "headwise")}
    by_claim = dict(zip(table["claim"], table["numbers"]))
    assert by_claim[1]["mean_gate"] == pytest.approx(csv["headwise"]["mean_gate"])
    assert by_claim[1]["share_below_0.1"] == pytest.approx(csv["headwise"]["low_share"])
    assert by_claim[2]["mean_gate"] == pytest.approx(csv["headwise"]["sparsity_mean_gate"])
    assert by_claim[3]["baseline_f_attn"] == pytest.approx(csv["baseline"]["f_attn"])
    assert by_claim[3]["gated_uniform"] == pytest.approx(csv["headwise"]["uniform"])
    assert by_claim[4]["gated_m_act"] == pytest.approx(csv["headwise"]["m_act"])
    # ... and the text shows them.
    row = table[table["claim"] == 4].iloc[0]
    assert f"{csv['baseline']['m_act']:.3g}" in row["these runs"]


@pytest.mark.parametrize("metric, inside, below, against", [
    ("mean", rules.MEAN_GATE_MAX - 0.005, rules.MEAN_GATE_MAX + 0.005, 0.505),
    ("frac_lt_0.1", rules.LOW_GATE_SHARE_MIN + 0.005, rules.LOW_GATE_SHARE_MIN - 0.005, 0.095),
])
def test_claim1_flips_across_its_rule(copy_runs, metric, inside, below, against):
    runs = copy_runs("headwise")
    for value, wanted in ((inside, CONSISTENT), (below, BELOW_THRESHOLD),
                          (against, NOT_CONSISTENT)):
        set_gates(runs["headwise"], metric, value)
        assert verdict(table_of(runs), 1, "headwise") == wanted, value
        assert expected(1, csv_numbers(runs["headwise"])) == wanted


@pytest.mark.parametrize("shares, wanted", [
    ((0.10, 0.10 + rules.SPARSITY_MIN_STEP * 0.8, 0.40), BELOW_THRESHOLD),  # control barely up
    ((0.10, 0.30, 0.30 + rules.SPARSITY_MIN_STEP * 0.8), BELOW_THRESHOLD),  # gate barely up
    ((0.10, 0.40, 0.30), NOT_CONSISTENT),                  # control sparser than the gate
    ((0.35, 0.30, 0.40), NOT_CONSISTENT),                  # ungated sparser than the control
    ((0.10, 0.30, 0.30), NOT_CONSISTENT),                  # no step at all
])
def test_claim2_flips_across_its_rule(copy_runs, shares, wanted):
    runs = copy_runs("headwise")
    set_sparsity(runs["headwise"], 0.10, 0.30, 0.40)
    assert verdict(table_of(runs), 2, "headwise") == CONSISTENT
    set_sparsity(runs["headwise"], *shares)
    assert verdict(table_of(runs), 2, "headwise") == wanted
    assert expected(2, csv_numbers(runs["headwise"])) == wanted


def test_claim3_needs_a_sink_in_the_baseline(copy_runs):
    runs = copy_runs("baseline", "headwise")
    uniform = csv_numbers(runs["baseline"])["uniform"]
    set_f_attn(runs["headwise"], uniform)  # no sink at all in the gated model
    set_f_attn(runs["baseline"], uniform * rules.SINK_MIN_RATIO * 1.02)
    assert verdict(table_of(runs), 3, "baseline vs headwise") == CONSISTENT
    set_f_attn(runs["baseline"], uniform * rules.SINK_MIN_RATIO * 0.98)
    got = verdict(table_of(runs), 3, "baseline vs headwise")
    assert got.startswith("not testable: the baseline has no sink")
    assert f"{rules.SINK_MIN_RATIO * 0.98:.3g}×" in got  # says how far it is from one
    assert expected(3, csv_numbers(runs["headwise"]), csv_numbers(runs["baseline"])) \
        == NOT_TESTABLE


def test_claim3_flips_across_its_rule(copy_runs):
    runs = copy_runs("baseline", "headwise")
    base = csv_numbers(runs["baseline"])
    limit = base["f_attn"] / rules.F_ATTN_MIN_REDUCTION  # same uniform reference in both
    set_f_attn(runs["headwise"], limit * 0.98)
    assert verdict(table_of(runs), 3, "baseline vs headwise") == CONSISTENT
    set_f_attn(runs["headwise"], limit * 1.02)  # smaller, but not 2x smaller
    assert verdict(table_of(runs), 3, "baseline vs headwise") == BELOW_THRESHOLD
    assert expected(3, csv_numbers(runs["headwise"]), base) == BELOW_THRESHOLD
    set_f_attn(runs["headwise"], base["f_attn"] * 1.02)  # above the baseline: against
    assert verdict(table_of(runs), 3, "baseline vs headwise") == NOT_CONSISTENT
    assert expected(3, csv_numbers(runs["headwise"]), base) == NOT_CONSISTENT


def test_claim4_flips_across_its_rule(copy_runs):
    runs = copy_runs("baseline", "headwise")
    base, gated = (csv_numbers(runs[name])["m_act"] for name in ("baseline", "headwise"))
    to_limit = base / rules.M_ACT_MIN_REDUCTION / gated
    scale_m_act(runs["headwise"], to_limit * 0.98)
    assert verdict(table_of(runs), 4, "baseline vs headwise") == CONSISTENT
    scale_m_act(runs["headwise"], 1.02 / 0.98)  # e.g. 1.84x smaller against a 2x rule
    assert verdict(table_of(runs), 4, "baseline vs headwise") == BELOW_THRESHOLD
    assert expected(4, csv_numbers(runs["headwise"]), csv_numbers(runs["baseline"])) \
        == BELOW_THRESHOLD
    scale_m_act(runs["headwise"], rules.M_ACT_MIN_REDUCTION * 1.02)  # above the baseline
    assert verdict(table_of(runs), 4, "baseline vs headwise") == NOT_CONSISTENT
    assert expected(4, csv_numbers(runs["headwise"]), csv_numbers(runs["baseline"])) \
        == NOT_CONSISTENT


def test_the_factor_says_larger_when_the_gated_value_grew(copy_runs):
    """The real models read "M-Act 18,114 vs 20,689 (0.876x smaller)": the gated value was 1.14x
    larger. The words follow the direction; the number is always at least 1."""
    runs = copy_runs("baseline", "headwise")
    base, gated = (csv_numbers(runs[name])["m_act"] for name in ("baseline", "headwise"))
    scale_m_act(runs["headwise"], base * 1.14 / gated)
    text = table_of(runs).query("claim == 4")["these runs"].iloc[0]
    assert "(the gated 1.14× larger)" in text and "smaller" not in text
    scale_m_act(runs["headwise"], 1 / 1.14 / 2.5)
    text = table_of(runs).query("claim == 4")["these runs"].iloc[0]
    assert "(the gated 2.5× smaller)" in text and "larger" not in text
    assert claims.how_many_times(1.0, "x") == " (x the same)" and claims.how_many_times(np.nan, "x") == ""


def test_the_gate_share_reads_as_words_not_two_comparisons(run_dirs):
    """The console's rule line read "share < 0.1 > 0.25"."""
    table = claims_table(run_dirs["headwise"])
    rule, measured = table["rule"].iloc[0], table["these runs"].iloc[0]
    assert "share of scores below 0.1 > 0.25" in rule and "< 0.1 >" not in rule
    assert re.search(r"share of scores below 0\.1: [0-9.]+", measured)
    assert "< 0.1 >" not in claims_text(table)


def drop_layer_as_nan(run: Path, layer: int) -> None:
    """What probe writes when a NaN weight makes a layer all NaN: no finite statistic for that
    layer (its massive.csv rows are left out) and the count in meta.json."""
    edit(run, "massive", lambda frame: frame.drop(frame.index[frame["layer"] == layer],
                                                  inplace=True))
    meta = json.loads((run / "meta.json").read_text())
    meta["nonfinite_activations"] = {f"{layer}:resid_post": 4096, f"{layer}:attn_out": 4096}
    (run / "meta.json").write_text(json.dumps(meta))


def test_nonfinite_layers_make_the_verdicts_untestable(copy_runs):
    runs = copy_runs("baseline", "headwise")
    before = table_of(runs)
    assert set(before["verdict"]) == {CONSISTENT}
    drop_layer_as_nan(runs["headwise"], 3)
    table = table_of(runs)
    # Every verdict involving headwise: M-Act over 3 of its 4 layers is no comparison.
    for got in table["verdict"]:
        assert got.startswith(NOT_TESTABLE + ": headwise has NaN/inf activations at layer 3"), got
    # ... and the report's summary says so.
    sections = {s.id: s for s in reports.sections.build_sections(reports.load_runs(
        list(runs.values())))}
    assert any("headwise has NaN/inf activations at layer 3" in note
               for note in sections["summary"].notes)


def test_a_layer_missing_from_massive_alone_is_untestable(copy_runs):
    """Without the meta.json count (an older run), the missing layer still says it."""
    runs = copy_runs("baseline", "headwise")
    edit(runs["baseline"], "massive", lambda frame: frame.drop(
        frame.index[frame["layer"] == 1], inplace=True))
    got = verdict(table_of(runs), 4, "baseline vs headwise")
    assert got.startswith(NOT_TESTABLE + ": baseline has NaN/inf activations at layer 1")


def test_thresholds_live_in_the_named_constants(run_dirs, monkeypatch):
    """Moving a constant moves the verdict, the rule and the caption together."""
    headwise = csv_numbers(run_dirs["headwise"])["mean_gate"]
    monkeypatch.setattr(rules, "MEAN_GATE_MAX", round(headwise - 0.01, 3))
    table = claims_table(run_dirs["headwise"])
    assert verdict(table, 1, "headwise") == BELOW_THRESHOLD
    assert f"mean gate ≤ {round(headwise - 0.01, 3):g}" in table["rule"].iloc[0]
    assert f"mean gate ≤ {round(headwise - 0.01, 3):g}" in claims.rules_display()["rule"].iloc[0]


def test_the_rules_quote_the_no_preference_gate_from_its_constant(monkeypatch):
    monkeypatch.setattr(rules, "NO_PREFERENCE_GATE", 0.45)
    assert "mean gate > 0.45" in claims.rules_display()["rule"].iloc[0]


def test_the_rules_are_a_short_table_that_quotes_every_threshold_not_a_caption_of_names():
    """Issue 25 item 12: one row per claim with its rule; the caption says how intervals decide,
    in a few lines, without the constants' names."""
    table = claims.rules_display()
    assert len(table) == 5 and list(table.columns) == ["rule"]      # claim 5: sink ablations
    text = " ".join(table["rule"])
    for value in (rules.MEAN_GATE_MAX, rules.LOW_GATE_SHARE_MIN, rules.SPARSITY_THRESHOLD,
                  rules.SPARSITY_MIN_STEP, rules.SINK_MIN_RATIO, rules.F_ATTN_MIN_REDUCTION):
        assert f"{value:g}" in text
    for caption in (claims.claims_caption(), claims.rules_caption()):
        assert "MEAN_GATE_MAX" not in caption and "SINK_MIN_RATIO" not in caption
        assert len(caption) < 900
    assert claims.WITHIN_NOISE in claims.rules_caption() and claims.OPPOSITE in claims.rules_caption()


# --- Not testable -------------------------------------------------------------------------


def test_one_gated_run_tests_claims_1_and_2_only(run_dirs):
    table = claims_table(run_dirs["headwise"])
    numbers = csv_numbers(run_dirs["headwise"])
    assert verdict(table, 1, "headwise") == expected(1, numbers)
    assert verdict(table, 2, "headwise") == expected(2, numbers)  # within the one run
    for claim in (3, 4):
        assert verdict(table, claim, "headwise") == "not testable: no baseline in this report"


def test_gated_runs_without_a_baseline(run_dirs):
    table = claims_table(run_dirs["headwise"], run_dirs["hybrid"])
    untestable = table[table["claim"].isin([3, 4])]
    assert len(untestable) == 4
    assert set(untestable["verdict"]) == {"not testable: no baseline in this report"}
    assert "M-Act" in untestable[untestable["claim"] == 4]["these runs"].iloc[0]


def test_ungated_only_runs_test_nothing(run_dirs):
    table = claims_table(run_dirs["baseline"])
    assert table["claim"].tolist() == [1, 2, 3, 4]
    assert set(table["verdict"]) == {f"not testable: {claims.NO_GATED}"}
    sink = table[table["claim"] == 3]["these runs"].iloc[0]
    assert "baseline: F-Attn" in sink and "× uniform" in sink  # the numbers are still shown
    # Issue 25 item 10: said once on the console.
    assert claims_text(table) == f"Claims of the paper: {claims.NO_GATED}."


def test_missing_control_makes_claim2_untestable(copy_runs):
    runs = copy_runs("headwise")
    edit(runs["headwise"], "sparsity",
         lambda frame: frame.drop(frame.index[frame["variant"] == "mean_gate"], inplace=True))
    got = verdict(table_of(runs), 2, "headwise")
    assert got.startswith("not testable: headwise has no share below 0.01")
    assert "uniform control" in got


def test_several_baselines_pair_with_every_gated_model(copy_runs):
    runs = copy_runs("baseline", "headwise")
    second = runs["baseline"].parent / "baseline2"
    shutil.copytree(runs["baseline"], second)
    for name in ("meta.json", "summary.json"):
        path = second / name
        path.write_text(path.read_text().replace('"baseline"', '"baseline2"'))
    table = claims_table(runs["baseline"], second, runs["headwise"])
    assert set(table[table["claim"] == 4]["models"]) == {"baseline vs headwise",
                                                       "baseline2 vs headwise"}


def test_a_second_baseline_is_one_not_comparable_row_per_claim(copy_runs):
    """Two ungated runs beside two gated ones, one baseline paired with both: the other baseline
    was a row per gated model and claim (four not-comparable rows, each with the paper's values
    and the rule again). Now one row per claim names it with every gated model, and the console
    prints the paper and the rule once per claim and the pairing rule once."""
    runs = copy_runs("baseline", "headwise", "hybrid")
    second = runs["baseline"].parent / "baseline2"
    shutil.copytree(runs["baseline"], second)
    for name in ("meta.json", "summary.json"):
        path = second / name
        path.write_text(path.read_text().replace('"baseline"', '"baseline2"'))
    table = reports.claims_table(runs["baseline"], second, runs["headwise"], runs["hybrid"],
                                 pairs=[("baseline", "headwise"), ("baseline", "hybrid")])
    for claim in (3, 4):
        rows = table[table["claim"] == claim]
        assert list(rows["models"]) == ["baseline vs headwise", "baseline vs hybrid", "baseline2 vs headwise, hybrid"]
        last = rows.iloc[-1]
        assert last["verdict"] == "not comparable: not a declared pair (--pair BASE:GATED)"
        assert [m.split(":")[0] for m in last["these runs"].split("; ")] == ["baseline2", "headwise", "hybrid"]
    text = claims_text(table)
    assert text.count("    rule:") == 4 and text.count("    paper:") == 4
    assert text.count(PAIRING_RULE) == 1 and text.count("baseline2 vs headwise, hybrid") == 2


# --- Where the table appears --------------------------------------------------------------


def test_analysis_objects_work_directly(run_dirs):
    import probe

    base, gated = (probe.Analysis.load(run_dirs[name]) for name in ("baseline", "headwise"))
    from_objects = claims_table(base, gated)
    from_dirs = claims_table([run_dirs["baseline"], run_dirs["headwise"]])
    pd.testing.assert_frame_equal(from_objects.drop(columns="numbers"),
                                  from_dirs.drop(columns="numbers"))


def _claims_section(html: str) -> str:
    start = html.index('<section id="claims">')
    return html[start:html.index("</section>", start)]


def test_table_opens_the_html_report(built_report, all_runs):
    html = built_report["html"].read_text(encoding="utf-8")
    assert html.index('<section id="claims">') < html.index('<section id="summary">')
    section = _claims_section(html)
    table = reports.claims_table(all_runs)        # as the report shows it: no declared pair
    rows = re.findall(r"<tr><th scope=\"row\">(.*?)</th>(.*?)</tr>", section)
    assert len(rows) == len(table)
    for (label, cells), expected_row in zip(rows, table.to_dict("records")):
        assert label == f"{expected_row['claim']}. {expected_row['statement']}"
        # Coloured by verdict class; the words stay the same.
        kind = next(k for text, k in claims.VERDICT_KINDS if expected_row["verdict"].startswith(text))
        assert f'<td class="verdict {kind}">{expected_row["verdict"]}</td>' in cells
    assert "How each claim&#x27;s verdict is decided" in html or "How each claim's verdict is decided" in html
    assert "3× uniform" in html                                       # the rules' table, under Provenance
    assert "direction consistent with the paper" in section
    assert "reproduc" not in section.lower()


def test_table_is_in_the_pdf(built_report):
    from pypdf import PdfReader

    pages = [page.extract_text() for page in PdfReader(built_report["pdf"]).pages]
    # The section starts on the cover page, under the contents, and goes on from there.
    claim_pages = [text for text in pages if "Claims of the paper" in text.split("Contents")[-1]]
    assert claim_pages and pages.index(claim_pages[0]) == 0
    text = " ".join(" ".join(claim_pages).split())
    for needle in ("1. Gate scores are sparse", "massive activations", "baseline vs headwise, hybrid"):
        assert needle in text, needle
    assert "lies on the paper's side of zero" in " ".join(" ".join(pages).split())   # the rules
    assert "direction consistent" in text


def test_summary_numbers_stand_in_for_a_missing_table(run_dirs):
    """Older or partial runs: M-Act from summary.json; without either, not testable."""
    from types import SimpleNamespace

    def analysis(name: str, **tables) -> SimpleNamespace:
        run = run_dirs[name]
        frames = {table: pd.read_csv(run / f"{table}.csv")
                  for table in ("first_token", "massive", "gates", "sparsity")}
        return SimpleNamespace(meta=json.loads((run / "meta.json").read_text()),
                               summary=json.loads((run / "summary.json").read_text()),
                               **{**frames, **tables})

    base, gated = analysis("baseline"), analysis("headwise", massive=pd.DataFrame())
    base_m_act = csv_numbers(run_dirs["baseline"])["m_act"]  # its massive.csv is there
    gated.summary["m_act"] = base_m_act / (rules.M_ACT_MIN_REDUCTION * 1.05)
    assert verdict(claims_table(base, gated), 4, "baseline vs headwise") == CONSISTENT
    gated.summary["m_act"] = base_m_act * 1.05
    assert verdict(claims_table(base, gated), 4, "baseline vs headwise") \
        == NOT_CONSISTENT
    del gated.summary["m_act"]
    got = verdict(claims_table(base, gated), 4, "baseline vs headwise")
    assert got == ("not testable: no M-Act of the layer output for headwise "
                   "(massive.csv, summary.json m_act)")


def test_a_graft_fingerprint_of_the_other_scheme_leaves_the_pairing_to_the_config_hash():
    """XXH3 fingerprints (now) and 16-hex-digit SHA-256 ones (earlier grafts) of the same weights
    differ as text: then the graft's base_digest against the base's config hash decides, while
    two fingerprints of one scheme decide alone."""
    from types import SimpleNamespace

    from probe.reports.claims.pairs import _grafted_onto

    def runs(recorded, own, digest="d1", config_hash="d1"):
        return SimpleNamespace(meta={"base": {"embedding_fingerprint": own, "config_hash": config_hash},
                                     "gated": {"graft": {"base_fingerprint": recorded, "base_digest": digest}}})

    new, other, old = "xxh3:" + "a" * 32, "xxh3:" + "b" * 32, "0123456789abcdef"
    assert _grafted_onto(runs(new, new), "base", "gated")
    assert not _grafted_onto(runs(other, new), "base", "gated")                  # one scheme: decides
    assert _grafted_onto(runs(old, new), "base", "gated")                        # schemes differ: digests equal
    assert not _grafted_onto(runs(old, new, config_hash="d2"), "base", "gated")
    assert _grafted_onto(runs(old, old), "base", "gated") and not _grafted_onto(runs(old, "fedcba9876543210"), "base", "gated")


def test_a_baseline_unmatched_with_several_gated_models_is_one_row_naming_how_to_pair():
    """One baseline beside two gated models it cannot be matched with, for one reason: one
    group, whose --pair hint says MODEL is one of the gated models named (a single gated model:
    its own name), never a bare placeholder."""
    from types import SimpleNamespace

    from probe.reports.claims.pairs import split_pairs

    meta = {name: {"tokens_sha256": "same"} for name in ("base", "gated-a", "gated-b")}
    runs = SimpleNamespace(meta=meta, gated_models=["gated-a", "gated-b"], ungated_models=["base"])
    matched, groups = split_pairs(runs)
    assert matched == []
    [(base, gated, why)] = groups
    assert (base, gated) == ("base", ["gated-a", "gated-b"])
    assert why.endswith("declare the pair with --pair base:MODEL, MODEL one of the gated models named, "
                        "if it is one")
    runs.gated_models = ["gated-a"]
    assert split_pairs(runs)[1][0][2].endswith("--pair base:gated-a if it is one")
