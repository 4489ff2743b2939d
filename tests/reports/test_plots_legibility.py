"""reports.plots: figures readable as the report draws them (tick labels, axis ranges, lines),
checked through the matplotlib objects at the size the PDF saves them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from probe import reports
from probe.reports import pdf as report_pdf
from probe.reports.plots.attention_patterns import TOKEN_CHARS
from probe.reports.style import freeze_layout, report_style
from tests.reports.saved_runs import copy_runs  # noqa: F401  (copy_runs: fixture)


def as_saved(fig: Figure) -> Figure:
    """`fig` at the size the PDF (and --figures) saves it, laid out, its crowded tick labels
    thinned (style.freeze_layout), drawn."""
    with report_style():
        fig.set_size_inches(report_pdf.figure_size(tuple(fig.get_size_inches())))
        freeze_layout(fig)
        FigureCanvasAgg(fig).draw()
    return fig


def panels(fig: Figure) -> list[Axes]:
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def shown_labels(ax: Axes, axis: str):
    """The drawn, non-empty tick labels of one axis, major and minor, either side."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    return [label for label in target.get_ticklabels(which="both")
            if label.get_visible() and label.get_text().strip()]


# The demo's display prompt (probe's default length, 24 tokens): underscores and whitespace made
# visible, which at 6 pt ran into their neighbours.
DEMO_PROMPT = ["<|bos|>", "__", "all", "__", " =", " '", "c", "reate", "_", "sub", "pro", "cess",
               "_", "ex", "ec", "',", " '", "c", "reate", "_", "sub", "pro", "cess", "_"]
# Real tokenizers' longer tokens: cut to TOKEN_CHARS, the last "…".
REAL_PROMPT = ["JSON", " (", "Java", "Script", " Object", " Not", "ation", ")", " <", "https",
               "://", "json", ".", "org", ">", " is", " a", " subset", " of", "\n",
               "JavaScriptObjectNotation", " syntax", " (", "."]


def with_prompt(runs: dict, prompt: list[str]) -> None:
    """Rewrite the saved attention patterns of `runs` (name -> copied run) to `prompt`."""
    size = len(prompt)
    rng = np.random.default_rng(0)
    for path in runs.values():
        saved = pd.read_csv(path / "attention_patterns.csv")
        model, layers = saved["model"].iloc[0], sorted(set(saved["layer"]))
        rows = [{"model": model, "layer": layer, "query": query, "key": key, "value": float(weight)}
                for layer in layers for query in range(size)
                for key, weight in enumerate(rng.dirichlet(np.ones(query + 1)))]
        pd.DataFrame(rows).to_csv(path / "attention_patterns.csv", index=False)
        meta = json.loads((path / "meta.json").read_text())
        meta["display_tokens"] = prompt
        (path / "meta.json").write_text(json.dumps(meta))


def assert_every_token_labelled(fig: Figure, prompt: list[str]) -> list[str]:
    """Every panel labels each of its rows and columns, at 7 pt or more, keys upright; returns
    the texts of the last panel's key labels."""
    for ax in panels(fig):
        for axis in "xy":
            labels = shown_labels(ax, axis)
            assert len(labels) == len(prompt), (ax.get_title(), axis, len(labels))
            assert min(label.get_fontsize() for label in labels) >= 7.0
        assert {abs(label.get_rotation()) % 180 for label in shown_labels(ax, "x")} == {90}
    return [label.get_text() for label in shown_labels(ax, "x")]


def test_attention_patterns_label_every_row_of_five_panels_as_the_pdf_draws_them(copy_runs):
    """Five panels on one PDF page (two rows at the page's height, as the demo's five models):
    every query row and key column keeps its label (the PDF kept every other row), at 7 pt or
    more (6 pt before)."""
    runs = copy_runs("baseline", "hybrid")
    with_prompt(runs, DEMO_PROMPT)
    fig = as_saved(reports.plot_attention_patterns(list(runs.values()), max_layers=3))
    assert len(panels(fig)) == 5
    assert_every_token_labelled(fig, DEMO_PROMPT)


