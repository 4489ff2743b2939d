"""probe/metrics/anatomy/fused.py: causal attention with its column sums in one pass, against the
CPU flash kernel (attention.attention_with_lse) and received_attention after it on the same
tensors, and a whole sink-anatomy analysis with the fused pass against one without it."""
from __future__ import annotations

import math

import pytest
import torch
from torch.overrides import TorchFunctionMode

import probe
from probe.capture import attention
from probe.metrics.anatomy import fused
from probe.metrics.anatomy.received import received_attention
from tests.gold_diff import diff_files, read_folder

# Two float32 computations of the same softmax: the flash kernel's online rescaling against one
# exact normalisation per row. Measured here: 1e-6 on outputs of order 1, column sums of order T.
TOL = 2e-5


def tensors(B=2, H=6, Hkv=2, T=37, D=16, seed=0):
    """query, key, value as transformers hands them over: query and value transposed views."""
    g = torch.Generator().manual_seed(seed)
    query = (2 * torch.randn(B, T, H, D, generator=g)).transpose(1, 2)       # (B, H, T, D)
    key = 2 * torch.randn(B, Hkv, T, D, generator=g)
    value = torch.randn(B, T, Hkv, D, generator=g).transpose(1, 2)           # (B, Hkv, T, D)
    return query, key, value


def reference(query, key, value, scale, valid):
    out, lse = attention.attention_with_lse(query, key, value, None, scale)
    return out, lse, received_attention(query, key, lse, None, scale, valid=valid)


@pytest.mark.parametrize("block", [None, 1, 8, 64])
@pytest.mark.parametrize("padded", [False, True])
def test_output_lse_and_column_sums_equal_flash_then_received(block, padded):
    """Grouped heads (6 query, 2 KV), two sequences, blocks that do not divide T; with padding
    (the second sequence's last 7 positions do not count): padded keys receive 0 and are seen
    by no query, padded queries add nothing."""
    query, key, value = tensors()
    valid = None
    if padded:
        valid = torch.ones(2, 37, dtype=torch.bool)
        valid[1, 30:] = False
    want_out, want_lse, want = reference(query, key, value, 0.25, valid)
    out, lse, got = fused.attention_with_received(query, key, value, 0.25, valid=valid, block=block)
    assert torch.allclose(out, want_out, atol=TOL, rtol=TOL)
    assert torch.allclose(lse, want_lse, atol=TOL, rtol=0)
    assert torch.allclose(got.total, want.total, atol=TOL, rtol=TOL)
    assert torch.equal(got.count, want.count) and torch.equal(got.excluded, want.excluded)
    if padded:
        assert got.total[1, :, 30:].abs().max() == 0 and got.count[1, 30:].abs().max() == 0
    # The kernels' memory order, (B, T, H, D): the back-end's transpose is a view.
    assert out.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("far", [False, True])
def test_a_key_far_above_key_0_is_shifted_by_the_maximum(far, monkeypatch):
    """The kernel shifts each query's logits by key 0's; where a key's logit sits more than ~88
    above it, exp overflows and that block is made again with the row maximum. With key 5 far
    above key 0 for every query that sees it (queries 5 on: each block of 8 holds some), every
    block is made again; otherwise none. The same numbers as the flash kernel and
    received_attention either way."""
    query, key, value = tensors(B=1, H=2, Hkv=1, T=24)
    if far:                                  # every query along the first axis, key 5 far along it
        query = 0.1 * query + 3 * torch.eye(query.shape[-1])[0]
        key[0, 0, 5] = key[0, 0, 0] + 200 * torch.eye(key.shape[-1])[0]
        logits = 0.25 * query[0] @ key[0, 0].T                                   # (H, T, T)
        assert float((logits[:, 5:, 5] - logits[:, 5:, 0]).min()) > 89          # exp(89) overflows
    maxima = []
    amax = torch.Tensor.amax
    monkeypatch.setattr(torch.Tensor, "amax", lambda self, *a, **k: maxima.append(1) or amax(self, *a, **k))
    want_out, want_lse, want = reference(query, key, value, 0.25, None)
    maxima.clear()
    out, lse, got = fused.attention_with_received(query, key, value, 0.25, block=8)
    assert torch.allclose(out, want_out, atol=TOL, rtol=TOL)
    assert torch.allclose(lse, want_lse, atol=TOL, rtol=TOL)
    assert torch.allclose(got.total, want.total, atol=TOL, rtol=TOL)
    assert len(maxima) == (3 if far else 0)


