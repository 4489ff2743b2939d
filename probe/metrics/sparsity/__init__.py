"""Sparsity of the attention output, declared: the share of |x| below each threshold, ungated,
under the mean-gate control and gated (sparsity.csv; per layer in summary.json at 1e-2 and
1e-3). The reducers: reduce.py."""
from __future__ import annotations

from ...core.events import SDPA, Z
from ..base import Declaration

HEADLINE_THRESHOLDS = (1e-2, 1e-3)      # repeated in summary.json
VARIANTS = ("ungated", "mean_gate", "gated")                 # sparsity.csv `variant`

DECLARATION = Declaration(
    name="sparsity", metric="Sparsity", order=1,
    events={SDPA: "update_ungated", Z: "update_gated"},
    tables={"sparsity": {"model": "str", "layer": "int", "variant": "str", "threshold": "float",
                         "value": "float"}},
    layer_keys={"sparsity": {}},
    layer_order=3,
    meta_keys=("sparsity_exact", "sparsity_error_bound", "sparsity_control"),
)
