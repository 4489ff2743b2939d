"""The Analysis object: summary definitions, save / load round trip, atomic writes."""
from __future__ import annotations

import inspect
import json
import math

import pytest
import torch

import probe
from probe import ProbeError


@pytest.fixture(scope="module")
def analyses(checkpoint, text_file):
    return {k: probe.analyze(checkpoint(k), text_file, seq_len=48, progress=False)
            for k in ("qwen3_next", "official_elementwise", "llama")}


def test_summary_follows_the_paper_definitions(analyses):
    a = analyses["official_elementwise"]
    s = a.summary
    ft = a.first_token[a.first_token.metric == "f_attn"]
    per_layer = ft.groupby("layer").value.mean()
    assert s["f_attn"] == pytest.approx(per_layer.mean())
    assert s["sink_rate"] == pytest.approx((ft.value > 0.3).mean())
    mx = a.massive[(a.massive.site == "resid_post") & (a.massive.metric == "max_abs")]
    assert s["m_act"] == pytest.approx(mx.value.mean())
    g = a.gates[(a.gates.group == "all")]
    mean = g[g.metric == "mean"].value.to_numpy()
    count = g[g.metric == "count"].value.to_numpy()
    assert s["mean_gate"] == pytest.approx((mean * count).sum() / count.sum())
    assert s["perplexity"] == pytest.approx(math.exp(s["loss"]))
    assert 0 < s["f_attn_uniform"] < 1
    assert set(a.sparsity.variant) == {"ungated", "mean_gate", "gated"}
    assert {1e-2, 1e-3} <= set(a.sparsity.threshold)


def test_hybrid_layers_are_marked_not_zero_filled(analyses):
    a = analyses["qwen3_next"]
    linear = a.first_token[a.first_token.layer_type == "linear_attention"]
    assert len(linear) and linear.value.isna().all()
    assert a.summary["attention_layers"] == [3]
    assert [l["layer_type"] for l in a.summary["layers"]] == ["linear_attention"] * 3 + ["attention"]
    assert set(a.massive.layer) == {0, 1, 2, 3}          # M-Act applies to every layer


def test_baseline_has_no_gate_numbers(analyses):
    a = analyses["llama"]
    assert a.summary["mean_gate"] is None and a.gates.empty
    assert set(a.sparsity.variant) == {"ungated", "gated"}
    assert "BOS" in a.meta["position0"]


def test_save_and_load_round_trip(analyses, tmp_path):
    a = analyses["official_elementwise"]
    out = a.save(tmp_path / "run")
    for table in ("gates", "gate_hist", "first_token", "massive", "massive_top", "sparsity",
                  "attention_patterns"):
        assert (out / f"{table}.csv").exists(), table
    summary = json.loads((out / "summary.json").read_text())      # strict JSON, no pandas needed
    assert summary["layers"][0]["heads"][0]["f_attn"] == pytest.approx(
        a.summary["layers"][0]["heads"][0]["f_attn"])
    meta = json.loads((out / "meta.json").read_text())
    for key in ("checkpoint", "config_hash", "architecture", "gate_layout", "dtype", "device", "tokens",
                "seq_len", "position0", "bos_policy", "thresholds", "versions", "seed"):
        assert key in meta, key
    back = probe.Analysis.load(out)
    assert back.summary == json.loads(json.dumps(summary))
    assert back.first_token.shape == a.first_token.shape
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temporary left
    with pytest.raises(ProbeError, match="already exists.*force=True"):
        a.save(out)
    a.save(out, force=True)
    with pytest.raises(ProbeError, match="not a probe run directory"):
        probe.Analysis.load(tmp_path)


def test_notebook_display(analyses):
    a = analyses["qwen3_next"]
    html = a._repr_html_()
    assert "<table" in html and "qwen3_next" in html
    assert "f_attn" in repr(a)


def test_every_report_figure_is_an_analysis_method(analyses):
    """The methods come from the figure registry (reports.plots.__all__): each shows its plot's
    keyword arguments, defaults and annotations (the runs argument is the analysis itself) and its
    docstring, which help() prints; dir() offers them for completion."""
    import pydoc

    import probe.reports.plots
    from probe import reports

    a = analyses["qwen3_next"]
    assert set(reports.plots.__all__) <= set(dir(a))
    for name in reports.plots.__all__:
        method, function = getattr(a, name), getattr(reports, name)
        mine = list(inspect.signature(method).parameters.values())
        theirs = list(inspect.signature(function).parameters.values())[1:]
        assert [(p.name, p.default, str(p.annotation)) for p in mine] \
            == [(p.name, p.default, str(p.annotation)) for p in theirs], name
        assert inspect.getdoc(method) == inspect.getdoc(function), name
    shown = pydoc.render_doc(a.plot_gate_heatmap, renderer=pydoc.plaintext)
    assert "plot_gate_heatmap(*, fig" in shown and "cmap" in shown
    with pytest.raises(AttributeError, match="plot_nothing"):
        a.plot_nothing()


