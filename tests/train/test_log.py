"""probe/train/log.py: the loss-spike rule."""
from __future__ import annotations

import torch

from probe.train.config import SPIKE_K, SPIKE_MIN_HISTORY
from probe.train.log import is_spike


def test_spike_rule():
    flat = [2.0 + 0.01 * (i % 3) for i in range(60)]
    std = torch.tensor(flat[-50:]).std(unbiased=False).item()
    assert not is_spike(2.01, flat)
    assert is_spike(2.01 + (SPIKE_K + 1) * std + 0.01, flat)
    assert not is_spike(100.0, flat[: SPIKE_MIN_HISTORY - 1])     # too little history to judge
    assert is_spike(float("nan"), flat)