def test_attention_patterns_cut_long_tokens_with_an_ellipsis(copy_runs):
    """A token longer than TOKEN_CHARS is cut ("JavaScr…") instead of running into the next
    label; with three panels in a row (the real models' report) every token keeps its label."""
    runs = copy_runs("baseline", "hybrid")
    with_prompt(runs, REAL_PROMPT)
    fig = as_saved(reports.plot_attention_patterns(list(runs.values()), layers=[3, 5]))
    assert len(panels(fig)) == 3
    texts = assert_every_token_labelled(fig, REAL_PROMPT)
    assert max(map(len, texts)) <= TOKEN_CHARS
    assert "JavaScr…" in texts


def test_a_lone_attention_pattern_labels_its_tokens_on_one_side(run_dirs, display_tokens):
    """One panel drawn a column wide has room for every label left of and below the map."""
    fig = as_saved(reports.plot_attention_patterns(run_dirs["baseline"]))
    (ax,) = panels(fig)
    for axis in (ax.xaxis, ax.yaxis):
        assert len(axis.get_ticklabels()) == len(display_tokens) and not len(axis.get_minorticklocs())
    assert min(label.get_fontsize() for label in ax.get_yticklabels()) >= 7.0


# -- log axes: a labelled tick at or above the data ---------------------------------------------

def labelled_tick_above(ax: Axes, value: float) -> bool:
    """Whether a major tick of the y axis in view lies at or above `value` (log axes label
    every decade)."""
    low, high = ax.get_ylim()
    return any(value <= tick <= high * (1 + 1e-9) for tick in ax.yaxis.get_majorticklocs())


def test_m_act_axis_labels_a_decade_above_the_largest_value(copy_runs):
    """M-Act up to 54 ended the shared log axis near 70, its last labelled tick at 10."""
    runs = copy_runs("baseline", "hybrid")
    for path in runs.values():
        massive = pd.read_csv(path / "massive.csv")
        values = massive["metric"] != "count"
        top = float(massive.loc[massive["metric"] == "max_abs", "value"].max())
        massive.loc[values, "value"] *= 54.0 / top
        massive.to_csv(path / "massive.csv", index=False)
    for plot in (reports.plot_massive_activations, reports.plot_massive_by_layer):
        fig = plot(list(runs.values()))
        drawn = max(ax.dataLim.y1 for ax in panels(fig))
        assert drawn >= 54.0
        for ax in panels(fig):
            assert labelled_tick_above(ax, drawn), (plot.__name__, ax.get_ylim())


def test_gate_histograms_label_a_decade_above_the_largest_share(all_runs):
    fig = reports.plot_gate_histograms(all_runs)
    drawn = max(ax.dataLim.y1 for ax in panels(fig))
    for ax in panels(fig):
        assert ax.get_yscale() == "log"
        assert labelled_tick_above(ax, drawn), ax.get_ylim()


# -- gate histograms: tick labels of neighbouring panels ----------------------------------------

def test_gate_histogram_tick_labels_keep_apart_from_the_next_panel(all_runs):
    """The "1" at the right end of one panel and the "0" at the left end of the next read as
    "1 0": a panel with a left neighbour leaves its 0 unlabelled, so the labels of two panels
    side by side are at least a label's width apart."""
    fig = as_saved(reports.plot_gate_histograms(all_runs))
    renderer = fig.canvas.get_renderer()
    rows: dict[float, list[Axes]] = {}
    for ax in panels(fig):
        rows.setdefault(round(ax.get_position().y0, 3), []).append(ax)
    pairs = 0
    for row in rows.values():
        row.sort(key=lambda ax: ax.get_position().x0)
        for left, right in zip(row, row[1:]):
            left_boxes = [label.get_window_extent(renderer) for label in shown_labels(left, "x")]
            right_boxes = [label.get_window_extent(renderer) for label in shown_labels(right, "x")]
            if not left_boxes or not right_boxes:
                continue
            gap = min(b.x0 for b in right_boxes) - max(b.x1 for b in left_boxes)
            assert gap >= 12 * fig.dpi / 72, (left.get_title(), right.get_title(), gap)
            pairs += 1
    assert pairs