def test_tables_are_a_mapping_keyed_by_the_schema(analyses):
    from probe.results.analysis import TABLES

    a = analyses["qwen3_next"]
    assert list(a.tables) == list(TABLES)
    assert a.first_token is a.tables["first_token"] and len(a.first_token)
    a2 = probe.Analysis(a.meta, a.summary, first_token=a.first_token)
    a2.gates = a.gates                       # attribute writes land in the mapping
    assert a2.tables["gates"] is a.gates and len(a2.gate_hist) == 0
    with pytest.raises(TypeError, match="no table 'gatez'"):
        probe.Analysis({}, {}, gatez=a.gates)
    with pytest.raises(AttributeError):
        a.gatez


def test_plot_methods_return_figures_for_notebooks(analyses):
    from matplotlib.figure import Figure

    a = analyses["official_elementwise"]
    fig = a.plot_first_token_by_layer()              # an Axes-level plot: its Figure comes back
    assert isinstance(fig, Figure)
    assert fig.axes[0].get_legend() is not None
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert a.name in labels
    assert isinstance(a.plot_first_token_heatmap(), Figure)


def test_load_refuses_an_incomplete_or_damaged_run_directory(analyses, tmp_path):
    """A deleted or cut-short CSV, a column gone, a cell that is not a number: one ProbeError
    naming the file, never frames with blanks or a column of strings."""
    a = analyses["official_elementwise"]
    cases = {
        "deleted": (lambda run: (run / "massive.csv").unlink(), "massive.csv is missing"),
        "cut at a line end": (lambda run: _keep_lines(run / "sparsity.csv", 10), "has 9 rows but meta.json lists"),
        "no value column": (lambda run: a.gates.drop(columns="value").to_csv(run / "gates.csv", index=False),
                            "gates.csv lacks the column value"),
        "bad cell": (lambda run: _replace_cell(run / "first_token.csv", "value", 2, "n/a"), "'n/a' is not a number"),
    }
    for case, (damage, says) in cases.items():
        run = a.save(tmp_path / case.replace(" ", "_"))
        damage(run)
        with pytest.raises(ProbeError, match=says):
            probe.Analysis.load(run)
    back = probe.Analysis.load(a.save(tmp_path / "whole"))
    assert back.first_token.value.dtype == float and back.meta["tables"]["first_token"] == len(a.first_token)


def _keep_lines(path, n):
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:n]))


def _replace_cell(path, column, row, text):
    import pandas as pd

    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.loc[row, column] = text
    frame.to_csv(path, index=False)


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_run_directories_follow_the_umask(mask, analyses, tmp_path):
    import os
    import stat

    from probe import reports

    old = os.umask(mask)
    try:
        run = analyses["llama"].save(tmp_path / "run")
        reports.build_report([run], run, formats=["html"])
    finally:
        os.umask(old)
    assert stat.S_IMODE(run.stat().st_mode) == 0o777 & ~mask
    assert {stat.S_IMODE(p.stat().st_mode) for p in run.iterdir()} == {0o666 & ~mask}   # report.html too


def test_save_over_a_file_is_refused_and_leaves_nothing(analyses, tmp_path):
    target = tmp_path / "afile"
    target.write_text("mine")
    for force in (False, True):
        with pytest.raises(ProbeError, match="is a file") as err:
            analyses["llama"].save(target, force=force)
        assert "--out" not in str(err.value)        # a Python call names no command-line option
    assert target.read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["afile"]
    with pytest.raises(ProbeError, match="afile is a file, not a folder"):
        analyses["llama"].save(target / "sub")


