"""reports/sections/linear_attention.py, reports/plots/linear_attention.py and
reports/claims/scope.py on a tiny Qwen3.5 hybrid analysed with --gdn: the table and the figure
show the run's own gdn_*.csv and first_token.csv numbers (recomputed here from the tables with
pandas), the section is left out in one line without --gdn, and the claims table says which
claims speak about GDN layers."""
from __future__ import annotations

import numpy as np
import pytest

import probe
from probe.reports.claims.scope import linear_attention_scope
from probe.reports.plots.linear_attention import plot_sink_by_layer
from probe.reports.runs import load_runs
from probe.reports.sections.linear_attention import linear_attention, per_layer
from tests.samples import TEXT


@pytest.fixture(scope="module")
def hybrid_runs(checkpoint, tmp_path_factory):
    """(with --gdn, without) one Qwen3.5 hybrid's run directories, and the --gdn Analysis."""
    root = tmp_path_factory.mktemp("gdn-report")
    opts = dict(texts=[TEXT[:600]], seq_len=48, batch_size=2, max_sequences=3, progress=False, resamples=100)
    with_gdn = probe.analyze(checkpoint("qwen3_5"), gdn=True, anatomy=True, **opts)
    with_gdn.save(root / "gdn")
    probe.analyze(checkpoint("qwen3_5"), **opts).save(root / "plain")
    probe.analyze(checkpoint("qwen3_5"), gdn=True, **opts).save(root / "no-keys")
    return load_runs([root / "gdn"]), load_runs([root / "plain"]), with_gdn, load_runs([root / "no-keys"])


def test_table_shows_the_runs_own_numbers(hybrid_runs):
    runs, _, a, _ = hybrid_runs
    table = per_layer(runs)
    gates, keys = a.tables["gdn_gates"], a.tables["gdn_keys"]
    assert list(table["layer"]) == ["0", "1", "2"]
    for _, row in table.iterrows():
        layer = int(row["layer"])
        mean = lambda q, m="mean": gates[(gates.layer == layer) & (gates.quantity == q) & (gates.group == "all")
                                         & (gates.metric == m)].value.mean()
        assert float(row["SiLU(z)"]) == pytest.approx(mean("gate_silu"), abs=5e-4)
        assert float(row["β"]) == pytest.approx(mean("beta"), abs=5e-4)
        assert float(row["half-life"]) == pytest.approx(mean("decay", "half_life"), rel=5e-3)
        key0 = keys[(keys.layer == layer) & (keys.metric == "key0_share")].value.mean()
        assert float(row["key-0 share"]) == pytest.approx(key0, rel=5e-3)
        assert not row["check"].endswith("FAIL")


def test_sink_figure_puts_f_attn_and_key0_share_on_one_layer_axis(hybrid_runs):
    runs, _, a, _ = hybrid_runs
    ax = plot_sink_by_layer(runs).axes[0]              # the figure that holds the axes
    points = {line.get_marker(): (list(line.get_xdata()), list(line.get_ydata()))
              for line in ax.lines if line.get_linestyle() == "None" and len(line.get_xdata())}
    first = a.tables["first_token"]
    f_attn = first[(first.metric == "f_attn") & (first.layer_type != "linear_attention")].groupby("layer").value.mean()
    keys = a.tables["gdn_keys"]
    key0 = keys[keys.metric == "key0_share"].groupby("layer").value.mean()
    assert points["o"][0] == list(f_attn.index) == [3]
    np.testing.assert_allclose(points["o"][1], np.maximum(f_attn.to_numpy(), 1e-6), rtol=1e-12)
    assert points["s"][0] == list(key0.index) == [0, 1, 2]
    np.testing.assert_allclose(points["s"][1], np.maximum(key0.to_numpy(), 1e-6), rtol=1e-12)
    assert ax.get_yscale() == "log"