def test_a_nan_query_is_left_out_as_after_the_flash_kernel():
    """A NaN in one query (an overflowed model): its lse is NaN, it is excluded and counted by no
    key, and the other keys' sums are those received_attention makes from the same lse."""
    query, key, value = tensors(B=1)
    query[0, 2, 20] = math.nan
    out, lse, got = fused.attention_with_received(query, key, value, 0.25, block=8)
    want = received_attention(query, key, lse, None, 0.25)
    assert bool(got.excluded[0, 20]) and not bool(got.excluded[0, 19])
    assert torch.equal(got.count, want.count)
    assert torch.allclose(got.total, want.total, equal_nan=True)


class ExpInputs(TorchFunctionMode):
    """Records the smallest input of every torch.exp / Tensor.exp_ call made under it."""

    def __init__(self):
        super().__init__()
        self.smallest: list[float] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("exp", "exp_"):
            with torch._C.DisableTorchFunction():
                self.smallest.append(float(args[0].min()))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("path", ["fused", "received_attention"])
def test_no_masked_logit_reaches_the_exp(path):
    """torch's CPU exp takes a slow path for -inf (about 25x a finite input on AVX-512), so the
    causal paths set the future keys to 0 after the exp instead of -inf before it: the exp
    sees finite logits only, and P is what it was (exp(-inf) is 0 exactly; the sums are held
    against the flash kernel above)."""
    query, key, value = tensors(B=1)
    _, lse = attention.attention_with_lse(query, key, value, None, 0.25)
    with ExpInputs() as seen:
        if path == "fused":
            fused.attention_with_received(query, key, value, 0.25, block=8)
        else:
            received_attention(query, key, lse, None, 0.25, block=8)
    assert len(seen.smallest) >= 5                              # one exp per block of 8 of 37 queries
    assert all(math.isfinite(v) for v in seen.smallest), seen.smallest


def test_only_plain_causal_float32_prefill_on_the_cpu_is_fused():
    query, key, _ = tensors()
    assert fused.fusable(query, key, None, None)
    assert not fused.fusable(query, key, torch.ones(1, 1, 37, 37, dtype=torch.bool), None)    # a mask
    assert not fused.fusable(query, key, attention.SlidingWindow(8), None)
    assert not fused.fusable(query, key, None, 30.0)                                       # a soft-cap
    assert not fused.fusable(query.double(), key.double(), None, None)
    assert not fused.fusable(query.bfloat16(), key.bfloat16(), None, None)
    assert not fused.fusable(query[:, :, -1:], key, None, None)                          # not a prefill


def test_an_anatomy_analysis_reads_the_same_with_and_without_the_fused_pass(checkpoint, tmp_path, monkeypatch):
    """probe.analyze(anatomy=True) on a gated hybrid, unpadded batches: the back-end makes every
    attention layer's column sums with its output (counted), and the whole run directory equals,
    within the gold tolerance (tests/gold_diff.py), the run where the flash kernel and
    received_attention after it make them."""
    lm = probe.load(checkpoint("qwen3_next"))
    g = torch.Generator().manual_seed(3)
    rows = [torch.randint(3, 256, (48,), generator=g).tolist() for _ in range(4)]

    def run(name):
        a = probe.analyze(lm, rows, seq_len=48, batch_size=2, bos="none", progress=False, anatomy=True,
                          resamples=0)
        return a.save(tmp_path / name)

    calls = []
    make = fused.attention_with_received
    monkeypatch.setattr(fused, "attention_with_received", lambda *a, **k: calls.append(1) or make(*a, **k))
    with_fused = run("fused")
    assert len(calls) == 2 * len(lm.layout.attention_layers)             # two batches
    monkeypatch.setattr(fused, "fusable", lambda *a: False)
    without = run("flash")
    assert len(calls) == 2 * len(lm.layout.attention_layers)
    assert diff_files(read_folder(without), read_folder(with_fused)) == []
