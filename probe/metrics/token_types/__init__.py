"""Gate scores by token type, declared (gates_by_token_type.csv). The reducers: reduce.py."""
from __future__ import annotations

from ...capture.events import GATE
from ..base import Declaration

# The built-in token types (probe/data/token_types.py classifies them), gates_by_token_type.csv
# `token_type` before the user's groups.
TOKEN_TYPES = ("first", "special", "whitespace", "digits", "punctuation", "word_start", "word_piece", "other")

DECLARATION = Declaration(
    name="token_types", metric="TokenTypes", order=3,
    events={GATE: "update"},
    tables={"gates_by_token_type": {"model": "str", "layer": "int", "head": "int",
                                    "token_type": "str", "metric": "str", "value": "float"}},
)
