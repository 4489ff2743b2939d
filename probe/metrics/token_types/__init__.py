"""Gate scores by token type, declared (gates_by_token_type.csv). The reducers: reduce.py."""
from __future__ import annotations

from ...core.events import GATE
# The built-in token types (probe/data/token_types.py classifies them), gates_by_token_type.csv
# `token_type` before the user's groups; named in the ground floor, which data/ reads too.
from ...core.token_type_names import TOKEN_TYPES  # noqa: F401
from ..base import Declaration

DECLARATION = Declaration(
    name="token_types", metric="TokenTypes", order=3,
    events={GATE: "update"},
    tables={"gates_by_token_type": {"model": "str", "layer": "int", "head": "int",
                                    "token_type": "str", "metric": "str", "value": "float"}},
)
