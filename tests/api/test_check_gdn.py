"""`probe check` on the tiny hybrids: each Gated DeltaNet layer's per-key terms add up to the
kernel output, the output gate's and out_proj's (float32: under 1e-5 relative); a kernel that
is not the gated delta rule fails those layers, loudly."""
from __future__ import annotations

import importlib

import pytest

from probe.api.check import run_checks

SITES = ("kernel output", "gate output", "out proj")


@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5"])
def test_gdn_layers_pass_the_check(kind, loaded):
    frame = run_checks(loaded(kind)).frame
    gdn = frame[frame.check.str.startswith("GDN ")]
    assert sorted(set(gdn.layer)) == [0, 1, 2] and len(gdn) == 9
    assert bool(gdn.passed.all()) and float(gdn.value.max()) < 1e-5, gdn.to_string()
    assert {c.rsplit("the ", 1)[1] for c in gdn.check} == set(SITES)


def test_a_kernel_that_is_not_the_delta_rule_fails(loaded, monkeypatch):
    lm = loaded("qwen3_5")
    module = importlib.import_module(type(lm.layout.layers[0].mixer).__module__)
    kernel = module.torch_chunk_gated_delta_rule

    def off(*args, **kwargs):
        out, state = kernel(*args, **kwargs)
        return out * 1.001, state                                  # 0.1% off: 100x the tolerance
    monkeypatch.setattr(module, "torch_chunk_gated_delta_rule", off)
    report = run_checks(lm)
    gdn = report.frame[report.frame.check.str.startswith("GDN ")]
    failed = gdn[~gdn.passed]
    assert not report.passed and sorted(set(failed.layer)) == [0, 1, 2]
    assert float(failed.value.min()) > 5e-4
