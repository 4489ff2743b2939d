"""reports.plots: every figure checked through its artists, not its pixels."""

from __future__ import annotations

import json

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.patches import Rectangle

from probe import reports
from probe.reports.plots._layout import NOT_APPLICABLE_GID
from probe.reports.plots.attention_patterns import TOKEN_CHARS
from probe.reports.text import plain, visible_token


def tick_labels(ax: Axes, axis: str = "x") -> list[str]:
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [tick.get_text() for tick in ticks]


def legend_labels(ax: Axes) -> list[str]:
    legend = ax.get_legend()
    assert legend is not None, "no legend"
    return [text.get_text() for text in legend.get_texts()]


def panels(fig: Figure) -> list[Axes]:
    """Plot panels: visible axes that are not colorbars."""
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def images(ax: Axes) -> list[AxesImage]:
    return [artist for artist in ax.get_children() if isinstance(artist, AxesImage)]


def not_applicable_texts(fig: Figure) -> list[str]:
    return [text.get_text() for ax in fig.axes for text in ax.texts
            if text.get_gid() == NOT_APPLICABLE_GID]


def layer_labels(layers) -> list[str]:
    return [str(layer) for layer in layers]


def test_first_token_heatmap_is_layers_by_heads_with_one_scale(all_runs, specs):
    fig = reports.plot_first_token_heatmap(all_runs)
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == list(all_runs.models)
    norms = set()
    for ax in axes:
        spec = specs[ax.get_title()]
        (image,) = images(ax)
        assert image.get_array().shape == (spec.num_layers, spec.num_heads)
        assert tick_labels(ax, "y") == layer_labels(range(spec.num_layers))
        assert tick_labels(ax, "x") == layer_labels(range(spec.num_heads))
        assert ax.get_ylabel() == "layer"
        norms.add((image.norm.vmin, image.norm.vmax))
    assert len(norms) == 1, "panels must share one colour scale"
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)


def test_first_token_heatmap_hatches_linear_attention_layers(all_runs, specs):
    fig = reports.plot_first_token_heatmap(all_runs)
    hybrid = next(ax for ax in panels(fig) if ax.get_title() == "hybrid")
    hatched = [p for p in hybrid.patches if isinstance(p, Rectangle) and p.get_hatch()]
    rows = sorted(int(p.get_y() + 0.5) for p in hatched)
    assert rows == list(specs["hybrid"].linear_layers)
    assert "linear attention" in hybrid.get_xlabel()
    assert np.ma.is_masked(images(hybrid)[0].get_array()[0, 0])
    baseline = next(ax for ax in panels(fig) if ax.get_title() == "baseline")
    assert not [p for p in baseline.patches if p.get_hatch()]


def test_first_token_by_layer_overlays_models_with_uniform_reference(all_runs):
    ax = reports.plot_first_token_by_layer(all_runs).axes[0]
    # The three runs read the same queries: one grey reference, not three coinciding lines.
    assert legend_labels(ax) == [*all_runs.models, "uniform 1/(t+1)"]
    assert tick_labels(ax) == layer_labels(range(6))  # union of 4- and 6-layer models
    hybrid = next(line for line in ax.get_lines() if line.get_label() == "hybrid")
    assert list(hybrid.get_xdata()) == [3, 5]  # attention layers only
    uniform = all_runs.summary["baseline"]["f_attn_uniform"]
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and np.allclose(dashed[0].get_ydata(), uniform)
    assert "F-Attn" in ax.get_ylabel()


def test_different_uniform_references_get_one_line_per_model(run_dirs):
    from dataclasses import replace

    runs = reports.load_runs([run_dirs["baseline"], run_dirs["headwise"]])
    summary = {**runs.summary, "headwise": {**runs.summary["headwise"], "f_attn_uniform": 0.02}}
    ax = reports.plot_first_token_by_layer(replace(runs, summary=summary)).axes[0]
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert [line.get_ydata()[0] for line in dashed] == [0.0068, 0.02]
    assert legend_labels(ax)[2:] == ["uniform 1/(t+1), baseline", "uniform 1/(t+1), headwise"]


