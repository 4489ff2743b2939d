"""Text widths in points and wrapping to a width, for the text the PDF places by hand.

Measured with the font the report draws (DejaVu Sans, shipped with matplotlib), so a wrapped
line is known to fit its cell or column instead of estimated from a character count.
"""

from __future__ import annotations

from functools import lru_cache

from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

_TO_PATH = TextToPath()


@lru_cache(maxsize=65536)
def text_width(text: str, size: float, bold: bool = False) -> float:
    """Width of one line of `text` in points at `size` points, as drawn: control characters
    are measured as the escapes the report shows (probe.core.errors.printable)."""
    from probe.core.errors import printable

    text = printable(text)
    if not text:
        return 0.0
    prop = FontProperties(family="DejaVu Sans", size=size, weight="bold" if bold else "normal")
    width, _, _ = _TO_PATH.get_text_width_height_descent(text, prop, ismath=False)
    return float(width)


def wrap(text: str, width_pt: float, size: float, bold: bool = False) -> list[str]:
    """`text` broken into lines no wider than `width_pt`: at spaces where it can, inside a word
    (a path, a hash) where a word alone is too wide. Existing newlines are kept."""
    from probe.core.errors import printable

    lines: list[str] = []
    for paragraph in printable(text).split("\n"):       # drawn as measured: ESC as \x1b
        line = ""
        for word in paragraph.split(" "):
            candidate = f"{line} {word}" if line else word
            if text_width(candidate, size, bold) <= width_pt:
                line = candidate
                continue
            if line:
                lines.append(line)
            line = ""
            while text_width(word, size, bold) > width_pt and len(word) > 1:
                cut = _longest_prefix(word, width_pt, size, bold)
                lines.append(word[:cut])
                word = word[cut:]
            line = word
        lines.append(line)
    return lines


def _longest_prefix(word: str, width_pt: float, size: float, bold: bool) -> int:
    lo, hi = 1, len(word)
    while lo < hi:  # the longest prefix that fits, at least one character
        mid = (lo + hi + 1) // 2
        if text_width(word[:mid], size, bold) <= width_pt:
            lo = mid
        else:
            hi = mid - 1
    return lo
