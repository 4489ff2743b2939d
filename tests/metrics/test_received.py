"""probe.metrics.anatomy.received against attention probabilities formed explicitly (float64 softmax over the
full T x S logits, with the mask, the cap and a gpt-oss sink column) and against a tiny Hugging
Face model's own eager `output_attentions`."""
from __future__ import annotations

import math

import pytest
import torch

from probe.capture import attention
from probe.capture.attention import SlidingWindow
from probe.metrics.anatomy.received import (ReceivedAttention, key_probability, received_attention, top_keys,
                            value_drains)
# planted: a fixture
from tests.metrics.planted_sinks import (B, D, H, HF_T, HF_WINDOW, HKV, PLANT_TOKEN, SCALE, SINK, T,  # noqa: F401
                                         padding_mask, planted, run_kernel)

TOL = dict(atol=1e-5, rtol=0)


def tensors(seed=0, plant=True):
    """q (B, H, T, D), k, v (B, HKV, T, D). Planted: every query shares a component u and the key
    at SINK is a large multiple of u, so every head attends to it from every later query."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g)
    k = torch.randn(B, HKV, T, D, generator=g)
    v = torch.randn(B, HKV, T, D, generator=g)
    if plant:
        u = torch.randn(D, generator=g)
        u = u / u.norm()
        q = q + 3.0 * u
        k[:, :, SINK] = 5.0 * u
    return q, k, v


def visibility(mask, T, S):
    """(B|1, T, S) bool: which keys each query can see."""
    t, s = torch.arange(T)[:, None], torch.arange(S)[None, :]
    if mask is None:
        return (s <= t)[None]
    if isinstance(mask, SlidingWindow):
        return ((s <= t) & (s > t - mask.size))[None]
    return mask[:, 0] if mask.dtype == torch.bool else mask[:, 0] > -math.inf


def eager_probs(q, k, mask, scale=SCALE, softcap=None, sinks=None):
    """P (B, H, T, S) float64 from the explicit softmax; with sinks, over [logits, sink] with the
    sink column dropped (what gpt-oss's eager attention does)."""
    heads = q.shape[1]
    kk = k.double().repeat_interleave(heads // k.shape[1], dim=1)
    logits = q.double() @ kk.transpose(-1, -2) * scale
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    if mask is not None and not isinstance(mask, SlidingWindow) and mask.dtype != torch.bool:
        logits = logits + mask.double()
    logits = logits.masked_fill(~visibility(mask, q.shape[2], k.shape[2])[:, None], -math.inf)
    if sinks is not None:
        col = sinks.double()[None, :, None, None].expand(*logits.shape[:3], 1)
        return torch.softmax(torch.cat([logits, col], -1), -1)[..., :-1]
    return torch.softmax(logits, -1).nan_to_num(0.0)     # a query that sees no key: no attention


def reference_received(p, mask, valid):
    """Column sums and counts of an explicit P over the valid queries, invalid keys zeroed."""
    vis = visibility(mask, p.shape[2], p.shape[3]).expand(p.shape[0], -1, -1)   # (B, T, S)
    w = torch.ones(p.shape[0], p.shape[2], dtype=torch.bool) if valid is None else valid
    total = (p * w[:, None, :, None]).sum(2)
    count = (vis & w[:, :, None]).sum(1)
    if valid is not None:
        total, count = total * valid[:, None, :], count * valid
    return total, count


def context_prefix(n, T):
    """No mask, and valid False on the first n positions: the context of a long document's
    window (probe.data.sequences), keys every query sees but that are not counted."""
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[:, :n] = False
    return None, valid


def finite_bias(T):
    """An additive float mask with finite values besides -inf (ALiBi-like), as SDPA adds it."""
    g = torch.Generator().manual_seed(8)
    bias = 0.25 * torch.randn(B, 1, T, T, generator=g)
    return bias.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf), None


CASES = {
    "causal": lambda: (None, None),
    "context": lambda: context_prefix(4, T),
    "bias": lambda: finite_bias(T),
    "window": lambda: (SlidingWindow(8), None),
    "padding": lambda: padding_mask([T, 23], T),
    "padding-additive": lambda: padding_mask([30, T], T, additive=True),
    "window-padding": lambda: padding_mask([T, 29], T, window=8),
}


@pytest.mark.parametrize("block", [None, 1, 7])
@pytest.mark.parametrize("case", sorted(CASES))
def test_received_equals_column_sums_of_eager_softmax(case, block):
    q, k, v = tensors()
    mask, valid = CASES[case]()
    _, lse = run_kernel(q, k, v, mask)
    got = received_attention(q, k, lse, mask, SCALE, valid=valid, block=block)
    p = eager_probs(q, k, mask)
    total, count = reference_received(p, mask, valid)
    torch.testing.assert_close(got.total, total, **TOL)
    assert torch.equal(got.count, count)
    ref_score = torch.where(count[:, None] > 0, total / count[:, None].clamp_min(1), math.nan)
    torch.testing.assert_close(got.score(), ref_score, equal_nan=True, **TOL)
    # The planted key is a sink in every head (the test is not about near-zero columns).
    assert bool((got.score()[:, :, SINK] > 0.3).all())


@pytest.mark.parametrize("mask", [None, SlidingWindow(50)], ids=["causal", "window"])
def test_default_blocks_of_a_long_causal_sequence(mask):
    """Past CAUSAL_BLOCK queries the default splits a causal or windowed sequence into blocks
    that start inside the keys (each block masks its own diagonal): still the eager sums."""
    from probe.metrics.anatomy import received as module

    T_long = 3 * module.CAUSAL_BLOCK + 5
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, H, T_long, D, generator=g) for _ in range(3))
    k, v = k[:, :HKV], v[:, :HKV]
    _, lse = run_kernel(q, k, v, mask)
    got = received_attention(q, k, lse, mask, SCALE)
    total, count = reference_received(eager_probs(q, k, mask), mask, None)
    torch.testing.assert_close(got.total, total, **TOL)
    assert torch.equal(got.count, count)


