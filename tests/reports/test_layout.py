"""Figures at the size the PDF and --figures save them: no two tick labels overlap, on any axis
of any figure, for the fixture runs and for deep (28- and 48-layer) runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg

from probe import reports
from probe.reports import pdf as report_pdf
from probe.reports.sections import FigureItem, build_sections, shown
from probe.reports.plots.linear_attention import plot_gdn_heads
from probe.reports.style import freeze_layout, report_style
from probe.reports.ticks import visible_tick_labels

from tests.reports.saved_runs import RunSpec, write_run
from tests.reports.figure_boxes import figures_as_saved, overlaps, tick_label_boxes

DEEP = (
    RunSpec("deep28", 28, 16, (), "none", 0.5, 900.0, training=True, patterns=True,
            interventions=True, buckets=True),
    RunSpec("deep48", 48, 16, (), "official_headwise", 0.08, 90.0, training=True,
            patterns=True, token_types=True, interventions=True, buckets=True),
)


@pytest.fixture(scope="module")
def deep_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("deep")
    return reports.load_runs([write_run(root, spec, seed) for seed, spec in enumerate(DEEP)])


@pytest.mark.parametrize("which", ["fixture", "deep"])
def test_no_two_tick_labels_overlap(which, all_runs, deep_runs):
    runs = all_runs if which == "fixture" else deep_runs
    checked = 0
    for item, figure, renderer in figures_as_saved(runs):
        for ax in figure.findobj(Axes):
            for axis in ("x", "y"):
                boxes = tick_label_boxes(ax, axis, renderer)
                checked += len(boxes)
                assert not overlaps(boxes), (item.id, ax.get_title(), axis,
                                             [l.get_text() for l in getattr(
                                                 ax, f"get_{axis}ticklabels")()])
    assert checked > 200  # the check saw the labels


def test_deep_heatmaps_still_label_first_and_some_layers(deep_runs):
    figure = reports.plot_first_token_heatmap(deep_runs)
    figure.set_size_inches(report_pdf.figure_size(tuple(figure.get_size_inches())))
    with report_style():
        freeze_layout(figure)
    ax = figure.axes[0]
    labels = [label.get_text() for label in ax.get_yticklabels() if label.get_text()]
    assert labels[0] == "0" and len(labels) >= 6


# Run names as GGUF file stems make them: long, without spaces.
LONG = (
    RunSpec("SmolLM2-135M-Instruct.Q4_1", 6, 3, (), "none", 0.5, 900.0, training=False,
            patterns=True, buckets=True, token_types=False),
    RunSpec("gemma-3-270m-q4_k_m", 4, 2, (), "none", 0.4, 300.0, training=False,
            patterns=True, buckets=True),
    RunSpec("Qwen3-Next-80B-A3B-Instruct.Q4_K_M", 4, 4, (), "official_headwise", 0.08, 90.0,
            training=False, patterns=True, token_types=True, buckets=True),
)


@pytest.fixture(scope="module")
def long_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    return reports.load_runs([write_run(root, spec, seed) for seed, spec in enumerate(LONG)])


@pytest.fixture(scope="module")
def long_figures(long_runs):
    """Every figure of the long-named runs as the PDF saves it, drawn once for the tests below."""
    return list(figures_as_saved(long_runs))


def test_long_names_in_panel_titles_do_not_run_together(long_figures):
    """Panel titles of one figure (one per model) do not overlap: a long name breaks after "-",
    "." or "_" (the compare PDF read "SmolLM2-135M-Instruct.Q4_1gemma-3-270m-q4_k_m")."""
    checked = 0
    for item, figure, renderer in long_figures:
        titles = [ax.title.get_window_extent(renderer) for ax in figure.findobj(Axes)
                  if ax.get_title().strip()]
        checked += len(titles)
        assert not overlaps(titles), (item.id, [ax.get_title() for ax in figure.findobj(Axes)])
        width = figure.bbox.width
        assert all(box.x0 >= -1 and box.x1 <= width + 1 for box in titles), item.id
    assert checked > 10


def test_legends_sit_beside_the_data_not_on_it(long_figures):
    """No legend covers its panel's plotting area (they covered the lines of the F-Attn figures,
    the uniform reference running through the legend's title)."""
    checked = 0
    for item, figure, renderer in long_figures:
        for ax in figure.findobj(Axes):
            legend = ax.get_legend()
            if legend is None or not legend.get_visible():
                continue
            checked += 1
            box, area = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert not overlaps([box, area]), (item.id, ax.get_title())
    assert checked >= 4


def test_sparsity_panels_have_their_own_y_scale(long_runs):
    """Each model's panel is scaled to its own bars (a shared scale flattened the smaller
    model's bars to nothing)."""
    figure = reports.plot_sparsity_by_layer(long_runs)
    axes = [ax for ax in figure.axes if ax.patches]
    tops = {round(ax.get_ylim()[1], 6) for ax in axes}
    highest = [max(p.get_height() for p in ax.patches) for ax in axes]
    for ax, high in zip(axes, highest):
        assert high >= 0.5 * ax.get_ylim()[1], ax.get_title()     # the bars fill the panel
    assert len(tops) > 1


def test_the_threshold_sweep_keeps_its_panels_wide_beside_a_long_legend(long_runs):
    figure = reports.plot_sparsity_sweep(long_runs)
    with report_style():
        freeze_layout(figure)
    for ax in figure.axes:
        assert ax.get_window_extent().width / figure.dpi >= 2.4     # inches, not 130 px


