"""How a number reads in a table or a terminal line: three significant digits, n/a when missing.

It imports nothing, so that `probe analyze` prints its intervals line without loading the report
layer (probe.reports, with matplotlib: a second of a quickstart's start-up); reports/ writes its
numbers with the same function (reports/claims/numbers.py re-exports it).
"""
from __future__ import annotations

import math


def fmt(value: float) -> str:
    """Three significant digits (whole numbers from 1000 up); n/a for what is missing."""
    if value is None or math.isnan(value):
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"
