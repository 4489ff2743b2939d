"""Helpers shared by the plot modules: new figures, layer axes, hatched cells, legends."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import Colormap, Normalize
from matplotlib.figure import Figure, SubFigure
from matplotlib.image import AxesImage
from matplotlib.patches import Rectangle

from probe.reports.measure import text_width, wrap
from probe.reports.labels import LINEAR_ATTENTION
from probe.reports.style import HATCH_COLOR, KEY_COLOR, MISSING_COLOR
from probe.reports.text import plain

# Past this many layers every n-th tick is labelled, or the labels overlap.
MAX_LAYER_TICKS = 32
_TICK_STEPS = (1, 2, 4, 5, 8, 10, 12, 16, 20, 25, 50, 100)
# Rows shorter than this (more layers than this in a heatmap) get no written reason.
MAX_LABELLED_ROWS = 16

NOT_APPLICABLE_GID = "not-applicable"


def new_figure(width: float, height: float) -> Figure:
    # The object API (no pyplot): no global figure registry, no GUI backend, safe under Agg.
    show_inline_in_ipython()
    return Figure(figsize=(width, height), layout="constrained")


# The formats IPython could draw a Figure in: one already set means the user chose (%matplotlib
# inline, set_matplotlib_formats) and probe leaves it alone.
_FIGURE_FORMATS = ("image/png", "image/svg+xml", "image/jpeg", "application/pdf", "text/html")


def show_inline_in_ipython() -> None:
    """In a Jupyter kernel, let a probe Figure that ends a cell draw as a PNG.

    matplotlib registers IPython's figure formatter only when pyplot starts the inline backend;
    probe never imports pyplot (figures come from the object API), so in a plain kernel a figure
    printed as "<Figure size 360x390 with 2 Axes>". Outside IPython this does nothing."""
    import sys

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if not formatters or "image/png" not in formatters:
        return
    if any(Figure in getattr(formatters.get(kind), "type_printers", {}) for kind in _FIGURE_FORMATS):
        return
    from IPython.core.pylabtools import print_figure

    formatters["image/png"].for_type(Figure, lambda fig: print_figure(fig, "png", bbox_inches="tight"))


def axes_or_new(ax: Axes | None, width: float = 6.4, height: float = 3.6) -> Axes:
    return ax if ax is not None else new_figure(width, height).add_subplot()


def figure_or_new(fig: Figure | SubFigure | None, width: float,
                  height: float) -> Figure | SubFigure:
    return fig if fig is not None else new_figure(width, height)


def set_layer_ticks(ax: Axes, layers: Sequence[int], axis: str = "x", label: str = "layer",
                    positions: Sequence[float] | None = None,
                    max_ticks: int = MAX_LAYER_TICKS) -> None:
    """Ticks labelled with the layer indices, at the indices or at given `positions`.

    With more layers than `max_ticks`, every n-th layer is labelled (n from a short list of
    round steps), so the labels never run into each other.
    """
    layers = [int(layer) for layer in layers]
    positions = list(layers if positions is None else positions)
    step = next((s for s in _TICK_STEPS if math.ceil(len(layers) / s) <= max_ticks),
                math.ceil(len(layers) / max_ticks))
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_ticks(positions[::step], labels=[str(layer) for layer in layers[::step]])
    target.set_label_text(label)


def staggered_ticks(ax: Axes, axis: str, labels: Sequence[str], **text: Any) -> None:
    """Label position i of `axis` with labels[i], alternately on its two sides: even positions
    as major ticks (left of or below the axes), odd ones as minor ticks (right of or above).
    Each side then needs a label's height per two positions, so a panel too narrow to label
    every row or column on one side (the PDF kept every other one, declutter_ticks) still
    labels them all. `text`: Text properties of the labels (fontsize, rotation)."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    for minor, start in ((False, 0), (True, 1)):
        positions = range(start, len(labels), 2)
        target.set_ticks(positions, labels=[labels[p] for p in positions], minor=minor, **text)
    length = mpl.rcParams[f"{axis}tick.major.size"]
    first, second = ("bottom", "top") if axis == "x" else ("left", "right")
    ax.tick_params(axis=axis, which="major", **{first: True, second: False,
                                                 f"label{first}": True, f"label{second}": False})
    ax.tick_params(axis=axis, which="minor", length=length,
                   **{first: False, second: True, f"label{first}": False, f"label{second}": True})