# -- sparsity bars: room above the tallest bar and whisker --------------------------------------

def test_sparsity_bars_and_whiskers_keep_clear_of_the_frame(all_runs):
    fig = reports.plot_sparsity_by_layer(all_runs)
    checked = 0
    for ax in panels(fig):
        tops = [bar.get_height() for bar in ax.patches]
        tops += [segment[:, 1].max() for lines in ax.collections for segment in lines.get_segments()]
        if not tops:
            continue
        assert ax.get_ylim()[1] >= 1.1 * max(tops), (ax.get_title(), ax.get_ylim(), max(tops))
        checked += 1
    assert checked


# -- gate saturation: the x axis covers a 2 * sigmoid gate's range ------------------------------

def test_gate_saturation_axis_covers_a_gate_that_reaches_2(copy_runs):
    """A grafted 2 * sigmoid gate scores in (0, 2); the logit axis ended at 0.995 and left the
    scores above 0.99 (42% of the demo graft's) off the plot."""
    runs = copy_runs("headwise")
    hist = pd.read_csv(runs["headwise"] / "gate_hist.csv")
    hist[["bin_lo", "bin_hi"]] *= 2.0                 # where the gate's bins end: its top
    hist.to_csv(runs["headwise"] / "gate_hist.csv", index=False)
    ax = reports.plot_gate_saturation(list(runs.values())).axes[0]
    (line,) = [line for line in ax.get_lines() if line.get_label() == "headwise"]
    low, high = ax.get_xlim()
    assert low < min(line.get_xdata()) and high >= 0.99 * 2.0
    ticks = [float(t.get_text()) for t in ax.get_xticklabels()]
    assert max(ticks) > 1.5 and min(ticks) <= 0.01
    assert list(line.get_xdata()) == [0.01, 0.1, 0.5, 0.9, 0.99]     # the same points
    # (A sigmoid gate keeps its logit axis over (0, 1): test_plots.test_gate_saturation_is_cumulative.)


# -- sink anatomy: every key-position column named; no scatter point on the frame ---------------

def anatomy_runs(root, count: int):
    from tests.reports.anatomy_runs import ANATOMY_SPECS, write_anatomy_run
    from tests.reports.saved_runs import RunSpec

    specs = [*ANATOMY_SPECS, RunSpec("sink_third", 6, 4, (), "none", 0.55, 900.0, training=False,
                                     patterns=False)][:count]
    return reports.load_runs([write_anatomy_run(root, spec, seed) for seed, spec in enumerate(specs)])


def test_received_attention_names_every_key_position_column_as_the_pdf_draws_it(tmp_path):
    """Three runs side by side (the real models' report): the PDF kept every other column's
    label, and the buckets 32-63 and 128-255 went unnamed."""
    fig = as_saved(reports.plot_received_attention(anatomy_runs(tmp_path, 3)))
    assert len(panels(fig)) == 3
    for ax in panels(fig):
        (image,) = ax.get_images()
        texts = [label.get_text() for label in shown_labels(ax, "x")]
        assert len(texts) == image.get_array().shape[1], (ax.get_title(), texts)
        assert {"32-63", "128-255"} <= set(texts)


def test_f_attn_scatter_leaves_room_left_of_0(tmp_path):
    """Heads with F-Attn near 0 were drawn half outside the frame (the x axis began at 0)."""
    fig = reports.plot_gate_vs_baseline_f_attn(anatomy_runs(tmp_path, 2))
    (ax,) = panels(fig)
    (points,) = ax.collections
    low, high = ax.get_xlim()
    assert low < 0 <= points.get_offsets()[:, 0].min()
    assert -low >= 0.02 * (high - low)
