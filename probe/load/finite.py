"""Whether a model's weights are finite: a NaN or inf weight is a damaged checkpoint (or a
damaged copy in memory), not a property of the model to measure."""
from __future__ import annotations

import torch


def non_finite_weights(model) -> list[tuple[str, int]]:
    """(parameter name, count of its NaN/inf values) for each floating-point parameter that has
    any, in the model's order; [] when every weight is finite. Parameters left on the meta
    device (offloaded by a device map) hold no values to check."""
    bad = []
    for name, p in model.named_parameters():
        if p.is_floating_point() and p.device.type != "meta" and not bool(torch.isfinite(p).all()):
            bad.append((name, int((~torch.isfinite(p)).sum())))
    return bad


def describe(bad: list[tuple[str, int]]) -> str:
    """"model.layers.1.mlp.down_proj.weight holds 1 NaN/inf values and 2 more tensors"."""
    name, count = bad[0]
    return f"{name} holds {count} NaN/inf values" + (f" and {len(bad) - 1} more tensors" if len(bad) > 1 else "")
