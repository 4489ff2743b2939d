"""probe/capture/gate_logits.py: where a declared gate's logits sit, their inverse, and the hooks that
overwrite them (the interventions that use them: test_interventions.py)."""
from __future__ import annotations

import math

import pytest
import torch

from probe import ProbeError
from probe.capture.gate_logits import gate_channels, gate_logit
from probe.families.gates import GateSpec


def test_grouped_channels_are_the_gate_block_of_each_kv_head():
    """4 heads sharing 2 KV heads, head_dim 2: per KV head [4 query channels | 2 gates]."""
    spec = GateSpec("q_proj", "grouped", "headwise")
    channels = gate_channels(spec, 12, heads=4, kv_heads=2, head_dim=2)
    assert channels.tolist() == [[4], [5], [10], [11]]


def test_interleaved_channels_follow_each_head_query():
    """Per head [2 query | 2 gate] channels."""
    spec = GateSpec("q_proj", "interleaved", "elementwise")
    channels = gate_channels(spec, 8, heads=2, kv_heads=1, head_dim=2)
    assert channels.tolist() == [[2, 3], [6, 7]]


def test_a_layout_that_does_not_fit_the_width_is_one_clear_error():
    with pytest.raises(ProbeError, match="does not fit q_proj: its output has 10 channels, the layout needs 12"):
        gate_channels(GateSpec("q_proj", "grouped", "headwise"), 10, heads=4, kv_heads=2, head_dim=2)


@pytest.mark.parametrize("activation,forward", [("sigmoid", torch.sigmoid),
                                                ("softplus", torch.nn.functional.softplus)])
def test_gate_logit_inverts_the_activation(activation, forward):
    for score in (0.05, 0.3, 0.5, 0.9):
        logit = torch.tensor(gate_logit(activation, score), dtype=torch.float64)
        assert float(forward(logit)) == pytest.approx(score, rel=1e-12)
    assert gate_logit(activation, 0.0) == -math.inf


def test_sigmoid_scores_one_and_zero_are_infinite_logits():
    assert gate_logit("sigmoid", 1.0) == math.inf and gate_logit("sigmoid", 0.0) == -math.inf
    with pytest.raises(ProbeError, match="cannot force a tanh gate"):
        gate_logit("tanh", 0.5)