def test_plots_accept_paths_analyses_and_a_given_axes(run_dirs):
    fig = Figure()
    ax = fig.add_subplot()
    assert reports.plot_first_token_by_layer(run_dirs["baseline"], ax=ax) is fig
    assert legend_labels(ax) == ["baseline", "uniform 1/(t+1)"]
    heatmap = reports.plot_first_token_heatmap([str(run_dirs["headwise"])])
    assert [a.get_title() for a in panels(heatmap)] == ["headwise"]


def token_labels(ax: Axes, axis: str = "x") -> list[str]:
    """The tick labels of both sides (major and minor ticks), in the order of their positions."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    ticks = [(loc, label.get_text()) for minor in (False, True)  # each shown on one side only
             for loc, label in zip(target.get_ticklocs(minor=minor), target.get_ticklabels(minor=minor))]
    return [text for _, text in sorted(ticks)]


def strongest_sink_layer(run) -> int:
    """The saved layer whose head-mean pattern puts most weight on key 0 (queries t >= 1)."""
    rows = pd.read_csv(run / "attention_patterns.csv")
    first = rows[(rows["key"] == 0) & (rows["query"] >= 1)]
    means = first.groupby("layer")["value"].mean()
    return int(means.idxmax())


def test_attention_patterns_show_token_labels_per_model_and_layer(all_runs, display_tokens,
                                                                  run_dirs):
    fig = reports.plot_attention_patterns(all_runs)
    titles = [ax.get_title() for ax in panels(fig)]
    # headwise saved no patterns; by default one panel per model, its strongest sink
    assert titles == [f"{name}, layer {strongest_sink_layer(run_dirs[name])}"
                      for name in ("baseline", "hybrid")]
    expected = [visible_token(token, TOKEN_CHARS).replace("$", r"\$") for token in display_tokens]
    for ax in panels(fig):
        (image,) = images(ax)
        assert image.get_array().shape == (len(display_tokens), len(display_tokens))
        assert token_labels(ax, "x") == expected
        assert token_labels(ax, "y") == expected
    fig.canvas.draw()  # "$" in a token must not be read as mathtext
    # More layers on request: first, middle and last of each model
    fig = reports.plot_attention_patterns(all_runs, max_layers=3)
    assert [ax.get_title() for ax in panels(fig)] == [
        "baseline, layer 0", "baseline, layer 2", "baseline, layer 3", "hybrid, layer 3",
        "hybrid, layer 5"]


def test_attention_patterns_choose_requested_layers(all_runs):
    fig = reports.plot_attention_patterns(all_runs, layers=[3])
    assert [ax.get_title() for ax in panels(fig)] == ["baseline, layer 3", "hybrid, layer 3"]


def test_massive_activations_four_sites_log_scale(all_runs):
    fig = reports.plot_massive_activations(all_runs)
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == ["attention output", "residual after attention",
                                               "MLP output", "layer output"]
    for ax in axes:
        assert ax.get_yscale() == "log"
        assert tick_labels(ax) == layer_labels(range(6))
        solid = [line.get_label() for line in ax.get_lines() if line.get_linestyle() == "-"]
        assert solid == list(all_runs.models)
    # After the models, what the dotted lines and the shades are (grey entries drawn nowhere).
    banded = any(c.get_label() == "_interval" for ax in axes for c in ax.collections)
    assert legend_labels(axes[-1]) == [*all_runs.models, "median |h|", *(["95% interval"] if banded else [])]


def test_massive_by_layer_single_site(all_runs):
    ax = reports.plot_massive_by_layer(all_runs, site="attn_out").axes[0]
    baseline = next(line for line in ax.get_lines() if line.get_label() == "baseline")
    expected = all_runs.massive.query(
        "model == 'baseline' and site == 'attn_out' and metric == 'max_abs'")["value"]
    assert np.allclose(baseline.get_ydata(), expected)
    banded = any(c.get_label() == "_interval" for c in ax.collections)
    assert legend_labels(ax) == [*all_runs.models, "median |h|", *(["95% interval"] if banded else [])]
    key = next(line for line in ax.get_lines() if line.get_label() == "median |h|")
    assert key.get_linestyle() == ":" and len(key.get_xdata()) == 0      # drawn nowhere


def test_gate_histograms_one_panel_per_gated_layer(all_runs):
    fig = reports.plot_gate_histograms(all_runs)
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == ["layer 0", "layer 1", "layer 2", "layer 3",
                                               "layer 5"]
    layer3 = axes[3]
    assert sorted(p.get_label() for p in layer3.patches) == ["headwise", "hybrid"]
    shares = layer3.patches[0].get_data().values
    assert np.isclose(np.nansum(shares), 1.0)
    assert legend_labels(axes[-1]) == ["headwise", "hybrid"]
    assert axes[0].get_yscale() == "log"


def test_gate_stats_by_layer(all_runs):
    ax = reports.plot_gate_stats_by_layer(all_runs).axes[0]
    assert legend_labels(ax) == ["headwise", "hybrid", "mean ± 1 std", "min, max"]
    assert tick_labels(ax) == layer_labels(range(6))
    hybrid = next(line for line in ax.get_lines() if line.get_label() == "hybrid")
    assert list(hybrid.get_xdata()) == [3, 5]
    assert ax.get_ylabel() == "gate score"


def test_gate_heatmap_only_gated_models(all_runs, specs):
    fig = reports.plot_gate_heatmap(all_runs)
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == ["headwise", "hybrid"]
    for ax in axes:
        spec = specs[ax.get_title()]
        assert images(ax)[0].get_array().shape == (spec.num_layers, spec.num_heads)
        assert tick_labels(ax, "y") == layer_labels(range(spec.num_layers))
    assert "no gate" in axes[1].get_xlabel()


def test_gate_saturation_is_cumulative(all_runs, run_dirs):
    ax = reports.plot_gate_saturation(all_runs).axes[0]
    assert tick_labels(ax) == ["0.01", "0.1", "0.5", "0.9", "0.99"]
    assert legend_labels(ax) == ["headwise", "hybrid"]
    assert ax.get_xscale() == "logit" and not ax.patches  # lines, not bins
    # Against gates.csv read directly: count-weighted share below x, 1 - share above for 0.9+.
    gates = pd.read_csv(run_dirs["headwise"] / "gates.csv")
    wide = gates[gates["group"] == "all"].pivot_table(index=["layer", "head"], columns="metric",
                                                      values="value")
    share = {m: np.average(wide[m], weights=wide["count"]) for m in wide.columns}
    expected = [share["frac_lt_0.01"], share["frac_lt_0.1"], share["frac_lt_0.5"],
                1 - share["frac_gt_0.9"], 1 - share["frac_gt_0.99"]]
    line = next(line for line in ax.get_lines() if line.get_label() == "headwise")
    assert list(line.get_xdata()) == [0.01, 0.1, 0.5, 0.9, 0.99]
    assert np.allclose(line.get_ydata(), expected, rtol=1e-12)
    assert all(np.diff(line.get_ydata()) >= 0)


def test_sparsity_by_layer_bars_per_model_and_threshold(all_runs):
    fig = reports.plot_sparsity_by_layer(all_runs)
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == [
        "baseline, |x| < 0.01", "baseline, |x| < 0.001",
        "headwise, |x| < 0.01", "headwise, |x| < 0.001",
        "hybrid, |x| < 0.01", "hybrid, |x| < 0.001"]
    # The rows carry as little text as they can (a PDF page draws them shorter): "layer" under
    # the bottom row only, one label of the y axes for the figure.
    assert [ax.get_xlabel() for ax in axes] == ["", "", "", "", "layer", "layer"]
    assert fig.get_supylabel() == "share below threshold" and not any(ax.get_ylabel() for ax in axes)
    assert tick_labels(axes[0]) == layer_labels(range(4))
    assert tick_labels(axes[4]) == ["3", "5"]
    assert len(axes[0].patches) == 4  # baseline: one (ungated) bar per layer
    assert len(axes[2].patches) == 3 * 4  # gated: ungated, mean gate, gated
    assert legend_labels(axes[1]) == ["ungated O", "O × mean gate (uniform control)",
                                      "O ⊙ g (dynamic gate)"]


def test_sparsity_sweep_log_threshold(all_runs):
    fig = reports.plot_sparsity_sweep(all_runs)
    axes = panels(fig)
    assert len(axes) == 3
    assert all(ax.get_xscale() == "log" for ax in axes)
    assert [line.get_label() for line in axes[0].get_lines()] == list(all_runs.models)
    assert [line.get_label() for line in axes[1].get_lines()] == ["headwise", "hybrid"]
    assert legend_labels(axes[-1]) == list(all_runs.models)


def test_sparsity_sweep_of_baselines_only_has_no_empty_panels(run_dirs):
    # Ungated models have neither a mean-gate control nor a gated output of their own.
    fig = reports.plot_sparsity_sweep(run_dirs["baseline"])
    (ax,) = panels(fig)
    assert ax.get_title() == "ungated O"
    assert [line.get_label() for line in ax.get_lines()] == ["baseline"]


def test_training_curves_and_spikes(all_runs):
    fig = reports.plot_training(all_runs)
    loss_ax, grad_ax = panels(fig)
    assert legend_labels(grad_ax) == ["baseline", "hybrid", "held-out (eval)"]
    assert loss_ax.get_xlabel() == "step"
    # The solid line is the centred moving average of the raw losses (pandas, window 2%).
    log = all_runs.training[all_runs.training["model"] == "baseline"].sort_values("step")
    window = max(1, round(len(log) / 50))
    solid = next(line for line in loss_ax.get_lines() if line.get_label() == "baseline")
    assert np.allclose(solid.get_ydata(),
                       log["train_loss"].rolling(window, min_periods=1, center=True).mean())
    evals = [line for line in loss_ax.get_lines() if line.get_label() == "_eval"]
    assert evals and min(line.get_zorder() for line in evals) > solid.get_zorder()
    spikes = [c for c in loss_ax.collections if c.get_label() == "_spike"]
    assert sum(len(c.get_offsets()) for c in spikes) == 4


@pytest.mark.parametrize("plot", [
    reports.plot_gate_histograms, reports.plot_gate_heatmap,
])
def test_gate_figures_say_when_no_model_has_a_gate(run_dirs, plot):
    fig = plot(run_dirs["baseline"])
    assert any("No gated model" in text for text in not_applicable_texts(fig))
    width, height = fig.get_size_inches()
    assert width >= 3 and height >= 1.5           # room for the note (the histograms' was 2.7 x 0.6)


@pytest.mark.parametrize("plot", [
    reports.plot_gate_stats_by_layer, reports.plot_gate_saturation,
])
def test_gate_axes_say_when_no_model_has_a_gate(run_dirs, plot):
    fig = plot(run_dirs["baseline"])
    assert any("No gated model" in text for text in not_applicable_texts(fig))


@pytest.mark.parametrize("plot, argument, value, choices", [
    (reports.plot_gate_stats_by_layer, "group", "bos", "'all', 'first', 'rest'"),
    (reports.plot_gate_saturation, "group", "First", "'all', 'first', 'rest'"),
    (reports.plot_gate_heatmap, "group", "rest ", "'all', 'first', 'rest'"),
    (reports.plot_gate_heatmap, "metric", "avg", "'count', 'mean', 'std'"),
    (reports.plot_massive_by_layer, "site", "resid", "'attn_out', 'resid_mid', 'mlp_out', 'resid_post'"),
    (reports.plot_first_token_heatmap, "metric", "fattn", "'f_attn', 'f_attn_paper'"),
    (reports.plot_first_token_by_layer, "metric", "F-Attn", "'f_attn', 'f_attn_paper'"),
])
def test_a_misspelt_choice_is_an_error_that_lists_the_choices(run_dirs, plot, argument, value, choices):
    # Of a gated run: the misspelt group once drew "No gated model in these runs".
    with pytest.raises(ValueError, match="^" + argument + "=") as error:
        plot(run_dirs["headwise"], **{argument: value})
    assert repr(value) in str(error.value) and choices in str(error.value)


def test_every_site_is_checked_before_the_four_panels_draw(run_dirs):
    with pytest.raises(ValueError, match="site='mlp' is not one of"):
        reports.plot_massive_activations(run_dirs["headwise"], sites=("attn_out", "mlp"))
    fig = reports.plot_gate_stats_by_layer(run_dirs["headwise"], group="first")
    assert not not_applicable_texts(fig)


def test_missing_training_and_patterns_are_said(run_dirs):
    assert not_applicable_texts(reports.plot_training(run_dirs["headwise"]))
    assert not_applicable_texts(reports.plot_attention_patterns(run_dirs["headwise"]))


def test_every_plot_returns_a_figure_that_saves(all_runs, tmp_path):
    """Notebooks call .savefig on what a plot returns (issue: 7 of 17 returned an Axes)."""
    for name in reports.plots.__all__:
        figure = getattr(reports, name)(all_runs)
        assert isinstance(figure, Figure), name
        figure.savefig(tmp_path / f"{name}.png")
    fig = Figure()
    ax = fig.add_subplot()
    assert reports.plot_gate_saturation(all_runs, ax=ax) is fig


def test_every_plot_draws(all_runs):
    """Layout and text rendering run without error on mixed depths and hybrid layers."""
    for plot in (reports.plot_first_token_heatmap, reports.plot_gate_histograms,
                 reports.plot_sparsity_by_layer, reports.plot_sparsity_sweep,
                 reports.plot_training, reports.plot_gate_heatmap,
                 reports.plot_gate_by_token_type, reports.plot_interventions_by_layer):
        plot(all_runs).canvas.draw()
    for plot in (reports.plot_first_token_by_layer, reports.plot_gate_stats_by_layer,
                 reports.plot_gate_saturation, reports.plot_interventions,
                 reports.plot_first_token_by_bucket, reports.plot_loss_by_length):
        plot(all_runs).canvas.draw()


def test_gate_by_token_type_is_layers_by_types_for_models_with_the_table(all_runs, specs):
    fig = reports.plot_gate_by_token_type(all_runs)
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == ["headwise", "hybrid"]  # baseline: no gate
    for ax in axes:
        spec = specs[ax.get_title()]
        (image,) = images(ax)
        labels = tick_labels(ax)
        assert labels[0] == "first" and "word_start" in labels
        assert "special" not in labels  # a type that never occurs has no column
        assert image.get_array().shape == (len(spec.attention_layers), len(labels))
        assert tick_labels(ax, "y") == layer_labels(spec.attention_layers)
        assert ax.get_xlabel() == "token type" and ax.get_ylabel() == "layer"
    assert tick_labels(axes[1])[-1] == plain("dollar $")  # "$" escaped from mathtext
    headwise = images(axes[0])[0].get_array()
    assert headwise.mask[:, -1].all()  # no user group in that run: empty column
    assert len({images(ax)[0].norm.vmax for ax in axes}) == 1
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)


def test_interventions_bars_per_model_all_layers(all_runs):
    ax = reports.plot_interventions(all_runs).axes[0]
    assert legend_labels(ax) == ["baseline", "hybrid"]  # headwise has no interventions.csv
    assert [label.replace("\n", " ") for label in tick_labels(ax)] == [
        "gate → layer mean", "gate = 1 (ungated)", "gate = 0 (attention off)",
        "massive activations → 0"]
    assert ax.get_ylabel().startswith("Δ loss")
    heights = {container.get_label(): [bar.get_height() for bar in container]
               for container in ax.containers}
    assert heights["hybrid"] == pytest.approx([0.4, 0.9, 2.5, 0.05])  # the layer -1 rows
    assert heights["baseline"] == pytest.approx([0.05])  # only massive_zero applies


def test_interventions_by_layer_one_panel_per_intervention(all_runs):
    fig = reports.plot_interventions_by_layer(all_runs)
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == ["gate → layer mean", "gate = 1 (ungated)",
                                               "gate = 0 (attention off)",
                                               "massive activations → 0"]
    assert legend_labels(axes[-1]) == ["baseline", "hybrid"]
    hybrid = next(line for line in axes[0].get_lines() if line.get_label() == "hybrid")
    assert list(hybrid.get_xdata()) == [3, 5]  # attention layers; the layer -1 row left out
    assert axes[0].get_xlabel() == "layer"


def test_first_token_by_bucket_lines_with_uniform_reference(all_runs):
    ax = reports.plot_first_token_by_bucket(all_runs).axes[0]
    # hybrid has no buckets; both others share the uniform reference: one grey line
    assert legend_labels(ax) == ["baseline", "headwise", "uniform 1/(t+1)"]
    assert tick_labels(ax) == ["1", "1K", "4K"]  # each bucket at its first position
    assert ax.get_xscale() == "log" and "F-Attn" in ax.get_ylabel()
    assert ax.get_yscale() == "log"  # sink and uniform differ by decades
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1
    assert np.allclose(dashed[0].get_ydata(), [0.007, 0.007 / 4, 0.007 / 16])


def test_powers_of_two_buckets_of_a_short_run(run_dirs, tmp_path):
    """A 128-token run has buckets [1, 2) ... [64, 128): seven points, and the caption says so."""
    import shutil

    import pandas as pd

    from probe.reports.sections import build_sections

    run = Path(shutil.copytree(run_dirs["headwise"], tmp_path / "headwise"))
    rows = [{"model": "headwise", "layer": layer, "head": head, "bucket_lo": 2 ** k,
             "bucket_hi": 2 ** (k + 1), "value": 0.1, "n_queries": 2 ** k, "uniform": 0.05}
            for layer in range(4) for head in range(4) for k in range(7)]
    pd.DataFrame(rows).to_csv(run / "first_token_buckets.csv", index=False)
    ax = reports.plot_first_token_by_bucket(run).axes[0]
    assert tick_labels(ax) == ["1", "2", "4", "8", "16", "32", "64"]
    # Nine buckets (512 tokens): every other one named, so that "128" and "256" stay apart.
    pd.DataFrame([{**row, "bucket_lo": 2 ** k, "bucket_hi": 2 ** (k + 1), "n_queries": 2 ** k}
                  for row in rows[:1] for k in range(9)]).to_csv(run / "first_token_buckets.csv", index=False)
    ax = reports.plot_first_token_by_bucket(run).axes[0]
    assert tick_labels(ax) == ["1", "", "4", "", "16", "", "64", "", "256"]
    assert list(ax.get_xticks()) == [2 ** k for k in range(9)]
    pd.DataFrame(rows).to_csv(run / "first_token_buckets.csv", index=False)
    figure = next(item for section in build_sections(reports.load_runs(run))
                  for item in section.items if item.id == "f-attn-by-position")
    assert "2^k ≤ t < 2^(k+1) (7 buckets, from t = 1 below 128)" in figure.caption
    # With meta.json's longest_sequence the caption names the last position, not the bucket's edge.
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "longest_sequence": 100}))
    figure = next(item for section in build_sections(reports.load_runs(run))
                  for item in section.items if item.id == "f-attn-by-position")
    assert ("(7 buckets, from t = 1 up to t = 99, the last position of the longest sequence "
            "analysed (100 tokens))") in figure.caption


def test_loss_by_length_and_training_length(all_runs):
    ax = reports.plot_loss_by_length(all_runs).axes[0]
    assert legend_labels(ax) == ["baseline"]
    assert tick_labels(ax) == ["16", "64", "128", "256", "512"]
    assert ax.get_xlabel() == "input length (tokens)"
    # meta.json's seq_len (1024), the analysed length, is drawn dotted
    assert [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"] \
        == [1024]


def test_new_plots_say_when_no_run_has_the_table(run_dirs):
    headwise, baseline = run_dirs["headwise"], run_dirs["baseline"]
    assert any("interventions.csv" in t.get_text()
               for t in reports.plot_interventions(headwise).axes[0].texts)
    assert not_applicable_texts(reports.plot_interventions_by_layer(headwise))
    assert any("gates_by_token_type.csv" in text
               for text in not_applicable_texts(reports.plot_gate_by_token_type(baseline)))
    assert any("first_token_buckets.csv" in t.get_text()
               for t in reports.plot_first_token_by_bucket(run_dirs["hybrid"]).axes[0].texts)
    assert any("inference.csv" in t.get_text()
               for t in reports.plot_loss_by_length(headwise).axes[0].texts)


def test_deep_models_get_round_layer_ticks():
    from probe.reports.plots._layout import set_layer_ticks

    ax = Figure().add_subplot()
    set_layer_ticks(ax, range(48), max_ticks=12)
    assert tick_labels(ax) == layer_labels(range(0, 48, 4))
    set_layer_ticks(ax, [3, 7, 11, 15], max_ticks=12)
    assert tick_labels(ax) == ["3", "7", "11", "15"]


def test_spread_keeps_first_and_last():
    from probe.reports.plots._layout import spread

    assert spread(range(48), 3) == [0, 24, 47]
    assert spread([3, 7], 3) == [3, 7]


def test_seven_models_get_colours_far_apart_and_trajectories_markers_of_their_own(run_dirs):
    """The graft experiment's seven trajectories: seaborn's colorblind order gave orange and
    vermillion (RGB distance 0.20), pink and light pink to neighbours in the legend."""
    import dataclasses
    from itertools import combinations

    import pandas as pd

    from probe.reports.style import model_colors

    rgb = np.array(list(model_colors([f"m{i}" for i in range(7)]).values()))
    assert min(np.linalg.norm(a - b) for a, b in combinations(rgb, 2)) > 0.28
    rows = [dict(model=m, step=s, tokens=s * 256, metric="loss", value=3.0 - s / 100)
            for m in ("headwise", "hybrid") for s in (0, 15)]
    runs = reports.load_runs([run_dirs["headwise"], run_dirs["hybrid"]])
    fig = reports.plot_trajectory(dataclasses.replace(runs, tables={**runs.tables, "trajectory": pd.DataFrame(rows)}))
    loss = next(ax for ax in panels(fig) if ax.get_title() == "held-out loss")
    assert len({line.get_marker() for line in loss.get_lines()}) == 2


def test_trajectory_draws_each_metric_against_the_step(run_dirs, tmp_path):
    """trajectory.csv read from a run directory: one line per model and metric with the file's
    values at its steps; a model measured at one step is a horizontal line at that value."""
    import dataclasses

    import pandas as pd

    rows = [dict(model="baseline", step=0, tokens=0, metric=m, value=v)
            for m, v in (("loss", 3.0), ("f_attn", 0.5), ("m_act", 900.0))]
    rows += [dict(model="headwise", step=s, tokens=s * 256, metric=m, value=v + s / 100)
             for s in (0, 15, 30) for m, v in (("loss", 2.9), ("f_attn", 0.4), ("mean_gate", 1.0))]
    trajectory = pd.DataFrame(rows)
    runs = reports.load_runs([run_dirs["baseline"], run_dirs["headwise"]])
    fig = reports.plot_trajectory(dataclasses.replace(runs, tables={**runs.tables, "trajectory": trajectory}))
    axes = {ax.get_title(): ax for ax in panels(fig)}
    loss = axes["held-out loss"]
    line = next(l for l in loss.get_lines() if l.get_label() == "headwise")
    assert list(line.get_xdata()) == [0, 15, 30] and np.allclose(line.get_ydata(), [2.9, 3.05, 3.2])
    base = next(l for l in loss.get_lines() if l.get_label() == "baseline")
    assert np.allclose(base.get_ydata(), [3.0, 3.0]) and base.get_linestyle() == "--"
    assert [l.get_label() for l in axes["mean gate"].get_lines()] == ["headwise"]
    assert any("no model has sink rate" in t for t in not_applicable_texts(fig))
    fig.savefig(tmp_path / "trajectory.png")
    assert not_applicable_texts(reports.plot_trajectory(runs))            # no trajectory.csv: said


def test_sparsity_rows_share_a_y_scale_unless_their_shares_differ_too_much(run_dirs):
    """Bars of two models compare by height only on one scale: a column shares its y axis while
    the models' tallest bars lie within SHARED_SCALE_RATIO; past it each panel has its own, and
    the caption tells the reader to read the ticks."""
    from probe.reports.plots.sparsity import SHARED_SCALE_RATIO
    from probe.reports.sections import build_sections

    def caption(runs):
        return next(item.caption for section in build_sections(runs) for item in section.items
                    if item.id == "sparsity-by-layer")

    def limits(runs):
        axes = panels(reports.plot_sparsity_by_layer(runs))
        return [ax.get_ylim() for ax in axes[0::2]], [ax.get_ylim() for ax in axes[1::2]]

    runs = reports.load_runs([run_dirs["baseline"], run_dirs["headwise"]])
    frame = runs.sparsity
    tallest = frame.groupby(["model", "threshold"])["value"].max()
    # Tallest bars 0.4 and 0.2 at each threshold (within the ratio): one scale per column.
    frame["value"] = frame["value"] / frame.set_index(["model", "threshold"]).index.map(tallest).to_numpy() * 0.4
    frame.loc[frame["model"] == "headwise", "value"] /= 2
    for column in limits(runs):
        assert len(set(column)) == 1, column
    assert "The panels of a column share one y scale." in caption(runs)
    # The second model's shares SHARED_SCALE_RATIO x 2 smaller than the first's: a scale per panel.
    frame.loc[frame["model"] == "headwise", "value"] /= SHARED_SCALE_RATIO
    first, _ = limits(runs)
    assert first[0][1] > 4 * first[1][1], first
    assert f"differ more than {SHARED_SCALE_RATIO:g}-fold" in caption(runs)
