"""Key ablations in the `probe` attention back-end (probe/capture/key_ablation.py) against eager
softmax attention with the same mask written out explicitly, T x T, from the definition.

Tolerances: the kernel against float64 eager softmax, 1e-5 (as tests/capture/test_attention.py:
float32 logits of size ~10 round at ~1e-6, through exp and a sum of up to T terms); a whole tiny
model against the same model on a float32 eager back-end with the explicit mask: loss and F-Attn
<= 1e-6 (the issue's bound; measured here at most 3.7e-7 for the loss and 1.6e-8 for F-Attn over
both models and every ablation: float32 rounding of two summation orders, logits of size ~5).
"""
from __future__ import annotations

import math

import pytest
import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from probe.capture import attention, key_ablation
from probe.core.errors import ProbeError
from probe.families.key_masks import KeyAblation

T = 37
ABLATIONS = (KeyAblation(window=8), KeyAblation(window=8, sinks=1), KeyAblation(window=5, sinks=4),
             KeyAblation(hide_first=True), KeyAblation(zero_first_value=True),
             KeyAblation(window=1), KeyAblation(window=T - 5, sinks=2))


def explicit_mask(ab: KeyAblation, n: int) -> torch.Tensor:
    """(n, n) bool, True = attend, from the definition, one (query, key) pair at a time."""
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(i + 1):
            in_window = ab.window is None or i - j < ab.window or j < ab.sinks
            m[i, j] = in_window and not (ab.hide_first and j == 0 and i > 0)
    return m


def eager(query, key, value, ab, scale, dtype=torch.float64):
    """Softmax attention with the explicit mask: out (B, H, T, D), probs (B, H, T, T)."""
    heads = query.shape[1]
    k = key.to(dtype).repeat_interleave(heads // key.shape[1], dim=1)
    v = value.to(dtype).repeat_interleave(heads // value.shape[1], dim=1).clone()
    if ab.zero_first_value:
        v[:, :, 0] = 0
    scores = (query.to(dtype) @ k.transpose(-1, -2) * scale).masked_fill(~explicit_mask(ab, query.shape[2]),
                                                                        -math.inf)
    probs = torch.softmax(scores, dim=-1)
    return probs @ v, probs


@pytest.mark.parametrize("ab", ABLATIONS, ids=KeyAblation.describe)
@pytest.mark.parametrize("block", (64, 4))
def test_kernel_equals_eager_with_the_explicit_mask(ab, block):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, n, T, 16, generator=g) * 2 for n in (4, 2, 2))
    out, lse = key_ablation.ablated_attention_with_lse(q, k, v, ab, 0.25, None, attention.attention_with_lse,
                                                       block=block)
    want, probs = eager(q, k, v, ab, 0.25)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)
    mask = None if ab.masks_nothing(T) else ab
    p0 = attention.first_key_probability(q, k, lse, mask, 0.25)
    torch.testing.assert_close(p0.double(), probs[..., 0], atol=1e-5, rtol=0)
    visible = explicit_mask(ab, T)
    uniform = attention.uniform_first_key(mask, T, "cpu")
    want_uniform = visible[:, 0].double() / visible.sum(-1).double()
    assert torch.equal(uniform[0], want_uniform) if uniform is not None else ab.masks_nothing(T)
    assert torch.equal(ab.queries_seeing(T, "cpu"), visible.sum(0))


def test_an_ablation_that_masks_nothing_is_the_unablated_kernel_bit_for_bit():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, n, T, 16, generator=g) for n in (4, 2, 2))
    plain = attention.attention_with_lse(q, k, v, None, 0.25)
    for ab in (KeyAblation(window=T), KeyAblation(window=T + 100, sinks=0), KeyAblation(window=T, sinks=4)):
        got = key_ablation.ablated_attention_with_lse(q, k, v, ab, 0.25, None, attention.attention_with_lse)
        assert torch.equal(got[0], plain[0]) and torch.equal(got[1], plain[1])


# -- a whole model ------------------------------------------------------------------------------
EAGER = "probe_test_explicit_mask"
_current: dict = {}