# Hybrids beside each other and beside a plain model. The F-Attn heatmaps' "(hatched: linear
# attention, no F-Attn)" notes ran into each other and off the figure's left edge; the GDN
# per-head maps' column titles ran under the colour bar of the column to their left.
HYBRIDS = (
    RunSpec("hybrid-gated", 4, 4, (0, 1, 2), "qwen3_next", 0.05, 60.0, training=False,
            patterns=False),
    RunSpec("hybrid-none", 4, 4, (0, 1, 2), "none", 0.3, 300.0, training=False, patterns=False),
    RunSpec("elementwise", 4, 4, (), "official_headwise", 0.08, 90.0, training=False,
            patterns=False),
)


def write_gdn_tables(path, spec: RunSpec, seed: int, keys: bool) -> None:
    """gdn_gates.csv (and gdn_keys.csv: --anatomy) with the rows plot_gdn_heads reads."""
    rng = np.random.default_rng(seed)
    gates, per_key = [], []
    for layer in spec.linear_layers:
        for head in range(spec.num_heads):
            for quantity in ("gate_silu", "beta", "decay"):
                gates.append((spec.name, layer, head, quantity, "all", "mean", rng.uniform(0, 1)))
            gates.append((spec.name, layer, head, "decay", "all", "half_life", rng.uniform(1, 99)))
            per_key.append((spec.name, layer, head, "key0_share", rng.uniform(0, 1e-3)))
    pd.DataFrame(gates, columns=["model", "layer", "head", "quantity", "group", "metric",
                                 "value"]).to_csv(path / "gdn_gates.csv", index=False)
    if keys:
        pd.DataFrame(per_key, columns=["model", "layer", "head", "metric", "value"]).to_csv(
            path / "gdn_keys.csv", index=False)


@pytest.fixture(scope="module")
def hybrid_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hybrids")
    dirs = {}
    for seed, spec in enumerate(HYBRIDS):
        dirs[spec.name] = write_run(root, spec, seed)
        if spec.linear_layers:        # --gdn; only the gated hybrid also with --anatomy
            write_gdn_tables(dirs[spec.name], spec, seed, keys=spec.gated)
    return dirs


def drawn_and_saved(plot, runs):
    """(size, figure, renderer): the figure as drawn (constrained layout at its own size, as a
    notebook shows it) and at each size the PDF and --figures give it (freeze_layout)."""
    with report_style():
        natural = tuple(plot(runs).get_size_inches())
        sizes = [natural, report_pdf.figure_size(natural)]
        if sizes[1][0] > report_pdf.COLUMN_WIDTH_IN:
            sizes.append(report_pdf.figure_size(natural, column=False))
        for size in sizes:
            figure = plot(runs)
            figure.set_size_inches(size)
            if size != natural:
                freeze_layout(figure)
            canvas = FigureCanvasAgg(figure)
            canvas.draw()
            yield size, figure, canvas.get_renderer()


def panel_texts(ax: Axes, renderer) -> list[tuple[str, object]]:
    """(text, box) of what a panel writes around itself: title, axis labels, the tick labels a
    draw shows (a colour bar's tick past its top is listed by get_yticklabels but not drawn)."""
    texts = [(text.get_text(), text.get_window_extent(renderer))
             for text in (ax.title, ax.xaxis.label, ax.yaxis.label)
             if text.get_visible() and text.get_text().strip()]
    return texts + [("tick label", box) for axis in (ax.xaxis, ax.yaxis)
                    for box in visible_tick_labels(axis, renderer)]


@pytest.mark.parametrize("names", [("hybrid-gated",), ("hybrid-gated", "hybrid-none"),
                                   ("hybrid-gated", "elementwise"),
                                   ("elementwise", "hybrid-gated", "hybrid-none")])
@pytest.mark.parametrize("plot", [reports.plot_first_token_heatmap, reports.plot_gate_heatmap,
                                  plot_gdn_heads])
def test_hybrid_panels_keep_their_text_to_themselves(names, plot, hybrid_dirs):
    """No title, axis label or tick label of one panel runs into another panel's text or axes
    (a colour bar included), and all of it lies inside the figure, as drawn and as saved."""
    runs = reports.load_runs([hybrid_dirs[name] for name in names])
    checked = 0
    for size, figure, renderer in drawn_and_saved(plot, runs):
        axes = figure.axes
        texts = [(i, text, box) for i, ax in enumerate(axes) for text, box in panel_texts(ax, renderer)]
        checked += len(texts)
        for i, text, box in texts:
            where = (plot.__name__, names, size, text)
            assert box.x0 >= -1 and box.y0 >= -1, where
            assert box.x1 <= figure.bbox.width + 1 and box.y1 <= figure.bbox.height + 1, where
            others = [(f"axes {j}", other.get_window_extent(renderer))
                      for j, other in enumerate(axes) if j != i]
            others += [(other, other_box) for j, other, other_box in texts if j != i]
            assert not [other for other, other_box in others if overlaps([box, other_box])], where
    assert checked > 20


def test_a_hybrid_without_per_key_terms_says_so_in_its_key0_panel(hybrid_dirs):
    """Beside a run analysed with --anatomy, the key-0 share panel of one without says why it
    is empty (it was a blank frame with axis labels)."""
    figure = plot_gdn_heads([hybrid_dirs["hybrid-gated"], hybrid_dirs["hybrid-none"]])
    with_keys, without = figure.axes[3], figure.axes[7]          # row-major: 2 models x 4 maps
    assert with_keys.images and not without.images
    assert "not measured\n(no --anatomy)" in [text.get_text() for text in without.texts]
    assert without.get_title() == "hybrid-none" and with_keys.get_title() == "key-0 share\nhybrid-gated"
