"""The number format of the terminal's interval line and the reports (probe/results/number_text.py)."""
from __future__ import annotations

import math
import subprocess
import sys

from probe.results.number_text import fmt


def test_three_significant_digits_whole_from_a_thousand_and_na_for_missing():
    assert fmt(0.0123456) == "0.0123"
    assert fmt(-2.5) == "-2.5"
    assert fmt(12345.6) == "12,346"
    assert fmt(None) == "n/a" and fmt(math.nan) == "n/a"


def test_the_reports_write_numbers_with_the_same_function():
    from probe.reports.claims import numbers

    assert numbers.fmt is fmt


def test_the_interval_line_loads_no_report_layer():
    code = ("import sys; from probe.api.report_args import print_intervals; "
            "print_intervals([type('A', (), {'summary': {'model': 'm'}})()]); "
            "print(any(m.startswith(('probe.reports', 'matplotlib')) for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "False", done.stderr
