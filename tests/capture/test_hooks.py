"""probe/capture/hooks.py: hooks installed for one block are gone after it, whatever happens inside."""
from __future__ import annotations

import pytest
import torch

from probe.capture.hooks import first_output, installed, replace_first


def _hook_count(module: torch.nn.Module) -> int:
    return (len(module._forward_hooks) + len(module._forward_pre_hooks)
            + len(module._forward_pre_hooks_with_kwargs))


def test_hooks_run_inside_the_block_and_are_removed_after_an_error():
    layer = torch.nn.Linear(3, 3)
    x = torch.ones(1, 3)
    seen = []
    regs = [(layer, "forward", lambda m, a, out: out * 0),
            (layer, "pre", lambda m, a: seen.append("pre")),
            (layer, "pre_kwargs", lambda m, a, kw: seen.append("kwargs"))]
    with pytest.raises(RuntimeError, match="inside"):
        with installed(regs):
            assert torch.equal(layer(x), torch.zeros(1, 3))
            raise RuntimeError("inside")
    assert seen == ["pre", "kwargs"] and _hook_count(layer) == 0
    assert not torch.equal(layer(x), torch.zeros(1, 3))


def test_an_unknown_kind_removes_the_hooks_already_registered():
    layer = torch.nn.Linear(3, 3)
    with pytest.raises(ValueError, match="unknown hook kind 'post'"):
        with installed([(layer, "forward", lambda m, a, out: out), (layer, "post", None)]):
            pass
    assert _hook_count(layer) == 0


def test_first_output_and_replace_first_keep_the_container():
    a, b = torch.zeros(1), torch.ones(1)
    assert first_output((a, b)) is a and first_output([a, b]) is a and first_output(a) is a
    assert replace_first((a, "x"), b) == (b, "x") and replace_first([a, "x"], b) == [b, "x"]
    assert replace_first(a, b) is b
