"""How the run directory's text cells are written, so that every string reads back as it was
and none runs as a spreadsheet formula.

- A cell holding a bare carriage return is quoted (Python's csv module quotes only the line
  terminator "\\n", and a reader takes an unquoted "\\r" for the end of a row).
- A text cell that a spreadsheet would run as a formula (it starts with =, +, -, @, a tab or
  a carriage return) gets one apostrophe in front, as OWASP recommends; so that this is
  reversible, a cell made of apostrophes followed by such a character gets one too. Reading
  (probe/results/run_files.py) takes exactly one off again: `raw(neutral(s)) == s` for every string.

It imports nothing from probe, so reports/ reads runs with it without loading torch.
"""
from __future__ import annotations

import csv

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _needs_quote(value: str) -> bool:
    """Whether `value` is a formula start, possibly behind apostrophes ("'=", "''-x")."""
    return value.lstrip("'")[:1] in FORMULA_START


def neutral(value):
    """The cell as written: a formula-looking string with one apostrophe in front."""
    return "'" + value if isinstance(value, str) and _needs_quote(value) else value


def raw(value: str) -> str:
    """The string a written cell holds (the inverse of `neutral`)."""
    return value[1:] if value.startswith("'") and _needs_quote(value[1:]) else value


def csv_text(frame, kinds: dict[str, str]) -> str:
    """`frame` as CSV text: its text columns (`kinds[column] == "str"`, probe.results.schema) neutral,
    every cell with a carriage return quoted."""
    import pandas as pd

    cells = [c for c in frame.columns if pd.api.types.is_object_dtype(frame[c])
             or pd.api.types.is_string_dtype(frame[c])]
    text = [c for c in cells if kinds.get(c) == "str"]
    if text:
        frame = frame.copy()
        for column in text:
            frame[column] = frame[column].map(neutral)
    has_cr = any(frame[c].map(lambda v: isinstance(v, str) and "\r" in v).any() for c in cells)
    # QUOTE_NONNUMERIC quotes every text cell, and with it any holding "\r"; only tables that
    # hold one are written that way, so every other table stays byte for byte as it was.
    return frame.to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC if has_cr else csv.QUOTE_MINIMAL)
