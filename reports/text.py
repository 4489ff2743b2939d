"""Make strings from the data safe to show: in matplotlib labels and as token labels."""

from __future__ import annotations

# A carriage return shows as the two characters \r: DejaVu Sans has no glyph for U+240D (␍).
_VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "\\r"})


def plain(text: object) -> str:
    """Escape `$` so matplotlib never reads a model name or token as mathtext."""
    return str(text).replace("$", r"\$")


def visible_token(token: object, limit: int = 14) -> str:
    """A token as a short label with its whitespace made visible (" the" -> "␣the")."""
    text = str(token).translate(_VISIBLE_WHITESPACE)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def join_names(names: list[str]) -> str:
    """"a", "a and b", "a, b and c": models named in one sentence."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def join_layers(layers: list[int]) -> str:
    """[0, 1, 2, 4] -> "0-2, 4": compact lists of layer indices for notes and captions."""
    spans: list[str] = []
    start = previous = None
    for layer in sorted(layers):
        if start is None:
            start = previous = layer
        elif layer == previous + 1:
            previous = layer
        else:
            spans.append(_span(start, previous))
            start = previous = layer
    if start is not None:
        spans.append(_span(start, previous))
    return ", ".join(spans)


def _span(start: int, end: int) -> str:
    return str(start) if start == end else f"{start}–{end}"
