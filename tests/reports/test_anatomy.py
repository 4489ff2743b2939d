"""The sink-anatomy figures and tables (reports/plots/anatomy.py, reports/sections/sink_anatomy.py,
reports/tables/anatomy.py): each draws what the run directory's tables say, computed here again
straight from the CSV files; runs without the tables get no section."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.colors import LogNorm

from probe import reports
from probe.reports.sections import FigureItem, build_sections, shown

from tests.reports.anatomy_runs import (ANATOMY_COLUMNS, ANATOMY_SPECS, BOS, DEEP_ANATOMY_SPECS, EPSILON,
                          MIN_QUERIES, NEWLINE_ID, buckets, write_anatomy_run)

SECTION = "sink-anatomy"


@pytest.fixture(scope="module")
def anatomy_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("anatomy")
    return {spec.name: write_anatomy_run(root, spec, seed)
            for seed, spec in enumerate(ANATOMY_SPECS)}


@pytest.fixture(scope="module")
def anatomy_runs(anatomy_dirs):
    return reports.load_runs(list(anatomy_dirs.values()))


def csv(anatomy_dirs, model, name) -> pd.DataFrame:
    return pd.read_csv(anatomy_dirs[model] / f"{name}.csv", keep_default_na=False,
                       na_values=[""], dtype={"token": str})


def section_of(runs):
    return next((s for s in build_sections(runs) if s.id == SECTION), None)


def item(runs, item_id):
    return next(i for i in section_of(runs).items if i.id == item_id)


def plot_axes(fig):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def test_the_fixture_writes_the_metric_s_columns():
    from probe.results.schema import OPTIONAL_TABLES, TABLES

    for name, columns in ANATOMY_COLUMNS.items():
        assert list(TABLES[name]) == ["model", *columns], name
        assert OPTIONAL_TABLES[name] == "anatomy"


# -- the heatmap -----------------------------------------------------------------------------

def test_heatmap_cells_are_the_pooled_scores_of_the_table(anatomy_runs, anatomy_dirs):
    fig = reports.plot_received_attention(anatomy_runs)
    axes = plot_axes(fig)
    assert [ax.get_title() for ax in axes] == list(anatomy_dirs)
    columns = [(lo, float(hi)) for lo, hi in buckets()]
    for ax in axes:
        table = csv(anatomy_dirs, ax.get_title(), "received_by_position")
        pooled = table[table["head"] == -1]
        expected = pooled.pivot(index="layer", columns="key_lo", values="score")
        (image,) = ax.get_images()
        drawn = np.ma.filled(image.get_array(), np.nan)
        assert drawn.shape == expected.shape
        assert np.array_equal(drawn, expected.to_numpy())   # no cell below the scale here
        assert isinstance(image.norm, LogNorm)
        # Every column labelled, alternate ones above the panel (minor ticks): on one side the
        # PDF kept every other label and left buckets unnamed.
        ticks = sorted(zip([*ax.get_xticks(), *ax.get_xticks(minor=True)],
                           [*ax.get_xticklabels(), *ax.get_xticklabels(minor=True)]))
        assert [t.get_text() for _, t in ticks] == (
            [str(p) for p in range(16)] + ["16-31", "32-63", "64-127", "128-255", "256-511",
                                           "512-1023"])
        assert len(columns) == drawn.shape[1]
        assert [t.get_text() for t in ax.get_yticklabels()] == [str(l) for l in range(6)]
    norms = {(ax.get_images()[0].norm.vmin, ax.get_images()[0].norm.vmax) for ax in axes}
    assert len(norms) == 1


def test_heatmap_log_scale_spans_the_sink_and_the_ordinary_keys(anatomy_runs, anatomy_dirs):
    fig = reports.plot_received_attention(anatomy_runs)
    norm = plot_axes(fig)[0].get_images()[0].norm
    scores = pd.concat([csv(anatomy_dirs, m, "received_by_position") for m in anatomy_dirs])
    scores = scores[scores["head"] == -1]["score"]
    assert norm.vmax == pytest.approx(scores.max()) and norm.vmin == pytest.approx(scores.min())
    # The sink (key 0) and the last bucket are more than two decades apart, both on the scale.
    assert norm.vmax / norm.vmin > 100


def test_heatmap_caption_quotes_the_buckets_epsilon_and_scale(anatomy_runs, anatomy_dirs):
    caption = item(anatomy_runs, "received-attention").caption
    assert "Gu et al." in caption and "exact key positions 0-15" in caption
    assert "6 buckets of doubling width (16-31 to 512-1023)" in caption
    assert f"ε = {EPSILON:g}" in caption
    norm = plot_axes(reports.plot_received_attention(anatomy_runs))[0].get_images()[0].norm
    assert f"log scale from {norm.vmin:.2g} to {norm.vmax:.2g}" in caption
    runs = reports.load_runs(list(anatomy_dirs.values()))
    for model in runs.models:
        runs.summary[model]["anatomy"]["epsilon"] = 0.25
    assert "ε = 0.25" in item(runs, "received-attention").caption


# -- the tables ------------------------------------------------------------------------------

@pytest.mark.parametrize("per_model", [8, 1])
def test_sink_tokens_are_the_pooled_rows_the_summary_reads(anatomy_runs, anatomy_dirs, per_model):
    """The token table is received_by_token.csv's layer -1 rows (the mean over every layer),
    the same numbers as summary.json's top_sink_tokens, never a mean over the layers whose top
    lists happen to name the token (a higher number for the same token)."""
    table = reports.sink_tokens_table(anatomy_runs, per_model=per_model)
    for model, path in anatomy_dirs.items():
        rows = csv(anatomy_dirs, model, "received_by_token")
        pooled = rows[rows["layer"] == -1].sort_values("rank")
        picked = pooled.head(per_model)
        if BOS not in set(picked["token"]):        # the position-0 token is always listed
            picked = pd.concat([picked, pooled[pooled["token"] == BOS]])
        got = table[table["model"] == model]
        assert list(got["token_id"]) == list(picked["token_id"])
        assert list(got["cells"]) == list(picked["cells"])
        np.testing.assert_array_equal(got["score"], picked["score"])
        np.testing.assert_array_equal(got["sink_share"], picked["sink_share"])
        assert list(got["position_0"]) == [t == BOS for t in picked["token"]]
        summary = json.loads((path / "summary.json").read_text())["anatomy"]["top_sink_tokens"]
        head = pooled.head(len(summary))
        assert [s["token_id"] for s in summary] == list(head["token_id"])
        assert [s["score"] for s in summary] == list(head["score"])
        # A token listed by few layers: the mean over its listing layers would be higher.
        listed = rows[(rows["layer"] >= 0) & (rows["token_id"] == NEWLINE_ID)]
        mine = got[got["token_id"] == NEWLINE_ID]
        if len(mine):
            assert float(mine["score"].iloc[0]) < float(listed["score"].mean())
    # In the gated run the first token is not the top one: with one row it comes second.
    gated = table[table["model"] == "sink_gated"]
    if per_model == 1:
        assert len(gated) == 2 and list(gated["token"])[1] == BOS


@pytest.fixture(scope="module")
def anatomy_report(anatomy_dirs, tmp_path_factory):
    return reports.build_report(list(anatomy_dirs.values()), tmp_path_factory.mktemp("report"))


def test_sink_token_display_escapes_and_marks_position_0(anatomy_runs, anatomy_report):
    display = item(anatomy_runs, "sink-tokens").frame
    assert "“<s>” (position 0)" in list(display["token"])
    assert "“↵”" in list(display["token"])           # the newline is made visible
    text = anatomy_report["html"].read_text(encoding="utf-8")
    assert "“&lt;s&gt;” (position 0)" in text and "“&lt;b&gt;”" in text
    assert "<b>”" not in text and "“<s>”" not in text


def test_secondary_sinks_are_the_top_ten_by_score(anatomy_runs, anatomy_dirs):
    table = reports.secondary_sinks_table(anatomy_runs)
    for model in anatomy_dirs:
        frame = csv(anatomy_dirs, model, "secondary_sinks")
        expected = frame.sort_values(["score", "layer", "head", "position"],
                                     ascending=[False, True, True, True]).head(10)
        got = table[table["model"] == model]
        assert len(got) == min(10, len(frame))
        for column in ("layer", "head", "sequence", "position", "token", "score"):
            assert list(got[column]) == list(expected[column]), column
    # the caption's cell is (layer, head, sequence, key position): the display shows all four
    assert {"layer", "head", "sequence", "position"} <= set(item(anatomy_runs, "secondary-sinks").frame.columns)
    caption = item(anatomy_runs, "secondary-sinks").caption
    assert "The 10 highest-scoring" in caption and f"ε = {EPSILON:g}" in caption


def test_sink_token_caption_quotes_the_minimum_queries(anatomy_runs):
    caption = item(anatomy_runs, "sink-tokens").caption
    assert f"at least {MIN_QUERIES} queries" in caption and "the 8 tokens" in caption
    assert caption.endswith("listed after the top 8 where it is not among them.")


def test_a_run_without_one_first_token_is_said_to_have_none_marked(anatomy_dirs, tmp_path):
    """A run without a BOS starts its sequences with text: no token is marked (position 0), and
    the caption, which promised a marked token, says so instead of leaving the reader looking."""
    import shutil

    runs = {name: shutil.copytree(path, tmp_path / name) for name, path in anatomy_dirs.items()}
    first = next(iter(runs))
    meta = json.loads((runs[first] / "meta.json").read_text())
    meta.update(bos_token_id=None, position0="no BOS: the first text token of each sequence")
    (runs[first] / "meta.json").write_text(json.dumps(meta))
    loaded = reports.load_runs(list(runs.values()))
    display = item(loaded, "sink-tokens").frame
    assert not any("(position 0)" in t for t in display.loc[[first], "token"])
    assert any("(position 0)" in t for t in display.drop(index=first)["token"])
    caption = item(loaded, "sink-tokens").caption
    assert caption.endswith(f"; {first} starts its sequences with different tokens: none is marked.")


# -- value drains, gate-sink curves ----------------------------------------------------------

def test_value_drains_are_head_means_per_layer(anatomy_runs, anatomy_dirs):
    ratio_ax, share_ax = plot_axes(reports.plot_value_drains(anatomy_runs))
    assert ratio_ax.get_yscale() == "log"
    for ax, column in ((ratio_ax, "value_norm_ratio"), (share_ax, "projection_share")):
        lines = {line.get_label(): line for line in ax.get_lines()}
        for model in anatomy_dirs:
            frame = csv(anatomy_dirs, model, "value_drains")
            expected = [np.nanmean(frame[frame["layer"] == l][column]) for l in range(6)]
            np.testing.assert_allclose(lines[model].get_ydata(), expected, rtol=1e-12)
            assert list(lines[model].get_xdata()) == list(range(6))
    # The head without a sink key (NaN) is left out of layer 0's mean, not counted as 0.
    frame = csv(anatomy_dirs, "sink_base", "value_drains")
    assert frame["value_norm_ratio"].isna().sum() == 1
    assert lines["sink_base"].get_ydata()[0] > 0


def test_gate_sink_curves_pool_heads_weighted_by_queries(anatomy_runs, anatomy_dirs):
    fig = reports.plot_gate_vs_sink_attention(anatomy_runs)
    (ax,) = plot_axes(fig)
    assert ax.get_title() == "sink_gated"   # the baseline has no gate_sink.csv
    frame = csv(anatomy_dirs, "sink_gated", "gate_sink")
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert sorted(lines) == sorted(f"layer {l}" for l in range(6))
    for layer in range(6):
        rows = frame[frame["layer"] == layer]
        attention, gate = [], []
        for lo in sorted(set(rows["attention_lo"])):
            b = rows[rows["attention_lo"] == lo]
            attention.append((b["attention"] * b["queries"]).sum() / b["queries"].sum())
            gate.append((b["gate"] * b["queries"]).sum() / b["queries"].sum())
        np.testing.assert_allclose(lines[f"layer {layer}"].get_xdata(), attention, rtol=1e-12)
        np.testing.assert_allclose(lines[f"layer {layer}"].get_ydata(), gate, rtol=1e-12)
    # Coloured by layer: the first and last layer's curves differ in colour.
    assert lines["layer 0"].get_color() != lines["layer 5"].get_color()
    assert "10 bins of width 0.1" in item(anatomy_runs, "gate-vs-sink").caption


# -- baseline F-Attn against the gated model's gate -------------------------------------------

def test_scatter_points_are_the_joined_tables(anatomy_runs, anatomy_dirs):
    (ax,) = plot_axes(reports.plot_gate_vs_baseline_f_attn(anatomy_runs))
    assert ax.get_title() == "sink_gated vs sink_base"
    (points,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    first = csv(anatomy_dirs, "sink_base", "first_token")
    gates = csv(anatomy_dirs, "sink_gated", "gates")
    expected = []
    for layer in range(6):
        for head in range(4):
            f = first[(first.layer == layer) & (first["head"] == head)
                      & (first.metric == "f_attn")]["value"]
            g = gates[(gates.layer == layer) & (gates["head"] == head) & (gates.metric == "mean")
                      & (gates.group == "all")]["value"]
            expected.append((float(f.iloc[0]), float(g.iloc[0])))
    np.testing.assert_allclose(points.get_offsets(), expected, rtol=1e-12)
    np.testing.assert_array_equal(points.get_array(), np.repeat(range(6), 4))


def test_scatter_needs_a_pair_on_the_same_tokens(anatomy_dirs, run_dirs):
    runs = reports.load_runs(list(anatomy_dirs.values()))
    runs.meta["sink_gated"]["tokens_sha256"] = "sha256:other"
    assert "f-attn-vs-gate" not in [i.id for i in section_of(runs).items]
    # No anatomy tables needed: the report fixture's runs with one digest get the figure alone.
    plain = reports.load_runs([run_dirs["baseline"], run_dirs["headwise"]])
    assert section_of(plain) is None
    for model in plain.models:
        plain.meta[model]["tokens_sha256"] = "sha256:same"
    assert [i.id for i in section_of(plain).items] == ["f-attn-vs-gate"]


# -- where the section appears ---------------------------------------------------------------

def test_runs_without_anatomy_tables_get_no_section(all_runs):
    sections = build_sections(all_runs)
    assert SECTION not in [s.id for s in sections]
    assert not any("anatomy" in s.title.lower() for s in sections)


def test_a_run_without_gate_has_no_gate_sink_figure(anatomy_dirs):
    runs = reports.load_runs([anatomy_dirs["sink_base"]])
    ids = [i.id for i in section_of(runs).items]
    assert ids == ["received-attention", "sink-tokens", "secondary-sinks", "value-drains"]


def test_anatomy_figures_are_numbered_with_the_rest(anatomy_runs):
    numbers = [i.number for s in shown(build_sections(anatomy_runs)) for i in s.items
               if isinstance(i, FigureItem)]
    assert numbers == list(range(1, len(numbers) + 1))
    labels = {i.id: i.label for i in section_of(anatomy_runs).items}
    assert labels["received-attention"].startswith("Figure ")
    assert labels["sink-tokens"].startswith("Table ")


def test_a_mixed_report_says_which_run_has_no_anatomy(anatomy_dirs, run_dirs):
    runs = reports.load_runs([anatomy_dirs["sink_base"], run_dirs["headwise"]])
    assert any("headwise was analysed without --anatomy" in n for n in section_of(runs).notes)


def test_html_and_pdf_carry_the_anatomy_figures(anatomy_dirs, anatomy_report):
    out = anatomy_report
    text = out["html"].read_text(encoding="utf-8")
    for figure_id in ("received-attention", "value-drains", "gate-vs-sink", "f-attn-vs-gate"):
        assert f'id="{figure_id}"' in text, figure_id
    for needle in ("http://", "https://", "file:", "<script", "<link"):
        assert needle not in text
    import pypdf

    pages = "\n".join(page.extract_text() for page in pypdf.PdfReader(out["pdf"]).pages)
    sections = build_sections(reports.load_runs(list(anatomy_dirs.values())))
    for anatomy_item in section_of(reports.load_runs(list(anatomy_dirs.values()))).items:
        assert f"{anatomy_item.label}." in pages, anatomy_item.id
    assert SECTION in [s.id for s in sections]


# -- ticks at 30 layers ----------------------------------------------------------------------

def test_no_tick_labels_overlap_with_30_layers(tmp_path, anatomy_runs):
    from matplotlib.axes import Axes

    from tests.reports.figure_boxes import figures_as_saved, overlaps, tick_label_boxes

    deep = reports.load_runs([write_anatomy_run(tmp_path, spec, seed)
                              for seed, spec in enumerate(DEEP_ANATOMY_SPECS)])
    checked = 0
    for runs in (anatomy_runs, deep):
        anatomy_ids = {item.id for item in section_of(runs).items if isinstance(item, FigureItem)}
        # At the PDF's sizes, as tests/reports/test_layout.py draws every figure.
        for figure_item, figure, renderer in figures_as_saved(runs, only=anatomy_ids):
            for ax in figure.findobj(Axes):
                for axis in ("x", "y"):
                    boxes = tick_label_boxes(ax, axis, renderer)
                    checked += len(boxes)
                    assert not overlaps(boxes), (figure_item.id, ax.get_title(), axis)
    assert checked > 200


def test_a_run_without_secondary_sinks_says_so(anatomy_dirs, tmp_path):
    copy = tmp_path / "sink_base"
    import shutil

    shutil.copytree(anatomy_dirs["sink_base"], copy)
    (copy / "secondary_sinks.csv").unlink()
    section = section_of(reports.load_runs([copy]))
    assert "secondary-sinks" not in [i.id for i in section.items]
    assert any(f"sink_base has no secondary sink" in n and f"ε = {EPSILON:g}" in n
               for n in section.notes)


def test_runs_without_a_secondary_sink_share_one_note(anatomy_dirs, tmp_path):
    """Several runs without a secondary sink get one sentence naming them all, not one each."""
    import shutil

    copies = []
    for model in anatomy_dirs:
        copy = tmp_path / model
        shutil.copytree(anatomy_dirs[model], copy)
        (copy / "secondary_sinks.csv").unlink()
        copies.append(copy)
    notes = [n for n in section_of(reports.load_runs(copies)).notes if "no secondary sink" in n]
    names = list(anatomy_dirs)
    assert notes == [f"{', '.join(names[:-1])} and {names[-1]} have no secondary sink: no key away from "
                     f"position 0 received a score above ε = {EPSILON:g} (secondary_sinks.csv is empty)."]


def test_gate_sink_caption_counts_bins_by_their_width(anatomy_dirs):
    runs = reports.load_runs(list(anatomy_dirs.values()))
    # A bin that no query reached has no row: the caption still says 10 bins.
    runs.gate_sink = runs.gate_sink[runs.gate_sink["attention_lo"] < 0.85]
    assert "10 bins of width 0.1" in item(runs, "gate-vs-sink").caption


def test_without_a_sink_the_sink_figures_are_left_out_and_said_so(anatomy_dirs, tmp_path):
    """Runs in which no key scores above ε (the tiny arms) get no value-drain, gate-against-sink
    or F-Attn-against-gate figure (their captions describe sinks that are not there), and the
    section says why."""
    import shutil

    runs = []
    for model, path in anatomy_dirs.items():
        copy = tmp_path / model
        shutil.copytree(path, copy)
        positions = pd.read_csv(copy / "received_by_position.csv")
        positions["sink_rate"] = 0.0
        positions.to_csv(copy / "received_by_position.csv", index=False)
        first = pd.read_csv(copy / "first_token.csv")
        first.loc[first["metric"] == "f_attn", "value"] = 0.05
        first.to_csv(copy / "first_token.csv", index=False)
        runs.append(copy)
    section = section_of(reports.load_runs(runs))
    ids = [item.id for item in section.items]
    assert "received-attention" in ids
    assert not {"value-drains", "gate-vs-sink", "f-attn-vs-gate"} & set(ids)
    assert any("No run has an attention sink" in note for note in section.notes)
    assert any("no head of sink_base has F-Attn above" in note for note in section.notes)
    # With the sinks (the fixture as written) the figures are there.
    assert {"value-drains", "gate-vs-sink", "f-attn-vs-gate"} <= {
        item.id for item in section_of(reports.load_runs(list(anatomy_dirs.values()))).items}


def test_key_buckets_seen_by_too_few_queries_are_hatched_and_captioned(anatomy_dirs, tmp_path):
    """The last bucket of a sequence (keys seen by few, nearby queries) is hatched in the
    heatmap and the caption says why; the bar is meta.json's anatomy_sink_min_queries."""
    import json
    import shutil

    from probe.reports.plots.anatomy import FEW_QUERIES_GID, few_query_columns

    runs = reports.load_runs(list(anatomy_dirs.values()))
    assert not any(few_query_columns(runs, model) for model in runs.models)   # 1024 tokens, bar 128
    assert "Hatched:" not in item(runs, "received-attention").caption
    copy = tmp_path / "sink_base"
    shutil.copytree(anatomy_dirs["sink_base"], copy)
    meta = json.loads((copy / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps({**meta, "anatomy_sink_min_queries": 300}))
    runs = reports.load_runs([copy])
    # Keys 512-1023 of 1024-token sequences: 256.5 queries each on average, under 300.
    assert few_query_columns(runs, "sink_base") == [len(buckets()) - 1]
    figure = reports.plot_received_attention(runs)
    hatched = [p for ax in figure.axes for p in ax.patches if p.get_gid() == FEW_QUERIES_GID]
    assert len(hatched) == 1 and hatched[0].get_x() == len(buckets()) - 1.5
    caption = item(runs, "received-attention").caption
    assert "Hatched: buckets whose keys are seen by fewer than 300 queries on average" in caption
    assert "at least 300 queries count" in item(runs, "secondary-sinks").caption
    assert "no secondary sink can be named" not in caption          # 1024 tokens, over 300
    # A bar at the sequence length: every key after position 0 is seen by fewer (key s by T - s),
    # so every column but the first is hatched, and the caption says what to do.
    (copy / "meta.json").write_text(json.dumps({**meta, "anatomy_sink_min_queries": 1024}))
    runs = reports.load_runs([copy])
    assert few_query_columns(runs, "sink_base") == list(range(1, len(buckets())))
    caption = item(runs, "received-attention").caption
    assert ("In sink_base, whose sequences have at most 1024 tokens, that is every key after position 0: "
            "no secondary sink can be named there; analyse sequences longer than 1024 tokens") in caption


def test_a_sink_only_at_the_end_of_the_sequences_is_no_sink(anatomy_dirs, tmp_path):
    """A key bucket above ε only where its keys have few queries (recency) does not count: the
    sink figures stay out, as for runs without any sink."""
    import shutil

    runs = []
    for model, path in anatomy_dirs.items():
        copy = tmp_path / model
        shutil.copytree(path, copy)
        positions = pd.read_csv(copy / "received_by_position.csv")
        last = positions["key_lo"] == positions["key_lo"].max()
        positions["sink_rate"] = 0.0
        positions.loc[last, "sink_rate"] = 0.5                            # keys 512-1023 only
        positions.loc[last, "queries"] = positions.loc[last, "cells"] * 20  # 20 queries a key
        positions.to_csv(copy / "received_by_position.csv", index=False)
        runs.append(copy)
    section = section_of(reports.load_runs(runs))
    assert not {"value-drains", "gate-vs-sink"} & {item.id for item in section.items}


def test_the_key0_table_shows_the_summarys_numbers_with_their_intervals(checkpoint, tmp_path):
    """A real --anatomy run: the section's key-0 table is summary.json anatomy's key0_score,
    key0_sink_rate and secondary_sinks with their brackets; synthetic runs without those numbers
    (written before them) get no such table."""
    import probe
    from tests.samples import TEXT

    a = probe.analyze(checkpoint("official_baseline"), texts=[TEXT[:2500]], seq_len=32, max_sequences=8,
                      anatomy=True, display_len=0, progress=False)
    runs = reports.load_runs([a.save(tmp_path / "base")])
    table = item(runs, "key0-intervals").frame
    an = a.summary["anatomy"]
    row = table.loc[runs.models[0]]
    assert row["key-0 score"] == f"{an['key0_score']:.3f} [{an['key0_score_lo']:.3f}, {an['key0_score_hi']:.3f}]"
    assert row["key-0 sink rate"].startswith(f"{an['key0_sink_rate']:.3f} [")
    assert row["secondary sinks"].startswith(f"{an['secondary_sinks']:,} [")
    assert an["key0_score_lo"] < an["key0_score"] < an["key0_score_hi"]
