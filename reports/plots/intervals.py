"""95% interval bands on the layer-wise figures, from summary.json's per-layer *_lo / *_hi
(runs written before per_sequence.csv have none and are drawn without a band)."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes

from probe.reports.runs import Runs

BAND_ALPHA = 0.2


def layer_band(runs: Runs, model: str, key: str, site: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(layers, lo, hi) of a per-layer interval: key "f_attn" / "mean_gate", or "m_act" with a site."""
    layers, lo, hi = [], [], []
    for entry in runs.summary[model].get("layers") or []:
        a, b = entry.get(f"{key}_lo"), entry.get(f"{key}_hi")
        if site is not None:
            a, b = (a or {}).get(site), (b or {}).get(site)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            layers.append(entry["layer"])
            lo.append(a)
            hi.append(b)
    return np.asarray(layers), np.asarray(lo, float), np.asarray(hi, float)


def draw_band(ax: Axes, runs: Runs, model: str, key: str, color, site: str | None = None) -> bool:
    """Shade the model's per-layer interval; False when the run has none."""
    layers, lo, hi = layer_band(runs, model, key, site)
    if not len(layers):
        return False
    ax.fill_between(layers, lo, hi, color=color, alpha=BAND_ALPHA, linewidth=0, label="_interval")
    return True


def layer_intervals(runs: Runs, model: str, key: str, *path: str) -> dict[int, tuple[float, float]]:
    """layer -> (lo, hi) of a nested per-layer interval, e.g. ("sparsity", "gated", "0.01") reads
    entry["sparsity_lo"]["gated"]["0.01"]; layers without one are left out."""
    out = {}
    for entry in runs.summary[model].get("layers") or []:
        a, b = entry.get(f"{key}_lo"), entry.get(f"{key}_hi")
        for step in path:
            a, b = (a or {}).get(step), (b or {}).get(step)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            out[entry["layer"]] = (float(a), float(b))
    return out
