"""probe/core/ablation_kinds.py: the --ablate spec read into ablations, and refused in one line."""
from __future__ import annotations

import pytest

from probe.core.ablation_kinds import parse_plan
from probe.core.errors import ProbeError


def names(spec: str) -> list[str]:
    return [a.label for a in parse_plan(spec).ablations]


def test_windows_and_sinks_make_every_pair():
    assert names("windows=4,8 sinks=0,2") == ["window 4", "window 4 + 2 sinks", "window 8", "window 8 + 2 sinks"]


@pytest.mark.parametrize("spec, key", [("windows=4 windows=8", "windows"), ("windows=8 sinks=2 sinks=0", "sinks"),
                                       ("key0 layers=0 layers=1", "layers")])
def test_a_key_given_twice_is_refused_not_replaced(spec, key):
    """'windows=4 windows=8' measured only window 8, and 'sinks=2 sinks=0' dropped the 2 sinks,
    without a word."""
    with pytest.raises(ProbeError, match=f"{key}= is given twice; give its values once, comma-separated"):
        parse_plan(spec)


def test_terms_without_values_may_repeat():
    assert names("key0 key0 value0") == names("key0 value0")
