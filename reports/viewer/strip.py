"""The static strip of the per-token series, for the PDF (and the HTML report's printed page): the
first tokens of one sequence, shaded, for the two or three most telling series of a run.

Which series and layer: the first-token attention and, with a gate, the gate score at the
layer where they vary most across these tokens (a layer where every token sinks is one colour
and says little), the largest |activation| at the layer with the largest one (the massive
activation), and without a gate the loss. A hybrid's run with Gated DeltaNet series (--gdn)
keeps the first-token attention of its softmax layers, one GDN series and the largest
|activation|, dropping the gate score and the loss: the GDN key-0 share (--anatomy; the GDN
analogue of the first-token attention) where it varies across these tokens, else the write
strength beta, at the GDN layer where it varies most over the tokens after position 0 (there
the key-0 share is 1 by definition). A layer without values (a softmax layer's rows of a GDN
series, a GDN layer's of the first-token attention) is never picked. The values are the stored
ones (TokenSeries.values).
"""
from __future__ import annotations

import numpy as np
from matplotlib.colors import LinearSegmentedColormap, LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from probe.core.errors import printable
from probe.reports.plots._layout import new_figure
from probe.reports.style import styled

TOKENS = 160            # tokens of the strip
WIDTH = 7.2             # inches
FONT = 6.5              # points, monospace
CHAR = 0.6 * FONT / 72  # inches per character of DejaVu Sans Mono
LINE = 0.16             # inches per text line
CMAP = LinearSegmentedColormap.from_list(
    "probe_tokens", ["#ffffff", "#fee8c8", "#fdbb84", "#e34a33", "#7f0000"])


def _most_varied(values: np.ndarray) -> tuple[int, float]:
    """(layer row, its spread): the row of `values` (layers, n) whose finite values have the
    largest standard deviation; rows without a value never win (spread -1)."""
    with np.errstate(invalid="ignore"):
        counts = np.isfinite(values).sum(1)
        spread = np.where(counts > 0, np.nanstd(np.where(counts[:, None] > 0, values, 0.0), axis=1), -1.0)
    layer = int(np.argmax(spread))
    return layer, float(spread[layer])


KEY0_VARIES = 0.01      # below this spread the key-0 share's strip is one colour (0.01: a step of its per-head codes)


def _gdn(series, n: int) -> tuple[str, int, str] | None:
    """The strip's GDN series (`telling`), None without one."""
    after = series.arrays["positions"][:n] >= 1            # (n,) the tokens after their row's position 0
    for name, what in (("gdn_key0", "key-0 share of a Gated DeltaNet layer's output"),
                       ("gdn_beta", "write strength beta of a Gated DeltaNet layer")):
        if name in series.names:
            layer, spread = _most_varied(series.values(name)[:, :n][:, after])    # (layers, tokens after 0)
            if spread < 0 or (name == "gdn_key0" and spread < KEY0_VARIES):
                continue
            return name, layer, f"{what}, layer {layer} (mean over value heads)"
    return None


def telling(series, n: int) -> list[tuple[str, int, str]]:
    """[(series, layer row, label)] of the strip: two or three, per the module's rule."""
    names = series.names
    gdn = _gdn(series, n) if any(name.startswith("gdn_") for name in names) else None
    softmax = " softmax" if gdn else ""
    found = {}
    for name, what in (("first_token", "attention on the first token"), ("gate", "gate score")):
        if name in names:
            layer, spread = _most_varied(series.values(name)[:, :n])      # (layers, n)
            if spread >= 0:
                found[name] = (name, layer, f"{what},{softmax} layer {layer} (mean over heads)")
    if "max_abs" in names:
        v = np.nan_to_num(series.values("max_abs")[:, :n], nan=-1.0)
        layer = int(np.argmax(v.max(1)))
        found["max_abs"] = ("max_abs", layer, f"largest |activation| of the layer output, layer {layer}")
    if "gate" not in names and "loss" in names:
        found["loss"] = ("loss", 0, "the token's loss (nats)")
    if gdn:
        found["gdn"] = gdn
    # A hybrid: a softmax layer's sink, a GDN layer's series, the massive activation; the rest after.
    order = ("first_token", "gdn", "max_abs", "gate", "loss") if gdn else ("first_token", "gate", "max_abs", "loss")
    return [found[key] for key in order if key in found][:3]