@pytest.mark.parametrize("feature", ["softcap", "sinks"])
def test_softcap_and_gpt_oss_sinks(feature):
    q, k, v = tensors(seed=1)
    softcap = 2.0 if feature == "softcap" else None
    sinks = torch.tensor([0.0, 3.0, -2.0, 6.0]) if feature == "sinks" else None
    mask = SlidingWindow(9)
    _, lse = run_kernel(q, k, v, mask, softcap=softcap, sinks=sinks)
    got = received_attention(q, k, lse, mask, SCALE, softcap=softcap)
    p = eager_probs(q, k, mask, softcap=softcap, sinks=sinks)
    # Without the feature the numbers are visibly different: the comparison can fail.
    assert (eager_probs(q, k, mask).sum(2) - p.sum(2)).abs().max() > 1e-2
    total, count = reference_received(p, mask, None)
    torch.testing.assert_close(got.total, total, **TOL)
    assert torch.equal(got.count, count)
    probs = key_probability(q, k, lse, torch.tensor([0, SINK]), mask, SCALE, softcap=softcap)
    torch.testing.assert_close(probs.double(), p[..., [0, SINK]], **TOL)


def test_float64_inputs_are_computed_in_float64():
    q, k, v = (x.double() for x in tensors(seed=2))
    mask, valid = padding_mask([T, 20], T)
    p = eager_probs(q, k, mask)
    # The kernel's lse is float32 whatever the inputs: an lse in float64 shows the float64 path.
    lse = torch.logsumexp(q @ k.repeat_interleave(2, 1).transpose(-1, -2) * SCALE
                          + torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, -math.inf), -1)
    got = received_attention(q, k, lse, mask, SCALE, valid=valid, block=5)
    total, _ = reference_received(p, mask, valid)
    torch.testing.assert_close(got.total, total, atol=1e-12, rtol=0)


def test_queries_with_a_non_finite_lse_are_excluded_and_counted():
    q, k, v = tensors(seed=3)
    _, lse = run_kernel(q, k, v, None)
    lse[1, 2, 10] = math.nan
    got = received_attention(q, k, lse, None, SCALE)
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, 10] = False
    total, count = reference_received(eager_probs(q, k, None), None, valid)
    # The key at 10 is still a key: only the query is left out.
    total[1, :, 10] = eager_probs(q, k, None)[1, :, 11:, 10].sum(-1)
    count[1, 10] = T - 11
    torch.testing.assert_close(got.total, total, **TOL)
    assert torch.equal(got.count, count)
    assert got.excluded.sum() == 1 and got.excluded[1, 10]