def layer_head_heatmap(ax: Axes, matrix: np.ndarray, *, norm: Normalize, cmap: str | Colormap,
                       missing_label: dict[int, str] | None = None) -> AxesImage:
    """Draw a (layers, heads) matrix with layers down and heads across; hatch NaN cells.

    `missing_label` maps a layer whose whole row is NaN to a short reason written in the row.
    """
    layers, heads = matrix.shape
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap=_with_missing_color(cmap), norm=norm,
                      aspect="auto", interpolation="none")
    hatch_missing(ax, matrix, missing_label or {})
    set_layer_ticks(ax, range(layers), axis="y")
    head_step = max(1, math.ceil(heads / 16))
    ax.set_xticks(range(0, heads, head_step), labels=[str(h) for h in range(0, heads, head_step)])
    ax.set_xlabel("head")
    ax.grid(False)
    return image


def model_heatmaps(fig: Figure | SubFigure, runs: Any, models: Sequence[str],
                   matrices: Sequence[np.ndarray], *, cmap: str | Colormap, vmax: float | None,
                   label: str, notes: Sequence[str | None]) -> None:
    """One layer x head heatmap per model, side by side, on one colour scale and colour bar.

    Rows of linear-attention layers are hatched and say so; `notes[i]`, where not None, says
    under panel i what its hatched rows mean.
    """
    norm = shared_norm(matrices, vmax)
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model, matrix, note in zip(axes, models, matrices, notes):
        linear = runs.layers_of_type(model, LINEAR_ATTENTION)
        image = layer_head_heatmap(ax, matrix, norm=norm, cmap=cmap,
                                   missing_label={layer: "linear attn." for layer in linear})
        panel_title(ax, model, panels=len(models))
        if note is not None:
            note_hatched_rows(ax, note, panels=len(models))
    fig.colorbar(image, ax=list(axes), label=label, shrink=0.9)


# The share of a panel's slot (the figure's width over the panels side by side) that its axes
# get where each panel has its own layer tick labels and axis label and the panels share a colour
# bar: the F-Attn heatmaps of one to three models measure 0.63-0.70 as drawn. The PDF draws two
# models' 6-inch figure in a 5.2-inch column (axes 119 pt, 0.55 of the slot as drawn): a note of
# this width then runs a few points past its axes but stays 20 points clear of the next one.
HEATMAP_SHARE = 0.68


def panel_width(ax: Axes, panels: int = 1, share: float = 0.85) -> float:
    """Points a panel's text may span: `share` of its slot, the figure's width over `panels`."""
    return ax.get_figure(root=True).get_figwidth() * 72 / max(panels, 1) * share


def panel_title(ax: Axes, text: str, *, panels: int = 1, fontsize: float = 9.0,
                after: str | None = None, share: float = 0.85) -> None:
    """A panel's title wrapped to the panel's width: long run names (GGUF file stems such as
    "SmolLM2-135M-Instruct.Q4_1") break after "-", "." or "_" instead of running into the
    next panel's title. `panels`: how many panels share the figure's width; `after`: a line
    under the name (a threshold, a layer), wrapped the same way; `share`: the part of a
    panel's slot its title may span (less than 0.85, the gaps alone, where a colour bar or
    tick labels sit beside every panel)."""
    width = panel_width(ax, panels, share)                               # points
    # Measured in the weight the title is drawn in: the report's titles are bold, about 13% wider.
    bold = str(mpl.rcParams["axes.titleweight"]) == "bold"
    lines = [line for part in [text] + ([after] if after else [])
             for given in plain(part).split("\n")
             for line in break_name(given, width, fontsize, bold)]
    ax.set_title("\n".join(lines), fontsize=fontsize)


