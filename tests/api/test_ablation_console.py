"""probe/api/ablation_console.py: the sink-ablation table the terminal prints. Each Δloss must
read off the loss the row names: a row scored on other targets (the first token removed: the
targets from position 2 on) has its own base, which the "none" row does not show."""
from __future__ import annotations

import math

import pandas as pd

from probe.api.ablation_console import ablation_lines


def _row(ablation, loss, base, **more):
    return {"ablation": ablation, "loss": loss, "base_loss": base, "delta_loss": loss - base,
            "delta_lo": loss - base - 0.01, "delta_hi": loss - base + 0.01, "effect": "loss rises",
            "f_attn": 0.1, "base_f_attn": 0.2, "top_keys": None, "base_top_keys": None, "note": "", **more}


def test_a_row_on_other_targets_names_its_own_base():
    frame = pd.DataFrame([_row("window 16", 3.6, 3.4955), _row("first token removed", 3.5030, 3.4358)])
    header, none, window, first = ablation_lines(frame)
    assert none.split()[-2] == "3.4955"                       # the model as it is, all its targets
    assert window.endswith("loss rises")                      # same targets: reads off the "none" row
    assert first.endswith("loss rises (Δ against 3.4358, the model on the same targets)")
    loss, delta = (float(x) for x in first.split()[3:5])
    assert math.isclose(loss - delta, 3.4358, abs_tol=1e-4)   # what it names is what the Δ is against