@pytest.mark.parametrize("case", sorted(CASES))
def test_key_probability_and_top_keys(case):
    q, k, v = tensors(seed=4)
    mask, valid = CASES[case]()
    _, lse = run_kernel(q, k, v, mask)
    got = received_attention(q, k, lse, mask, SCALE, valid=valid)
    top = top_keys(got, k=2, min_queries=4)                                 # (B, H, 2)
    assert bool((top[..., 0] == SINK).all())
    score = got.score()
    score[got.count[:, None].expand_as(score) < 4] = -math.inf
    want = score.nan_to_num(nan=-math.inf).topk(2, dim=-1).values
    torch.testing.assert_close(score.gather(-1, top), want)
    p = eager_probs(q, k, mask)
    probs = key_probability(q, k, lse, top, mask, SCALE)                     # (B, H, T, 2)
    torch.testing.assert_close(probs.double(), p.gather(-1, top[:, :, None].expand(-1, -1, T, -1)), **TOL)


def test_top_keys_skip_keys_seen_by_too_few_queries():
    total = torch.zeros(1, 1, 4, dtype=torch.float64)
    total[0, 0] = torch.tensor([0.5, 0.2, 0.1, 1.0])            # the last key: one query, score 1
    count = torch.tensor([[4, 3, 2, 1]])
    r = ReceivedAttention(total, count, torch.zeros(1, 4, dtype=torch.bool))
    assert top_keys(r, 1, min_queries=1).item() == 3
    assert top_keys(r, 1, min_queries=2).item() == 0                    # 0.125 beats 0.067 and 0.05
    assert top_keys(r, 2, min_queries=2).tolist() == [[[0, 1]]]


def test_the_top_key_is_the_first_of_tied_maxima_as_the_stable_sort_names_it():
    """k = 1 reads an argmax: on ties (the first of the tied keys), keys seen by too few queries
    and a head where no key qualifies (every score -inf: key 0), the key a stable descending
    sort puts first."""
    g = torch.Generator().manual_seed(0)
    total = torch.randint(0, 3, (2, 3, 9), generator=g).double()               # many ties
    count = torch.ones(2, 9, dtype=torch.int64)
    count[1] = 0                                                            # no key qualifies
    r = ReceivedAttention(total, count, torch.zeros(2, 9, dtype=torch.bool))
    score = torch.where((count > 0)[:, None, :], r.score(), -math.inf)
    want = torch.sort(score, dim=-1, descending=True, stable=True).indices[..., :1]
    assert torch.equal(top_keys(r, 1), want) and bool((want[1] == 0).all())


