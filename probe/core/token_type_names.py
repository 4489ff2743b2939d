"""The built-in token types: the `token_type` values of gates_by_token_type.csv before the
user's groups. probe/data/token_types.py classifies each position into one of them and the
token-type metric (probe/metrics/token_types/) declares its table with them: the names sit
here, below both, so that the data part never reaches up to the metrics or the schema."""
from __future__ import annotations

TOKEN_TYPES = ("first", "special", "whitespace", "digits", "punctuation", "word_start", "word_piece", "other")
