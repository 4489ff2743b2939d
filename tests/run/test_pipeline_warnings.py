"""probe/run/pipeline.py: what the assembly of a finished pass warns about."""
from __future__ import annotations

import warnings

import pytest

import probe
from probe.run.pipeline import warn_without_intervals

ARM = probe.shipped_checkpoints() / "elementwise"


@pytest.mark.parametrize("how, said", [
    ({"resamples": 1000, "sequences": 1}, "1 sequence: the summary has no 95% intervals"),
    ({"resamples": 1000, "sequences": 4, "documents": 1}, "1 document: the summary has no 95% intervals"),
    ({"resamples": 1000, "sequences": 0}, "0 sequences: the summary has no 95% intervals"),
    ({"resamples": 0, "sequences": 1}, None),                    # asked for none: nothing to say
    ({"resamples": 1000, "sequences": 2}, None),
    ({"resamples": 1000, "sequences": 6, "documents": 3}, None),
    ({"method": None, "why_none": "no per-sequence table"}, None),
])
def test_too_few_sequences_for_intervals_is_warned_once(how, said):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_without_intervals(how)
    messages = [str(w.message) for w in caught]
    assert (len(messages) == 1 and messages[0].startswith(said)) if said else messages == []


def test_an_analysis_of_one_short_text_says_its_numbers_have_no_interval():
    """A four-token text gave F-Attn 0.659 and every *_lo / *_hi None without a word."""
    with (pytest.warns(UserWarning, match=r"1 sequence: the summary has no 95% intervals .*max_sequences="),
          pytest.warns(UserWarning, match="the data hold 3 tokens, fewer than seq_len 128: one sequence of 4 tokens")):
        a = probe.analyze(ARM, texts=["short text"], seq_len=128, bos="prepend", progress=False)
    assert a.summary["f_attn_lo"] is None and a.summary["intervals"]["why_none"] == "fewer than 2 sequences"
    # resamples=0 asks for no intervals: no word on them; the text's shortness is still said.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe.analyze(ARM, texts=["short text"], seq_len=128, bos="prepend", progress=False, resamples=0)
    said = [str(w.message) for w in caught]
    assert not any("intervals" in line for line in said)
    assert [line for line in said if "fewer than seq_len 128: one sequence of 4 tokens" in line]