def break_name(text: str, width_pt: float, size: float, bold: bool = False) -> list[str]:
    """`text` in lines no wider than `width_pt`, broken after spaces, "-", "." or "_" (inside a
    part only where one part alone is too wide)."""
    lines, line = [], ""
    for part in re.split(r"(?<=[-._ ])", text):
        if line and text_width(line + part, size, bold) > width_pt:
            lines.append(line.rstrip())
            line = ""
        line += part
    lines.append(line.rstrip())
    return [piece for line in lines for piece in wrap(line, width_pt, size, bold)]


def _with_missing_color(cmap: str | Colormap) -> Colormap:
    from matplotlib import colormaps

    base = colormaps[cmap] if isinstance(cmap, str) else cmap
    return base.with_extremes(bad=MISSING_COLOR)


def hatch_missing(ax: Axes, matrix: np.ndarray, row_labels: dict[int, str]) -> None:
    """Hatch NaN cells: one patch per all-NaN row (with its reason), one per other NaN cell."""
    missing = np.isnan(matrix)
    heads = matrix.shape[1]
    for layer in range(matrix.shape[0]):
        if missing[layer].all():
            ax.add_patch(_hatched(-0.5, layer - 0.5, heads))
            if layer in row_labels and matrix.shape[0] <= MAX_LABELLED_ROWS:
                ax.text((heads - 1) / 2, layer, row_labels[layer], ha="center", va="center",
                        fontsize=6.5, color="#444444", clip_on=True,
                        bbox={"facecolor": MISSING_COLOR, "edgecolor": "none", "pad": 0.6})
            continue
        for head in np.flatnonzero(missing[layer]):
            ax.add_patch(_hatched(head - 0.5, layer - 0.5, 1))


def _hatched(x: float, y: float, width: float) -> Rectangle:
    return Rectangle((x, y), width, 1, fill=False, hatch="////", edgecolor=HATCH_COLOR,
                     linewidth=0, gid=NOT_APPLICABLE_GID)


def note_hatched_rows(ax: Axes, reason: str, panels: int = 1) -> None:
    """Say under the panel what its hatched rows mean, wrapped to the panel's width (`panels`
    side by side): in one line it was wider than the panel and ran into the next panel's note,
    or off the figure's left edge, once the PDF drew two panels in a column.

    Kept inside the axes' own labels rather than in a figure legend: figure-level artists do
    not follow the figure into a subfigure or a PDF page's layout rectangle.
    """
    size = ax.xaxis.label.get_fontsize()
    note = wrap_phrases(f"(hatched: {reason})", panel_width(ax, panels, HEATMAP_SHARE), size)
    ax.set_xlabel("\n".join([ax.get_xlabel(), *note]))


def wrap_phrases(text: str, width_pt: float, size: float) -> list[str]:
    """`text` in lines no wider than `width_pt`, broken after commas where it can ("linear
    attention," / "no F-Attn" reads better than "linear attention, no" / "F-Attn"), at spaces
    only inside a phrase too wide alone."""
    lines: list[str] = []
    for phrase in re.split(r"(?<=,) ", text):
        joined = f"{lines[-1]} {phrase}" if lines else phrase
        if lines and text_width(joined, size) <= width_pt:
            lines[-1] = joined
        else:
            lines.append(phrase)
    return [piece for line in lines for piece in wrap(line, width_pt, size)]