def test_exact_control_counts_the_control_of_the_run(analyses, checkpoint, text_file, monkeypatch):
    """exact_control=True: sparsity.csv's mean-gate rows equal direct counts of |O| * m < t on the
    outputs of the second pass, with m the run's own mean gate; meta.json says every share is
    exact. Without it, a float32 run says its control is not (one pass cannot know m)."""
    from probe.run.control import ControlCounter

    outputs = {}
    observe = ControlCounter.on_attention

    def keep(self, module, query, key, out, *args, **kwargs):
        layer = self._mixer_layer[id(module)]
        valid = self.state.valid
        x = out.transpose(1, 2)
        outputs.setdefault(layer, []).append(x if valid is None else x[valid.to(x.device)].clone())
        observe(self, module, query, key, out, *args, **kwargs)
    monkeypatch.setattr(ControlCounter, "on_attention", keep)
    path = checkpoint("official_elementwise")
    exact = probe.analyze(path, text_file, seq_len=48, progress=False, exact_control=True)
    plain = analyses["official_elementwise"]
    assert exact.meta["sparsity_exact"] == {"ungated": True, "gated": True, "mean_gate": True}
    assert plain.meta["sparsity_exact"] == {"ungated": True, "gated": True, "mean_gate": False}
    assert exact.meta["sparsity_control"] == "second pass" and plain.meta["sparsity_control"] == "one pass"
    assert exact.meta["sparsity_error_bound"] == 0.0 and 0 < plain.meta["sparsity_error_bound"] < 0.05
    gates = exact.gates[(exact.gates.group == "all")]
    for layer, pieces in outputs.items():
        O = torch.cat([p.reshape(-1) for p in pieces]).double().abs()
        rows = gates[gates.layer == layer]
        m = float((rows[rows.metric == "mean"].value.to_numpy() * rows[rows.metric == "count"].value.to_numpy()).sum()
                  / rows[rows.metric == "count"].value.sum())
        sp = exact.sparsity[(exact.sparsity.layer == layer) & (exact.sparsity.variant == "mean_gate")]
        for t, value in zip(sp.threshold, sp.value):
            assert value == pytest.approx(int((O * m < t).sum()) / O.numel(), abs=1e-12), (layer, t)
        gap = abs(plain.sparsity.value.to_numpy() - exact.sparsity.value.to_numpy()).max()
        assert gap <= plain.meta["sparsity_error_bound"]           # the bound holds


def test_exact_control_keeps_per_sequence_counts_for_its_interval(checkpoint, monkeypatch):
    """The exact control's second pass also counts |O| * m < t per sequence (per_sequence.csv,
    variant mean_gate): equal to direct counts on each sequence's rows of O; summed over the
    sequences they give sparsity.csv's control share, and summary.json has its interval."""
    import numpy as np

    from probe.intervals import SequenceValues
    from probe.run.control import ControlCounter
    from tests.samples import TEXT

    rows = {}
    observe = ControlCounter.on_attention

    def keep(self, module, query, key, out, *args, **kwargs):
        layer, valid = self._mixer_layer[id(module)], self.state.valid
        for b, s in enumerate(self.state.seq_index.tolist()):
            x = out.transpose(1, 2)[b]                                              # (T, H, D)
            rows.setdefault(layer, {})[s] = x if valid is None else x[valid[b].to(x.device)].clone()
        observe(self, module, query, key, out, *args, **kwargs)
    monkeypatch.setattr(ControlCounter, "on_attention", keep)
    texts = [TEXT[:200], TEXT[200:330], TEXT[400:560], TEXT[800:860]]           # padded batches
    a = probe.analyze(checkpoint("official_elementwise"), texts=texts, per_document=True, seq_len=128,
                      batch_size=3, progress=False, exact_control=True)
    ps = a.per_sequence[a.per_sequence.key == "mean_gate"]
    gates = a.gates[(a.gates.group == "all")]
    for layer, by_seq in rows.items():
        g = gates[gates.layer == layer]
        count = g[g.metric == "count"].value.to_numpy()
        m = float((g[g.metric == "mean"].value.to_numpy() * count).sum() / count.sum())
        at = ps[ps.layer == layer]
        for s, x in by_seq.items():
            O = x.reshape(-1).double().abs()
            n = at[(at.sequence == s) & (at.quantity == "sparsity_n")].value
            assert int(n.iloc[0]) == O.numel()
            for t in (1e-2, 1e-3):
                below = at[(at.sequence == s) & (at.quantity == "sparsity_below") & np.isclose(at.threshold, t)]
                assert int(below.value.iloc[0]) == int((O * m < t).sum()), (layer, s, t)
    v = SequenceValues.from_frame(a.per_sequence)
    ones = np.ones((1, v.sequences))
    sp = a.sparsity[a.sparsity.variant == "mean_gate"]
    for t in (1e-2, 1e-3):
        want = sp[np.isclose(sp.threshold, t)].set_index("layer")["value"]
        np.testing.assert_allclose(v.sparsity_layers(ones, "mean_gate", t)[0], want.loc[v.attention_layers],
                                   rtol=1e-12)
    entry = a.summary["layers"][v.attention_layers[0]]
    lo, hi = entry["sparsity_lo"]["mean_gate"]["0.01"], entry["sparsity_hi"]["mean_gate"]["0.01"]
    assert lo <= entry["sparsity"]["mean_gate"]["0.01"] <= hi and lo < hi
