"""The `probe` attention back-end (probe/attention.py) against eager float64 softmax attention.

Each path is checked on the same tensors: the CPU flash kernel, the exact blockwise fallback,
and the CUDA memory-efficient path. CI has no GPU, so the CUDA path runs here against a CPU
stand-in for the kernel that enforces the kernel's contract (equal head counts, a (B, H, T, S)
bias with 16-element aligned rows, lse padded to a multiple of 32 queries with junk in the
padding); the real kernel is exercised only where a GPU is present (last test).
"""
from __future__ import annotations

import math

import pytest
import torch

from probe import attention

TOL = dict(atol=1e-5, rtol=1e-5)


def reference(query, key, value, mask, scale):
    """Eager softmax in float64: out (B, H, T, D), lse (B, H, T), P[..., 0] (B, H, T)."""
    heads, T, S = query.shape[1], query.shape[2], key.shape[2]
    k = key.double().repeat_interleave(heads // key.shape[1], dim=1)
    v = value.double().repeat_interleave(heads // value.shape[1], dim=1)
    scores = query.double() @ k.transpose(-1, -2) * scale                    # (B, H, T, S)
    if mask is None:
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), -math.inf)
    else:
        scores = scores.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.softmax(scores, dim=-1)
    return probs @ v, lse, probs[..., 0]


