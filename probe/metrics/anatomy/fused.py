"""Causal softmax attention that returns, with its output, the attention every key receives.

Sink anatomy reads each layer's column sums of P (received.py). Taken after the attention kernel,
they cost a second Q.K^T and exp over every visible logit: +10% of a plain forward at T = 2048,
+35% at 8192 on SmolLM2. Where the `probe` back-end would call the CPU flash kernel on plain
causal attention, it computes the attention here instead, a block of queries at a time, and
takes the column sums from the same probabilities:

    s = scale q_t . k_j (j <= t),  m_t = s_t0 (key 0's),  e = exp(s - m_t),  r_t = sum_j e
    out_t = sum_j e v_j / r_t,  lse_t = m_t + log r_t,  total[j] += sum_t w_t e[t, j],  w_t = 1 / r_t

(w_t = 0 for a query that does not count). r_t comes out of the P.V product (V with a column
of ones) and the column sums are one matrix-vector product per block, so the pass over the
logits is the one attention makes anyway: on SmolLM2's layer shape the layer costs 0.66x (T =
512) and 0.74x (2048) of the flash kernel and received_attention after it
(benchmarks/anatomy_kernel.py). Numbers agree with the flash kernel and received_attention
within float32 rounding (tests/metrics/test_anatomy_fused.py).
"""
from __future__ import annotations

import math

import torch

from .received import ReceivedAttention, counted_queries, received_attention, visible_count

# Queries per block: the (B H block, keys) logits are read three times (exp, P.V, column sums;
# a fourth, the maximum, only where key 0's shift overflows). With the key-0 shift (no pass for
# the maximum) 64 is the fastest of 32 .. 128 on SmolLM2's shape (9 query / 3 KV heads, head_dim
# 64, one thread): 566 ms a layer at T = 8192 against 607 for 32, 43.4 against 45.9 at 2048,
# 4.20 against 4.35 at 512. FUSED_ELEMENTS bounds the block's logits (32 MB of float32), so the
# block shrinks past T = 14,500 (B = 1, 9 heads) and memory stays bounded at any length.
FUSED_BLOCK = 64
FUSED_ELEMENTS = 1 << 23


def fusable(query, key, mask, softcap) -> bool:
    """Whether attention_with_received computes this call: plain causal attention (no mask, no
    cap) over a full prefill, in float32 on the CPU (elsewhere the fused kernels stay faster)."""
    return (mask is None and softcap is None and query.dtype == torch.float32 and query.device.type == "cpu"
            and query.shape[2] == key.shape[2])


def attention_with_received(query, key, value, scale, *, valid: torch.Tensor | None = None,
                            block: int | None = None):
    """Causal softmax attention with its column sums: (out (B, H, T, D), lse (B, H, T) float32,
    ReceivedAttention), as attention_with_lse and received_attention(query, key, lse, None,
    scale, valid=valid) would give them.

    query (B, H, T, D) float32; key, value (B, Hkv, T, D), Hkv dividing H; valid (B, T) bool or
    None (all): the queries and keys that count. out is (B, T, H, D) in memory, as the fused
    kernels return it (the back-end's transpose stays a view).
    """
    B, H, T, D = query.shape
    Hkv = key.shape[1]
    G = H // Hkv
    block = block or max(1, min(FUSED_BLOCK, FUSED_ELEMENTS // max(1, B * H * T)))
    out = query.new_empty(B, T, H, value.shape[-1]).transpose(1, 2)           # (B, H, T, Dv)
    lse = torch.empty(B, H, T, dtype=torch.float32, device=query.device)
    total = torch.zeros(B, H, T, dtype=torch.float64, device=query.device)
    keys = key.contiguous().view(B * Hkv, T, D)
    shifted = keys - keys[:, :1]                                              # k_j - k_0
    # V with a column of ones: e @ [V, 1] gives the unnormalised output and r_t in one product.
    values = torch.cat([value, value.new_ones(B, Hkv, T, 1)], dim=-1).view(B * Hkv, T, -1)
    Dv = values.shape[-1] - 1
    counts = None if valid is None else valid.to(query.device).bool()       # (B, T)
    buffer = torch.empty(B * H * min(block, T) * T, dtype=torch.float32, device=query.device)
    for start in range(0, T, block):
        end = min(start + block, T)
        c = end - start
        # The G query heads of one KV head are rows of one matmul: no (B, H, T, D) copy of K.
        q = (query[:, :, start:end] * scale).reshape(B * Hkv, G * c, D)      # (B Hkv, G c, D)
        diagonal = torch.ones(c, c, dtype=torch.bool, device=query.device).triu_(1)
        # The shift m_t: key 0's logit, which every query sees (so e_t0 = 1 and r_t >= 1), instead
        # of the row maximum: s - m = q (k_j - k_0), one product with the shifted keys and no pass
        # for the maximum nor for the subtraction. Only a block where some e overflows (a logit
        # more than ~88 above key 0's) is made again with the maximum. Either shift gives the
        # same softmax; they differ in float32 rounding.
        for shift in ("key 0", "max"):
            s = buffer[: B * H * c * end].view(B * Hkv, G * c, end)
            torch.bmm(q, (shifted if shift == "key 0" else keys)[:, :end].transpose(-1, -2), out=s)
            future = s.view(B * Hkv, G, c, end)[..., start:]                   # causal: keys > query
            if shift == "key 0":                                              # s holds s - m already
                m = torch.bmm(q, keys[:, :1].transpose(-1, -2))                         # (B Hkv, G c, 1)
                # Masked after the exp, as 0: the same e as exp(-inf), but torch's CPU exp takes a
                # slow path for every input outside its finite range (-inf: ~25x a finite one),
                # and the masked triangle is a tenth of the logits at T = 512.
                e = s.exp_()                                                  # in place: e = exp(s - m)
                future.masked_fill_(diagonal, 0.0)
            else:
                future.masked_fill_(diagonal, -math.inf)
                m = s.amax(-1, keepdim=True)
                e = s.sub_(m).exp_()
            weighted = torch.bmm(e, values[:, :end])                          # (B Hkv, G c, Dv + 1)
            r = weighted[..., Dv:]                                            # sum_j e
            if shift == "max" or bool(torch.isfinite(r).all()):
                break
        out[:, :, start:end] = (weighted[..., :Dv] / r).view(B, H, c, Dv)
        lse[:, :, start:end] = (m + r.log()).view(B, H, c)
        w = r.reciprocal().view(B, Hkv, G, c)
        if counts is not None:
            w = w * counts[:, None, None, start:end]
        sums = torch.matmul(w.view(B * Hkv, G, 1, c), e.view(B * Hkv, G, c, end))  # (B Hkv, G, 1, end)
        total[:, :, :end] += sums.view(B, H, end)
    if not bool(torch.isfinite(lse).all()):
        # A NaN or inf in the model: the general path leaves those queries out exactly as it does
        # after the flash kernel (here their rows would be 0 * NaN in the column sums).
        return out, lse, received_attention(query, key, lse, None, scale, valid=valid)
    counted, excluded = counted_queries(lse, counts)
    count = visible_count(None, counted)                                       # (B, T)
    if counts is not None:
        total.mul_(counts[:, None, :])
        count.mul_(counts)
    return out, lse, ReceivedAttention(total, count, excluded)
