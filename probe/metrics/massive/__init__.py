"""Massive activations (M-Act), declared: the largest |activation| per layer and site
(massive.csv), the top ones with where they sit (massive_top.csv), summary.json's M-Act. The
reducers: reduce.py."""
from __future__ import annotations

from ...core.events import SITE_EVENTS, SITES  # noqa: F401  (SITES: massive.csv `site`, paper Figure 6)
from ..base import Declaration

DECLARATION = Declaration(
    name="massive", metric="Massive", order=4,
    events={event: f"update_{site}" for site, event in SITE_EVENTS.items()},
    tables={
        "massive": {"model": "str", "layer": "int", "site": "str", "metric": "str", "value": "float"},
        "massive_top": {"model": "str", "layer": "int", "site": "str", "rank": "int",
                        "value": "float", "abs_value": "float", "sequence": "int", "position": "int",
                        "dim": "int", "token_id": "int", "token": "str"},
    },
    summary_keys=("m_act",),
    summary_order=2,
    layer_keys={"m_act": {}},
    layer_order=2,
)
