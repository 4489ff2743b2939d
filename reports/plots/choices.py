"""Plot arguments that name one of a fixed set (an M-Act site, a gate group, a table's metric),
checked before anything is drawn: a misspelt one is one error that lists the choices, not an
empty "no data" panel that reads as if the runs lacked it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd


def check_choice(argument: str, value: Any, allowed: Iterable[Any]) -> None:
    """ValueError unless value is one of `allowed` (nothing to check when `allowed` is empty:
    runs without the table draw their not-applicable panel)."""
    allowed = list(allowed)
    if allowed and value not in allowed:
        raise ValueError(f"{argument}={value!r} is not one of: {', '.join(map(repr, allowed))}")


def table_metrics(table: pd.DataFrame) -> list[str]:
    """The values of a tidy table's `metric` column, in the order they first appear."""
    return list(dict.fromkeys(table["metric"].tolist())) if "metric" in table else []