def _eager_explicit(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """float32 eager attention with the explicit mask of _current["ablation"]; records P[t, 0]."""
    out, probs = eager(query, key, value, _current["ablation"], scaling, dtype=torch.float32)
    _current["p0"][module.layer_idx] = probs[..., 0]
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(EAGER, _eager_explicit)
AttentionMaskInterface.register(EAGER, sdpa_mask)


class _P0:
    def __init__(self):
        self.p0 = {}

    def on_attention(self, module, query, key, out, lse, mask, scale, softcap=None, value=None):
        self.p0[module.layer_idx] = attention.first_key_probability(query, key, lse, mask, scale)


def _loss(logits, ids):
    return float(torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).double(), ids[:, 1:].flatten()))


def _probe(model, ids, ab):
    rec = _P0()
    mods = {} if ab is None else {m: ab for m in model.modules() if hasattr(m, "layer_idx")
                                  and hasattr(m, "q_proj")}
    with attention.observing(model, rec), key_ablation.ablating(mods), torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits, rec.p0


@pytest.mark.parametrize("kind", ("official_headwise", "qwen3"))
def test_model_under_each_ablation_equals_eager_with_the_explicit_mask(kind, loaded):
    model = loaded(kind).model
    ids = torch.randint(3, 256, (2, T), generator=torch.Generator().manual_seed(5))
    plain, plain_p0 = _probe(model, ids, None)
    for ab in ABLATIONS:
        logits, p0 = _probe(model, ids, ab)
        _current.update(ablation=ab, p0={})
        previous = model.config._attn_implementation
        model.set_attn_implementation(EAGER)
        try:
            with torch.no_grad():
                want = model(input_ids=ids, use_cache=False).logits
        finally:
            model.set_attn_implementation(previous)
        assert abs(_loss(logits, ids) - _loss(want, ids)) <= 1e-6, ab
        assert abs(_loss(logits, ids) - _loss(plain, ids)) > 1e-4, ab      # it did change something
        for layer, p in p0.items():                                     # F-Attn: mean P[t, 0]
            assert abs(float(p.double().mean()) - float(_current["p0"][layer].double().mean())) <= 1e-6


@pytest.mark.parametrize("kind", ("official_headwise", "qwen3"))
def test_window_at_least_T_without_sinks_is_the_unablated_pass_bit_for_bit(kind, loaded):
    model = loaded(kind).model
    ids = torch.randint(3, 256, (2, T), generator=torch.Generator().manual_seed(6))
    plain, plain_p0 = _probe(model, ids, None)
    for ab in (KeyAblation(window=T), KeyAblation(window=4 * T)):
        logits, p0 = _probe(model, ids, ab)
        assert torch.equal(logits, plain)
        assert all(torch.equal(p0[i], plain_p0[i]) for i in plain_p0)


def test_a_sliding_window_layer_is_refused_in_one_line():
    with pytest.raises(ProbeError, match="sliding-window layer"):
        key_ablation.check_layer(KeyAblation(hide_first=True), attention.SlidingWindow(16), 16, 40, 2)
    with pytest.raises(ProbeError, match="explicit attention mask"):
        key_ablation.check_layer(KeyAblation(hide_first=True), torch.ones(1, 1, 4, 4, dtype=torch.bool), None, 4, 0)


@pytest.mark.parametrize("ab", ABLATIONS[:4], ids=KeyAblation.describe)
def test_sink_anatomy_under_an_ablation_equals_the_explicit_mask(ab):
    """Attention received by every key (metrics/anatomy/received.py) reads the ablation as the
    kernel does: the same as with the explicit (T, T) mask, and as eager softmax's column sums."""
    from probe.metrics.anatomy.received import key_probability, received_attention

    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, n, T, 16, generator=g) for n in (4, 2, 2))
    _, lse = key_ablation.ablated_attention_with_lse(q, k, v, ab, 0.25, None, attention.attention_with_lse)
    got = received_attention(q, k, lse, ab, 0.25)
    explicit = received_attention(q, k, lse, explicit_mask(ab, T)[None, None], 0.25)
    torch.testing.assert_close(got.total, explicit.total, atol=1e-9, rtol=0)
    assert torch.equal(got.count, explicit.count)
    _, probs = eager(q, k, v, ab, 0.25)
    torch.testing.assert_close(got.total, probs.sum(2), atol=1e-5, rtol=1e-5)
    keys = torch.tensor([0, 1, T - 1])
    torch.testing.assert_close(key_probability(q, k, lse, keys, ab, 0.25).double(), probs[..., keys],
                               atol=1e-5, rtol=0)