def direct_drains(p, v, out, keys, valid):
    """Value-drain shares from the explicit P (B, H, T, S) and value vectors, one query at a time
    in spirit: c_t = sum_j P[t, k_j] v_k_j formed as a tensor."""
    heads = p.shape[1]
    vv = v.double().repeat_interleave(heads // v.shape[1], dim=1)              # (B, H, S, D)
    pk = torch.zeros_like(p)
    idx = keys.expand(p.shape[0], heads, -1)
    pk.scatter_(-1, idx[:, :, None].expand(-1, -1, p.shape[2], -1), p.gather(-1, idx[:, :, None].expand(-1, -1, p.shape[2], -1)))
    c = pk @ vv                                                                # (B, H, T, D)
    o = out.double()
    norm_share = c.norm(dim=-1) / o.norm(dim=-1)
    projection = (c * o).sum(-1) / (o * o).sum(-1)
    full = (p @ vv * o).sum(-1) / (o * o).sum(-1)                              # all keys: 1
    norms = vv.norm(dim=-1)                                                    # (B, H, S)
    med = torch.stack([torch.stack([norms[b, h][valid[b]].median() for h in range(heads)])
                       for b in range(p.shape[0])])                            # (B, H)
    ratio = norms.gather(-1, idx) / med[..., None]
    w = valid[:, None, :]
    return ratio, norm_share.where(w, math.nan), projection.where(w, math.nan), full.where(w, math.nan)


@pytest.mark.parametrize("keys", [[SINK], [0, SINK, 11]])
def test_value_drains_against_a_direct_computation(keys):
    q, k, v = tensors(seed=5)
    v[:, :, SINK] *= 0.05                    # a drain: much attention, little value
    mask, valid = padding_mask([T, 26], T)
    out, lse = run_kernel(q, k, v, mask)
    keys = torch.tensor(keys)
    probs = key_probability(q, k, lse, keys, mask, SCALE)
    got = value_drains(v, out, probs, keys, valid=valid)
    ratio, norm_share, projection, full = direct_drains(eager_probs(q, k, mask), v, out, keys[None, None], valid)
    torch.testing.assert_close(got.value_norm_ratio, ratio, **TOL)
    torch.testing.assert_close(got.norm_share, norm_share, equal_nan=True, **TOL)
    torch.testing.assert_close(got.projection_share, projection, equal_nan=True, **TOL)
    # Over every key the projection shares add up to 1 (what makes the share additive).
    torch.testing.assert_close(full[valid[:, None].expand_as(full)], torch.ones(int(valid.sum()) * H, dtype=torch.float64), **TOL)
    assert bool((got.value_norm_ratio[..., keys.tolist().index(SINK)] < 0.2).all())


def test_value_drains_with_per_head_keys_read_their_own_kv_head():
    q, k, v = tensors(seed=6)
    out, lse = run_kernel(q, k, v, None)
    keys = torch.tensor([[[3], [7], [SINK], [20]]] * B)                         # (B, H, 1)
    probs = key_probability(q, k, lse, keys, None, SCALE)
    got = value_drains(v, out, probs, keys, chunk=5)              # several chunks of queries
    valid = torch.ones(B, T, dtype=torch.bool)
    ratio, norm_share, projection, _ = direct_drains(eager_probs(q, k, None), v, out, keys, valid)
    torch.testing.assert_close(got.value_norm_ratio, ratio, **TOL)
    torch.testing.assert_close(got.norm_share, norm_share, **TOL)
    torch.testing.assert_close(got.projection_share, projection, **TOL)


@pytest.mark.parametrize("keys", [[SINK], [0, SINK, 11]])
def test_compiled_value_drains_are_the_torch_path(monkeypatch, keys):
    """kernels.drain_dots (float32 on the CPU, the attention output read in place from its
    (B, T, H, D) memory) gives the chunked torch products within float32 rounding."""
    from probe.metrics import kernels

    q, k, v = tensors(seed=8)
    mask, valid = padding_mask([T, 26], T)
    out, lse = run_kernel(q, k, v, mask)
    out = out.transpose(1, 2).contiguous().transpose(1, 2)           # the kernels' memory order
    keys = torch.tensor(keys)
    probs = key_probability(q, k, lse, keys, mask, SCALE)
    compiled = value_drains(v, out, probs, keys, valid=valid)
    with monkeypatch.context() as m:
        m.setattr(kernels, "usable", lambda values: False)
        chunked = value_drains(v, out, probs, keys, valid=valid, chunk=7)
    for name in ("value_norm_ratio", "norm_share", "projection_share"):
        torch.testing.assert_close(getattr(compiled, name), getattr(chunked, name), equal_nan=True,
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("softcap", [None, 2.0])
def test_memory_is_bounded_by_the_block(monkeypatch, softcap):
    """No tensor of T x S elements per head is formed: every product is at most B H block S."""
    q, k, v = tensors(seed=7, plant=False)
    _, lse = run_kernel(q, k, v, None, softcap=softcap)
    seen = []
    for name in ("matmul", "bmm", "baddbmm", "einsum"):
        def spy(*args, _real=getattr(torch, name), **kwargs):
            r = _real(*args, **kwargs)
            seen.append(r.numel())
            return r
        monkeypatch.setattr(torch, name, spy)
    received_attention(q, k, lse, None, SCALE, softcap=softcap, block=4)
    assert len(seen) == math.ceil(T / 4) and max(seen) <= B * H * 4 * T


def test_bad_shapes_are_refused():
    q, k, v = tensors()
    _, lse = run_kernel(q, k, v, None)
    with pytest.raises(ValueError, match="multiple"):
        received_attention(q, k[:, :1].expand(B, 3, T, D), lse, None, SCALE)
    with pytest.raises(ValueError, match="lse"):
        received_attention(q, k, lse[:, :, 1:], None, SCALE)
    with pytest.raises(ValueError, match="full prefill"):
        received_attention(q, k[:, :, 1:], lse, None, SCALE)


# -- a tiny Hugging Face model with a planted secondary sink, against its eager attention ---------


class _Recorder:
    """Observer of the `probe` back-end: received attention per layer from what it hands over."""

    def __init__(self, valid):
        self.valid, self.got, self.masks = valid, {}, {}

    def on_attention(self, module, query, key, out, lse, mask, scale, softcap=None, value=None):
        self.got[module.layer_idx] = received_attention(query, key, lse, mask, scale, softcap=softcap,
                                                        valid=self.valid)
        self.masks[module.layer_idx] = mask


@pytest.mark.parametrize("padded", [False, True])
def test_tiny_model_received_equals_eager_output_attentions(planted, padded):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(8, 64, (2, HF_T), generator=g)
    ids[:, 9] = PLANT_TOKEN
    lengths = [HF_T, 31] if padded else [HF_T, HF_T]
    valid = torch.arange(HF_T)[None, :] < torch.tensor(lengths)[:, None]        # (B, T)
    attention_mask = valid.long() if padded else None
    rec = _Recorder(valid if padded else None)
    with attention.observing(planted, rec), torch.no_grad():
        planted(input_ids=ids, attention_mask=attention_mask, use_cache=False)
    planted.set_attn_implementation("eager")
    with torch.no_grad():
        eager = planted(input_ids=ids, attention_mask=attention_mask, use_cache=False,
                        output_attentions=True).attentions
    t, s = torch.arange(HF_T)[:, None], torch.arange(HF_T)[None, :]
    for layer, window in enumerate([None, HF_WINDOW]):
        if not padded:      # the back-end's own paths: plain causal, and the band without a mask
            assert rec.masks[layer] == (None if window is None else SlidingWindow(window))
        seen = (s <= t) if window is None else (s <= t) & (s > t - window)        # (T, S)
        seen = seen[None] & valid[:, :, None]                                      # (B, T, S)
        count = seen.sum(1) * valid                                                # (B, S)
        total = (eager[layer].double() * valid[:, None, :, None]).sum(2) * valid[:, None]
        want = torch.where(count[:, None] > 0, total / count[:, None].clamp_min(1), math.nan)
        got = rec.got[layer]
        assert torch.equal(got.count, count)
        torch.testing.assert_close(got.score(), want, equal_nan=True, **TOL)
    # The plant works: every head of layer 0 sends most of its attention to position 9.
    score = rec.got[0].score()
    assert bool((score[:, :, 9] > 0.3).all())
    assert bool((top_keys(rec.got[0], 1, min_queries=8)[..., 0] == 9).all())


def test_long_sequence_stays_within_tolerance():
    """T = 1024 with the default block (many blocks, float32 block sums): still within 1e-5 of
    the float64 column means, also for the last keys that few queries see."""
    g = torch.Generator().manual_seed(10)
    q = torch.randn(1, 2, 1024, 32, generator=g) * 1.5
    k = torch.randn(1, 1, 1024, 32, generator=g)
    v = torch.randn(1, 1, 1024, 32, generator=g)
    _, lse = attention.attention_with_lse(q, k, v, None, 32 ** -0.5)
    got = received_attention(q, k, lse, None, 32 ** -0.5)
    kk = k.double().expand(1, 2, 1024, 32)
    logits = (q.double() @ kk.transpose(-1, -2)) * 32 ** -0.5
    p = torch.softmax(logits.masked_fill(torch.ones(1024, 1024, dtype=torch.bool).triu(1), -math.inf), -1)
    count = torch.arange(1024, 0, -1)
    torch.testing.assert_close(got.score(), p.sum(2) / count, **TOL)
    assert torch.equal(got.count[0], count)


@pytest.mark.parametrize("case", ["causal", "padding", "window"])
def test_bfloat16_inputs_are_read_in_float32(case):
    """bfloat16 q / k: logits in float32 from the bfloat16 values; the kernel's lse itself is then
    the limit (3.4e-5 measured against the float64 softmax of the same values): within 1e-4."""
    q, k, v = (x.bfloat16() for x in tensors(seed=11))
    mask, valid = CASES[case]()
    _, lse = run_kernel(q, k, v, mask)
    got = received_attention(q, k, lse, mask, SCALE, valid=valid)
    total, count = reference_received(eager_probs(q, k, mask), mask, valid)
    want = torch.where(count[:, None] > 0, total / count[:, None].clamp_min(1), math.nan)
    torch.testing.assert_close(got.score(), want, equal_nan=True, atol=1e-4, rtol=0)
