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


def test_the_default_set_leaves_out_windows_the_sequences_do_not_exceed():
    """A bare --ablate (all) at the default --seq-len 512 was refused for its own 1024-key window:
    the documented command failed at every length up to 1024. The default set now leaves such
    windows out and says so; a window the user names is still refused."""
    with pytest.warns(UserWarning, match=r"window 1024 left out, not shorter than the 512-token sequences"):
        plan = parse_plan(True, 512)
    labels = [a.label for a in plan.ablations]
    assert "window 256 + 4 sinks" in labels and not any(label.startswith("window 1024") for label in labels)
    assert [a.label for a in parse_plan("all", 2048).ablations][:9] == names("windows=64,256,1024 sinks=0,1,4")
    with pytest.warns(UserWarning, match=r"windows 64, 256, 1024 left out"):
        short = parse_plan("all layers=0", 32)
    assert not any(a.kind == "window" for a in short.ablations) and short.layers == (0,)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_plan(True, 512, warn=False)                  # the checks before a run stay quiet
    with pytest.raises(ProbeError, match="a window of 1024 keys is not shorter than the 512-token sequences"):
        parse_plan("windows=64,1024", 512)
