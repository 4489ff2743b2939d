"""The ground floor: what every part of probe may import (docs/architecture.md).

errors.py (ProbeError, one line per user mistake), options.py (AnalysisOptions: every option
once, with its default and its check), reprs.py (one-screen reprs), events.py (the event
names), intervention_kinds.py (the intervention names), token_type_names.py (the built-in
token types), atomic.py (whole-or-nothing files and folders), owned.py (the `.probe-output`
marker: which folders --force may replace). No module here imports another part of probe at
import time (tests/test_layers.py holds it).
"""
