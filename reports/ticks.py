"""Tick labels that never overlap, whatever the figure's final size.

Plot functions choose their ticks for a typical size; the PDF and `--figures` render a figure
at the size of its slot, and a 48-layer heatmap then has more labels than room. After the
layout has run, every axis is checked on the real text extents: overlapping text labels
(tokens, types) are first turned upright, then every n-th label is kept, with n the smallest
step that leaves no two labels touching.
"""

from __future__ import annotations

import re

from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter
from matplotlib.transforms import Bbox

_NUMBER = re.compile(r"^[\s\-−+.,0-9eE×^{}$\\mathrmtimes]*$")
_PAD_PX = 1.0  # labels closer than this count as touching


def visible_tick_labels(axis: Axis, renderer, which: str = "both") -> list[Bbox]:
    """Text extents in pixels of every drawn, non-empty tick label of `axis`, at the axes'
    current position (the ticks are placed as a draw would, without drawing the figure)."""
    # Axis._update_ticks is what Axis.draw calls: the ticks in view, located and labelled.
    ticks = axis._update_ticks()
    if which == "major":
        major = set(map(id, axis.get_major_ticks()))
        ticks = [tick for tick in ticks if id(tick) in major]
    return [label.get_window_extent(renderer) for tick in ticks
            for label in (tick.label1, tick.label2)
            if label.get_visible() and label.get_text().strip()]


def overlapping_pairs(boxes: list[Bbox], pad: float = 0.0) -> list[tuple[int, int]]:
    """Index pairs of boxes whose interiors intersect (grown by `pad` pixels)."""
    pairs = []
    for i, a in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            b = boxes[j]
            if (a.x0 - pad < b.x1 and b.x0 - pad < a.x1 and a.y0 - pad < b.y1
                    and b.y0 - pad < a.y1):
                pairs.append((i, j))
    return pairs


def declutter_ticks(figure: Figure) -> None:
    """Make every axis of `figure` free of overlapping tick labels (runs its layout engine)."""
    renderer = _renderer(figure)
    for _ in range(3):  # a change can move the layout, which can make new overlaps
        changed = False
        for ax in figure.findobj(Axes):
            for axis in (ax.xaxis, ax.yaxis):
                changed |= _declutter_axis(ax, axis, renderer)
        if not changed:
            return
        engine = figure.get_layout_engine()
        if engine is not None:
            engine.execute(figure)


def _renderer(figure: Figure):
    if not hasattr(figure.canvas, "get_renderer"):
        FigureCanvasAgg(figure)
    return figure.canvas.get_renderer()


def _crowded(axis: Axis, renderer, which: str = "both") -> bool:
    return bool(overlapping_pairs(visible_tick_labels(axis, renderer, which), _PAD_PX))


def _declutter_axis(ax: Axes, axis: Axis, renderer) -> bool:
    if not _crowded(axis, renderer):
        return False
    # Minor labels (log axes over a short range) go first: the major ones carry the scale.
    if axis.get_minor_ticks() and any(t.label1.get_text() for t in axis.get_minor_ticks()):
        axis.set_minor_formatter(NullFormatter())
        if not _crowded(axis, renderer):
            return True
    major = set(map(id, axis.get_major_ticks()))
    kept = [(tick.get_loc(), tick.label1.get_text()) for tick in axis._update_ticks()
            if id(tick) in major]
    if not kept:
        return False
    words = any(text and not _NUMBER.match(text) for _, text in kept)
    if words and axis is ax.xaxis and not _is_upright(axis):
        axis.set_tick_params(labelrotation=90)
        if not _crowded(axis, renderer, "major"):
            return True
    for step in range(2, len(kept) + 1):
        subset = kept[::step]
        axis.set_ticks([loc for loc, _ in subset], labels=[text for _, text in subset])
        if not _crowded(axis, renderer, "major"):
            return True
    return True


def _is_upright(axis: Axis) -> bool:
    ticks = axis.get_major_ticks()
    return bool(ticks) and abs(ticks[0].label1.get_rotation()) % 180 == 90