def tensors(B=2, H=4, KV=2, T=37, D=16, seed=0, dtype=torch.float32):
    """T = 37 is neither a multiple of 16 (bias alignment) nor of 32 (lse padding)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, n, T, D, generator=g) * 2 for n in (H, KV, KV))
    return q.to(dtype), k.to(dtype), v.to(dtype)


def padding_mask(B=2, T=37):
    """Causal and left padding on the second row: a bool (B, 1, T, S) mask, True = attend.
    Query rows that see no key at all are left out of comparisons (they are padding)."""
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    keep = torch.ones(B, T, dtype=torch.bool)
    keep[1, :5] = False
    return (causal[None] & keep[:, None, :])[:, None], keep


def efficient_kernel_standin(q, k, v, bias, compute_log_sumexp, dropout_p, is_causal, *, scale):
    """What aten._scaled_dot_product_efficient_attention does on a GPU, with its checks."""
    assert compute_log_sumexp and dropout_p == 0.0
    assert q.shape[1] == k.shape[1] == v.shape[1], "the kernel needs equal head counts"
    B, H, T, _ = q.shape
    S = k.shape[2]
    if bias is None:
        mask = None
        assert is_causal
    else:
        assert not is_causal and bias.dtype == q.dtype
        assert tuple(bias.shape) == (B, H, T, S)
        assert bias.stride(-1) == 1 and bias.stride(-2) % 16 == 0, "attn_bias is not correctly aligned"
        mask = bias > -math.inf
    out, lse, _ = reference(q, k, v, mask, scale)
    padded = torch.full((B, H, -(-T // 32) * 32), float("nan"))              # junk past T
    padded[..., :T] = lse
    return out.to(q.dtype), padded, torch.empty(()), torch.empty(())


@pytest.fixture
def emulated_cuda(monkeypatch):
    """Route CPU tensors through the CUDA branch with the stand-in kernel."""
    monkeypatch.setattr(attention, "fused_kernel", lambda query: "cuda-efficient")
    monkeypatch.setattr(attention, "_efficient_kernel", efficient_kernel_standin)


def check(out, lse, query, key, value, mask, scale, rows=None):
    want_out, want_lse, want_p0 = reference(query, key, value, mask, scale)
    p0 = attention.first_key_probability(query, key, lse, mask, scale)
    if rows is not None:  # (B, T) query rows that attend to something
        out, want_out = out.transpose(1, 2)[rows], want_out.transpose(1, 2)[rows]
        lse, want_lse, p0, want_p0 = (x.transpose(1, 2)[rows] for x in (lse, want_lse, p0, want_p0))
    torch.testing.assert_close(out.double(), want_out, **TOL)
    torch.testing.assert_close(lse.double(), want_lse, **TOL)
    torch.testing.assert_close(p0.double(), want_p0, **TOL)


PATHS = ("cpu-flash", "blockwise", "cuda-emulated")


def run_path(path, q, k, v, mask, scale, request):
    if path == "cuda-emulated":
        request.getfixturevalue("emulated_cuda")
    if path == "blockwise":
        return attention.chunked_attention_with_lse(q, k, v, attention.additive_mask(mask, q.dtype),
                                                    scale, chunk=16)
    return attention.attention_with_lse(q, k, v, mask, scale)


@pytest.mark.parametrize("path", PATHS)
def test_causal_grouped_query(path, request):
    q, k, v = tensors()
    scale = q.shape[-1] ** -0.5
    out, lse = run_path(path, q, k, v, None, scale, request)
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    check(out, lse, q, k, v, None, scale)


@pytest.mark.parametrize("path", PATHS)
def test_padding_mask_grouped_query(path, request):
    q, k, v = tensors(seed=1)
    mask, keep = padding_mask()
    scale = 0.3
    out, lse = run_path(path, q, k, v, mask, scale, request)
    check(out, lse, q, k, v, mask, scale, rows=keep)


def test_aligned_bias_pads_rows_and_keeps_values():
    mask, _ = padding_mask()
    for given in (mask, attention.additive_mask(mask, torch.float32)):
        bias = attention.aligned_bias(given, torch.float32)
        assert bias.shape == mask.shape and bias.stride(-2) == 48              # 37 -> 48
        torch.testing.assert_close(bias, attention.additive_mask(mask, torch.float32))


def test_kernel_refusal_falls_back_to_blockwise_with_one_warning(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("attn_bias is not correctly aligned\nmore detail")

    monkeypatch.setattr(attention, "fused_kernel", lambda query: "cuda-efficient")
    monkeypatch.setattr(attention, "_efficient_kernel", refuse)
    monkeypatch.setattr(attention, "_fallback_warned", False)
    q, k, v = tensors(seed=2)
    scale = q.shape[-1] ** -0.5
    with pytest.warns(UserWarning, match=r"not correctly aligned\); using exact blockwise") as seen:
        out, lse = attention.attention_with_lse(q, k, v, None, scale)
        attention.attention_with_lse(q, k, v, None, scale)
    assert len(seen) == 1
    check(out, lse, q, k, v, None, scale)


def test_out_of_memory_is_not_hidden_by_the_fallback(monkeypatch):
    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(attention, "fused_kernel", lambda query: "cuda-efficient")
    monkeypatch.setattr(attention, "_efficient_kernel", oom)
    q, k, v = tensors()
    with pytest.raises(torch.OutOfMemoryError):
        attention.attention_with_lse(q, k, v, None, 0.25)


def test_float64_uses_the_exact_blockwise_path():
    q, k, v = tensors(dtype=torch.float64)
    assert attention.fused_kernel(q) is None
    out, lse = attention.attention_with_lse(q, k, v, None, 0.25)
    check(out, lse, q, k, v, None, 0.25)


def test_analysis_through_the_cuda_branch_equals_the_cpu_path(loaded, emulated_cuda, monkeypatch):
    """A whole capture on a gated GQA model: the CUDA branch's glue gives the CPU numbers."""
    from test_capture import ids_for, run_capture

    lm = loaded("official_elementwise")
    ids = ids_for(lm.model, T=45)
    cap_cuda, logits_cuda = run_capture(lm, ids)
    monkeypatch.undo()                                                        # back to the CPU kernel
    cap_cpu, logits_cpu = run_capture(lm, ids)
    torch.testing.assert_close(logits_cuda, logits_cpu, **TOL)
    for layer in cap_cpu.first_token:
        torch.testing.assert_close(cap_cuda.first_token[layer].f_attn(), cap_cpu.first_token[layer].f_attn(),
                                   atol=1e-6, rtol=0)
        torch.testing.assert_close(cap_cuda.gates[layer].mean(), cap_cpu.gates[layer].mean(), atol=1e-6, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (CI has none)")
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_real_cuda_kernel(dtype):
    q, k, v = (x.cuda() for x in tensors(dtype=dtype))
    mask, keep = padding_mask()
    tol = TOL if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    for m, rows in ((None, None), (mask.cuda(), keep.cuda())):
        out, lse = attention.attention_with_lse(q, k, v, m, 0.25)
        want_out, want_lse, want_p0 = reference(q.cpu(), k.cpu(), v.cpu(), None if m is None else mask, 0.25)
        p0 = attention.first_key_probability(q, k, lse, m, 0.25)
        got = [x.cpu().double() for x in (out, lse, p0)]
        want = [want_out, want_lse, want_p0]
        if rows is not None:
            got = [x.transpose(1, 2)[keep] for x in got]
            want = [x.transpose(1, 2)[keep] for x in want]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, **tol)