def test_sink_figure_joins_only_points_of_one_quantity_and_labels_their_decade(hybrid_runs):
    """A line ran from the last GDN layer's key-0 share (square) to the next softmax layer's
    F-Attn (circle), two different quantities; the log axis ended below 0.1 with no tick above
    1e-2, so F-Attn near 0.06 could not be read; the marker kinds' legend entries were the grey
    of a model."""
    from matplotlib.colors import to_rgba

    from probe.reports.style import model_colors

    runs, _, _, _ = hybrid_runs
    ax = plot_sink_by_layer(runs).axes[0]
    markers = {line.get_marker(): set(line.get_xdata()) for line in ax.lines
               if line.get_linestyle() == "None" and len(line.get_xdata())}
    softmax, gdn = markers["o"], markers["s"]
    joined = [set(line.get_xdata()) for line in ax.lines
              if line.get_linestyle() == "-" and len(line.get_xdata()) > 1]
    assert all(layers <= softmax or layers <= gdn for layers in joined), joined
    assert any(layers <= gdn for layers in joined)        # consecutive GDN layers still joined
    drawn = max(max(line.get_ydata()) for line in ax.lines if len(line.get_ydata()))
    low, high = ax.get_ylim()
    assert any(drawn <= tick <= high * (1 + 1e-9) for tick in ax.yaxis.get_majorticklocs())
    legend = dict(zip([t.get_text() for t in ax.get_legend().get_texts()], ax.get_legend().legend_handles))
    colours = {to_rgba(colour) for colour in model_colors(runs.models).values()}
    for entry in ("softmax: F-Attn", "GDN: key-0 share"):
        handle = legend[entry]
        assert handle.get_markerfacecolor() == "none"
        assert to_rgba(handle.get_markeredgecolor()) not in colours


def test_no_section_and_no_claims_note_without_a_hybrid(run_dirs):
    runs = load_runs([run_dirs["baseline"], run_dirs["headwise"]])
    assert linear_attention(runs) is None and linear_attention_scope(runs) == []


def test_section_left_out_in_one_line_without_gdn(hybrid_runs):
    runs, plain, a, _ = hybrid_runs
    shown = linear_attention(runs)
    assert shown.omitted is None and [i.id for i in shown.items] == ["gdn-sink-by-layer", "gdn-heads", "gdn-per-layer",
                                                                "gdn-received"]
    s = a.summary["gdn"]
    assert f"(95% interval [{s['key0_share_lo']:.3g}, {s['key0_share_hi']:.3g}])" in shown.intro
    left = linear_attention(plain)
    assert left.omitted and not left.items and "\n" not in left.omitted


def test_claims_say_which_claims_cover_gdn_layers(hybrid_runs, loaded):
    runs, plain, _, _ = hybrid_runs
    (with_gdn,), (without,) = linear_attention_scope(runs), linear_attention_scope(plain)
    assert "Claims 1-3 are judged on the softmax-attention layers only" in with_gdn
    assert "section on linear-attention layers" in with_gdn and "--gdn" in without


def test_without_anatomy_the_section_shows_the_gates_and_says_how_to_get_the_key_terms(hybrid_runs):
    """--gdn alone measures gates, beta and decay; the per-key terms (an extra Q.K^T pass) come
    with --anatomy: no sink figure, no key-0 column, and one note saying so."""
    *_, no_keys = hybrid_runs
    section = linear_attention(no_keys)
    assert [i.id for i in section.items] == ["gdn-heads", "gdn-per-layer"]
    assert "--gdn --anatomy" in section.notes[0]
    assert set(per_layer(no_keys)["key-0 share"]) == {"n/a"}
    assert no_keys.summary[no_keys.models[0]]["gdn"]["key0_share"] is None


def test_the_received_table_reads_the_gdn_received_tables(checkpoint):
    """gdn-received: per GDN layer, key 0's score equals the head mean of gdn_received.csv's
    [0, 1) bucket (which is the layer's key-0 share), and the top tokens are the by-token table's."""
    from probe.reports.runs import load_runs
    from probe.reports.sections.linear_attention import received
    from tests.samples import TEXT

    a = probe.analyze(checkpoint("qwen3_5"), texts=[TEXT[:500]], seq_len=48, max_sequences=2, progress=False,
                      gdn=True, anatomy=True, resamples=0, name="hybrid")
    runs = load_runs(a)
    table = received(runs)
    assert list(table["layer"]) == ["0", "1", "2"]
    rec = a.tables["gdn_received"]
    keys = a.tables["gdn_keys"]
    from probe.reports.text import plain

    for _, row in table.iterrows():
        layer = int(row["layer"])
        want = rec[(rec.layer == layer) & (rec.key_lo == 0)].score.mean()
        share = keys[(keys.layer == layer) & (keys.metric == "key0_share")].value.mean()
        assert row["key 0"] == f"{want:.3g}" == f"{share:.3g}"
        top = a.tables["gdn_received_by_token"].query("layer == @layer and rank == 0").iloc[0]
        assert row["top tokens"].startswith(f"{plain(top.token)!r} {top.score:.3g}")
    from probe.reports.sections import build_sections

    section = next(s for s in build_sections(runs) if s.id == "linear-attention")
    assert any(item.id == "gdn-received" for item in section.items)
