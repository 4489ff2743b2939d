"""The display patterns read off the pass (probe/capture/display.py) against the eager forward of
the prompt alone, which is what attention_patterns.csv held before: Gemma 2 (soft-capped logits,
sliding window 16 below the 24 displayed tokens) and gpt-oss (per-head sinks), the prompt in the
second row of a batch, with and without padding.

Tolerance: float32 rounding. The pass forms exp(logit - lse) from the fused kernel's lse, eager
attention a softmax over the prompt alone; both in float32 from the same weights, the two differ
by a few units in the last place of logits of size ~10: 1e-5 relative, 1e-7 absolute."""
from __future__ import annotations

import pytest
import torch

from probe import Capture
from probe.capture.display import DisplayPatterns
from probe.load.loader import describe
from tests.capture.softmax_term_models import _gemma2
from tests.capture.test_attention import _gpt_oss

N = 24


def eager_pattern(model, prompt):
    """{layer: (n, n)} head mean of the eager forward of `prompt` (T,) alone."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids=prompt[None], output_attentions=True, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
    return {layer: att[0].float().mean(0) for layer, att in enumerate(out.attentions)}


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    gemma2, gpt_oss = _gemma2(), _gpt_oss()
    return {"gemma2": (gemma2, describe(gemma2)), "gpt_oss": (gpt_oss, describe(gpt_oss, gate="none"))}


@pytest.mark.parametrize("name", ["gemma2", "gpt_oss"])
@pytest.mark.parametrize("length", [40, 17])                 # the prompt's real tokens (17: padded)
def test_read_off_the_pass_equals_the_eager_prompt(models, name, length):
    model, layout = models[name]
    ids = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(4))
    valid = torch.ones_like(ids, dtype=torch.bool)
    valid[1, length:] = False                                  # padding on the right of row 1
    with torch.no_grad(), Capture(model, layout) as cap:
        cap.display = DisplayPatterns(N)
        with cap.batch(ids, valid, torch.tensor([7, 0])):      # dataset row 0 is the batch's row 1
            model(input_ids=ids, use_cache=False)
    want = eager_pattern(model, ids[1, :length])
    assert cap.display.complete(layout.attention_layers)
    for layer in layout.attention_layers:
        got = cap.display.maps[layer]
        assert got.shape == (min(N, length),) * 2
        torch.testing.assert_close(got, want[layer][:N, :N], rtol=1e-5, atol=1e-7)
    # The test can fail: row 0 of the batch holds other tokens, and other patterns.
    other = eager_pattern(model, ids[0, :N])
    assert (other[0] - cap.display.maps[0][:N, :N]).abs().max() > 1e-3 if length == 40 else True


def test_a_pass_without_row_zero_leaves_the_eager_forward_to_do_it(models):
    model, layout = models["gemma2"]
    ids = torch.randint(0, 256, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), Capture(model, layout) as cap:
        cap.display = DisplayPatterns(N)
        with cap.batch(ids, None, torch.tensor([3])):          # a resumed pass: row 0 counted before
            model(input_ids=ids, use_cache=False)
    assert not cap.display.complete(layout.attention_layers)