def _shown(text: str) -> str:
    return printable(text).replace("\n", "↵").replace("\t", "→") or "∅"


GAP = 0.008             # inches between two tokens' boxes: single-character tokens still read as words


def _layout(texts: list[str]) -> tuple[list[tuple[float, int]], int]:
    """(x in inches, line) of each token, wrapping at WIDTH; the number of lines. A line breaks
    before the word that would cross WIDTH (a word: the tokens from one that starts with a space,
    or follows a newline, to the next), not inside it ("3rd e" / "dition"), unless that word
    begins the line."""
    x, line, out = 0.0, 0, []
    word = 0                                           # index of the first token of the current word
    for i, text in enumerate(texts):
        if i and (text[:1] == " " or texts[i - 1].endswith(("↵", " "))):
            word = i
        w = len(text) * CHAR + GAP
        if x + w > WIDTH and x > 0:
            moved = word if word < i and out[word][1] == line and out[word][0] > 0 else i
            x, line = 0.0, line + 1
            for j in range(moved, i):                  # the word's tokens so far, to the new line
                out[j] = (x, line)
                x += len(texts[j]) * CHAR + GAP
        out.append((x, line))
        x += w
    return out, line + 1


def shown_tokens(series, tokens: int = TOKENS) -> int:
    """How many tokens the strip shows: the first `tokens` of the first sequence."""
    first_row = series.header["rows"][0][1] if series.header["rows"] else series.tokens
    return min(tokens, first_row, series.tokens)


@styled
def plot_token_strip(series, name: str = "", *, tokens: int = TOKENS) -> Figure:
    """The first `tokens` tokens of the first sequence of `series` (a TokenSeries), shaded by
    each telling series (`telling`)."""
    n = shown_tokens(series, tokens)
    texts = [_shown(t) for t in series.texts()[:n]]
    places, lines = _layout(texts)
    blocks = telling(series, n)
    block = (lines + 1.4) * LINE
    fig = new_figure(WIDTH + 0.2, 0.3 + block * max(1, len(blocks)))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-0.1, WIDTH + 0.1)
    total = 0.3 + block * max(1, len(blocks))
    ax.set_ylim(total, 0)
    ax.axis("off")
    for b, (key, layer, label) in enumerate(blocks):
        values = series.values(key)[layer, :n]
        finite = values[np.isfinite(values)]
        if key == "max_abs" and finite.size and finite.max() > 0:
            norm = LogNorm(max(finite[finite > 0].min(), finite.max() * 1e-4), finite.max())
            scale = f"log scale, up to {finite.max():.4g}"
        else:
            # beta runs past 1 on OLMo-Hybrid (negative eigenvalues double it): its own top there.
            top = float(finite.max()) if finite.size and (key == "loss" or finite.max() > 1) else 1.0
            norm, scale = Normalize(0.0, top), f"0 to {top:.3g}"
        top = 0.3 + b * block
        ax.text(0, top - 0.06, f"{printable(name) + ': ' if name else ''}{label} ({scale})",
                fontsize=7, va="bottom", ha="left", fontweight="bold")
        for (x, line), text, v in zip(places, texts, values):
            y = top + line * LINE
            colour = CMAP(norm(max(v, norm.vmin))) if np.isfinite(v) else (0.92, 0.92, 0.92, 1.0)
            ax.add_patch(Rectangle((x, y), len(text) * CHAR + GAP / 2, LINE * 0.9, facecolor=colour, linewidth=0))
            dark = np.isfinite(v) and norm(max(v, norm.vmin)) > 0.62
            ax.text(x + 0.005, y + LINE * 0.45, text, fontsize=FONT, family="DejaVu Sans Mono",
                    va="center", ha="left", color="white" if dark else "#1f2328")
    return fig