def legend_beside(ax: Axes, title: str | None = "model") -> None:
    """The panel's legend off the data: inside, it covered lines and markers (the uniform
    reference ran through its title). Short entries go in a column right of the panel; long
    ones (GGUF run names) in rows above it, where a column would squeeze the panel to a strip.
    Constrained layout makes room either way."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    width = ax.get_figure(root=True).get_figwidth() * 72                 # points
    entry = max(text_width(plain(label), 8.0) for label in labels) + 34     # marker and gap
    if entry <= 0.3 * width:
        ax.legend(title=title, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        return
    columns = max(1, min(len(labels), int(0.95 * width // entry)))
    ax.legend(title=title, loc="lower left", bbox_to_anchor=(0.0, 1.02), borderaxespad=0.0,
              ncols=columns, fontsize=8)


def key_line(ax: Axes, label: str, **style: Any) -> None:
    """A legend entry, after the models', that says what a line style means (grey, drawn
    nowhere: an empty line): the dashed min and max, the dotted median."""
    ax.plot([], [], color=KEY_COLOR, label=label, **style)


def key_band(ax: Axes, label: str, alpha: float) -> None:
    """A legend entry for a shaded band (the 95% interval, ±1 std), grey, drawn nowhere."""
    ax.fill_between([], [], [], color=KEY_COLOR, alpha=alpha, linewidth=0, label=label)


def legend_width(labels: Sequence[str], title: str | None = "model", size: float = 9.0) -> float:
    """Inches a legend right of the panels takes (its longest entry, the marker, the padding):
    a figure sized for its panels alone would squeeze them to make room for it."""
    widest = max([text_width(plain(label), size) for label in labels] + [text_width(title or "", size)])
    return (widest + 40) / 72


def legend_outside(ax: Axes, handles: Sequence[Any], labels: Sequence[str],
                   title: str | None = "model") -> None:
    """One legend for a multi-panel figure, right of `ax` (the top-right panel)."""
    if handles:
        ax.legend(handles, labels, title=title, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  borderaxespad=0.0)


def not_applicable(ax: Axes, message: str) -> Axes:
    """Leave a readable note in an empty panel instead of failing."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, plain(message), ha="center", va="center", wrap=True,
            transform=ax.transAxes, color="#444444", gid=NOT_APPLICABLE_GID)
    return ax


def shared_norm(matrices: Sequence[np.ndarray], vmax: float | None = None) -> Normalize:
    """One colour scale from 0 to the largest value of all panels (or a given vmax)."""
    if vmax is None:
        finite = [np.nanmax(m) for m in matrices if m.size and np.isfinite(m).any()]
        vmax = max(finite) if finite else 1.0
    return Normalize(vmin=0.0, vmax=max(float(vmax), 1e-6))


def log_headroom(ax: Axes, top: float | None = None, factor: float = 1.5) -> None:
    """Raise a log y axis' upper limit to the decade above `top` (the largest value drawn; by
    default the top of the data of the axes sharing its y axis), or to `factor` times `top`
    where that is higher: matplotlib ends a log axis just above the data, which left points at
    0.06 (or 54) with no labelled tick above them, and put a point just under a decade on the
    frame. Only raises the limit; the data are untouched. On a shared y axis, call it once all
    its panels are drawn (it fixes the limits)."""
    if top is None:
        siblings = ax.get_shared_y_axes().get_siblings(ax)
        tops = [other.dataLim.y1 for other in siblings if np.isfinite(other.dataLim.y1)
                and other.dataLim.height >= 0]
        top = max(tops, default=np.nan)
    if not np.isfinite(top) or top <= 0:
        return
    upper = max(10.0 ** math.ceil(math.log10(top)), factor * top)
    bottom, current = ax.get_ylim()
    if upper > current:
        ax.set_ylim(bottom, upper)


def shares_y(ax: Axes) -> bool:
    """Whether other axes share the y axis of `ax` (a panel of a figure with sharey)."""
    return len(ax.get_shared_y_axes().get_siblings(ax)) > 1


def spread(items: Sequence[int], count: int) -> list[int]:
    """At most `count` items, evenly spaced, always with the first and the last."""
    items = sorted(items)
    if len(items) <= count:
        return items
    if count == 1:
        return items[:1]
    return sorted({items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)})


def side_by_side(count: int) -> list[tuple[float, float]]:
    """(offset from the x position, width) of `count` bars grouped at one x position.

    The group spans 0.8 of the unit between positions; each bar keeps a small gap to the next.
    """
    slot = 0.8 / count
    return [((index - (count - 1) / 2) * slot, slot * 0.95) for index in range(count)]


def grid_shape(count: int, max_columns: int) -> tuple[int, int]:
    columns = max(1, min(count, max_columns))
    return math.ceil(count / columns), columns


def legend_entries(axes: Sequence[Axes]) -> tuple[list[Any], list[str]]:
    """Legend entries of all panels, once each, in drawing order (for one figure legend)."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return list(entries.values()), list(entries)
