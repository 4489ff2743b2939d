"""The table across context lengths (reports/context.py), its figures and the report section,
checked against the runs' own tables."""
from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from probe import reports
from probe.api.sweep import sweep
from probe.reports.context import context_table, series_label
from probe.reports.runs import load_runs
from probe.reports.sections import build_sections
from tests.samples import TEXT


@pytest.fixture(scope="module")
def swept(checkpoint):
    result = sweep(checkpoint("qwen3"), [TEXT * 2], lengths=(32, 128), rope_scaling="yarn:2", progress=False,
                   display_len=0, progress_line=lambda line: None)
    return list(result.runs.values())


def test_the_table_is_the_runs_own_numbers(swept):
    table = context_table(swept)
    assert set(table.series) == {"qwen3 + yarn x2"} and set(table.length) == {32, 128}
    for a in swept:
        T = a.meta["context_sweep"]["length"]
        mine = table[table.length == T]
        pooled = mine[mine.scope == "pooled"].set_index("metric")["value"]
        for key in ("f_attn", "f_attn_uniform", "sink_rate", "m_act", "loss"):
            assert pooled[key] == a.summary[key]
        assert pooled["m_act_max"] == a.massive_top.abs_value.max()
        ft = a.first_token[a.first_token.metric == "f_attn"]
        layer = mine[(mine.scope == "layer") & (mine.metric == "f_attn")].set_index("layer")["value"]
        for i, heads in ft.groupby("layer"):
            assert layer[i] == pytest.approx(heads.value.mean(), rel=1e-12)
        # Every bucket, pooled over layers and heads; their query-weighted mean is the pooled F-Attn.
        buckets = mine[(mine.scope == "bucket") & (mine.metric == "f_attn")]
        rows = a.first_token_buckets.groupby("bucket_lo").agg(value=("value", "mean"), n=("n_queries", "first"))
        assert list(buckets.bucket_lo) == list(rows.index)
        weighted = (rows.value * rows.n).sum() / rows.n.sum()
        assert weighted == pytest.approx(a.summary["f_attn"], rel=1e-9)
        # The loss by position, as summary.json keeps it; pair-weighted, the run's loss.
        loss = mine[(mine.scope == "bucket") & (mine.metric == "loss")]
        kept = a.summary["loss_by_position"]
        assert list(loss.value) == [e["loss"] for e in kept]
        pairs = sum(e["pairs"] for e in kept)
        assert sum(e["loss"] * e["pairs"] for e in kept) / pairs == pytest.approx(a.summary["loss"], rel=1e-9)


def test_labels():
    assert series_label({"model": "m", "rope_scaling": None}) == "m"
    assert series_label({"model": "m", "rope_scaling": "yarn:4"}) == "m + yarn x4"
    assert series_label({"model": "m", "rope_scaling": {"rope_type": "linear", "factor": 2}}) == "m + linear x2"
    assert series_label({"model": "m", "rope_scaling": '{"rope_type": "yarn", "factor": 16}'}) == "m + yarn x16"


def test_section_and_figures(swept, checkpoint):
    runs = load_runs(swept)
    section = next(s for s in build_sections(runs) if s.id == "context-length")
    assert [item.id for item in section.items] == ["context-length", "context-buckets", "context-table"]
    assert "2,048" in section.items[0].caption              # the config's original positions
    for plot in (reports.plot_context_length, reports.plot_context_buckets):
        figure = plot(runs)
        assert isinstance(figure, Figure)
        figure.canvas.draw()
    # Runs that are not part of a sweep get no section (the report reads as before).
    plain = load_runs([swept[0].__class__(meta={k: v for k, v in swept[0].meta.items() if k != "context_sweep"},
                                          summary=swept[0].summary, first_token=swept[0].first_token,
                                          massive=swept[0].massive)])
    assert all(s.id != "context-length" for s in build_sections(plain))
