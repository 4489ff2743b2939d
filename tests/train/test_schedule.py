"""probe/train/schedule.py: the learning-rate schedule."""
from __future__ import annotations

import pytest

from probe.train import TrainConfig
from probe.train.schedule import lr_factor


def test_warmup_then_cosine_to_min_lr():
    cfg = TrainConfig(tokens=100 * 16 * 128, warmup=10, min_lr_ratio=0.1)
    factors = [lr_factor(s, cfg) for s in range(cfg.steps)]
    assert factors[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert factors[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))
    assert factors[-1] == pytest.approx(0.1, abs=1e-3)
    # The shape between the ends, from cos at a third, a half and two thirds of the 90 decay
    # steps (cos pi/3 = 1/2, cos pi/2 = 0, cos 2pi/3 = -1/2): any other monotone curve fails here.
    assert cfg.steps == 100
    assert [factors[40], factors[55], factors[70]] == pytest.approx([0.1 + 0.9 * 0.75, 0.55, 0.1 + 0.9 * 0.25],
                                                                    abs=1e-12)
