"""`probe check` on hybrids: the Gated DeltaNet layers' per-key terms against the layer's own output.

On the check's random sequences, probe splits each GDN layer's output into its per-key terms
(probe/metrics/gdn/) and compares their sum with what the model computed: the kernel output,
the output gate's and out_proj's. A layer whose terms miss past the tolerance fails the check
(its kernel or layout is not the gated delta rule probe decomposes); a linear-attention layer
probe cannot read is listed, with the reason, as not measured.
"""
from __future__ import annotations

import math

import torch


def gdn_rows(loaded, ids: torch.Tensor) -> list[dict]:
    """One row per (GDN layer, site): the check table's columns (check.COLUMNS)."""
    from ..capture.hf import Capture
    from ..families.gdn import gdn_parts
    from ..metrics.gdn import CHECK_SITES

    layout = loaded.layout
    linear = [p for p in layout.layers if p.layer_type == "linear_attention"]
    if not linear:
        return []
    rows = []
    for p in linear:
        why = gdn_parts(p.mixer)
        if isinstance(why, str):
            rows.append(dict(check="GDN per-key terms: not measured", layer=p.index, value=math.nan,
                             tolerance=math.nan, passed=True, detail=why))
    from ..metrics.gdn.keys import tolerance

    # The per-key terms come with anatomy (as in probe analyze --gdn --anatomy).
    cap = Capture(loaded.model, layout, gdn=True, anatomy=True, vocab_size=loaded.model.config.vocab_size)
    metric = cap.metrics["gdn"]
    if not metric.keys:
        return rows
    with torch.inference_mode(), cap, cap.batch(ids):
        loaded.model(input_ids=ids, use_cache=False)

    for layer in sorted(metric.keys):
        ks = metric.keys[layer]
        tol = tolerance(metric.dtype.get(layer, torch.float32))
        for i, site in enumerate(CHECK_SITES[:3]):
            err = float(ks.error[i]) if int(ks.sequences) else math.nan
            rows.append(dict(check=f"GDN per-key terms sum to the {site.replace('_', ' ')}", layer=layer,
                             value=err, tolerance=tol, passed=bool(err <= tol),
                             detail=f"{int(ks.sequences)} sequences, relative L2 error"))
    return rows
