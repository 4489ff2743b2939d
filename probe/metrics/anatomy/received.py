"""Attention received by every key, from the kernel's log-sum-exp, without a T x T matrix.

Gu et al. (ICLR 2025, "When Attention Sink Emerges in Language Models") score each key k by
the mean attention it receives from the queries that can see it:

    score[k] = (1 / n_k) * sum over queries t that see k of P[t, k],    P[t, k] = exp(l[t, k] - lse_t)

with l[t, k] the logit the softmax saw (scale * q_t . k_k, soft-capped, plus the mask) and
lse_t the normaliser the attention kernel returned. Recomputing one block of logits at a time
(an extra Q.K^T pass over blocks of queries) gives every column sum while holding only a
block x S slice: memory O(block x S), never T x S. Causal attention only looks at keys
[0, block end) and a sliding window only at the band, so those blocks are narrower still.

The lse is the one the `probe` back-end hands to its observer: for gpt-oss it already holds the
per-head sink logit (attention.add_sink), so P here is the probability on the real keys and the
rest of each row went to the learned sink, as in eager softmax with the sink column.

Also here, for a few chosen keys (the sinks): the probability every query puts on them, O(T K D)
(`key_probability`), and how much of the attention output they carry (`value_drains`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...families.attention_terms import KeyAblation, SlidingWindow, band_mask, cap_logits
from .. import kernels

F64, I64 = torch.float64, torch.int64

# Logits per block of received_attention (B * H * block * keys float32 elements, 8 MB; the pass
# peaks at about 2.5 times that): the block of queries shrinks as B, H and S grow, so memory
# stays bounded at any length. Larger blocks were no faster (benchmarks/anatomy_kernel.py).
BLOCK_ELEMENTS = 1 << 21
# Queries per block at most under causal attention or a sliding window: a block of c queries
# computes a c x c triangle of logits that its mask then discards, so small blocks skip most of
# the upper half. 48 was the fastest of 32 .. 128 on SmolLM2's shape (9 query / 3 KV heads,
# head_dim 64, one thread): at T = 512 3.2 ms a layer against 9.8 ms for one 455-query block.
CAUSAL_BLOCK = 48
# Batch.derived's name for one attention event's ReceivedAttention (shared_received_attention).
RECEIVED = "received_attention"


@dataclass
class ReceivedAttention:
    """Column sums of one layer's attention, over the valid queries that can see each key.

    total (B, H, S) float64: sum over valid queries t that see key k of P[t, k];
    count (B, S) int64: how many valid queries see key k (0 for invalid keys; the same in every
    head, since masks do not depend on the head);
    excluded (B, T) bool: valid queries left out because their lse is not finite in some head
    (NaN or inf in the model; they are in no count either).
    """
    total: torch.Tensor
    count: torch.Tensor
    excluded: torch.Tensor

    def score(self) -> torch.Tensor:
        """(B, H, S) float64: Gu et al.'s importance score total / count, NaN where count is 0."""
        n = self.count.to(F64)[:, None, :]
        return torch.where(n > 0, self.total / n.clamp_min(1), math.nan)


def _check(query, key, lse, mask, valid):
    B, H, T, _ = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    if H % Hkv:
        raise ValueError(f"received attention: {H} query heads are not a multiple of {Hkv} key heads")
    if tuple(lse.shape) != (B, H, T):
        raise ValueError(f"received attention: lse has shape {tuple(lse.shape)}, expected {(B, H, T)}")
    causal = mask is None or isinstance(mask, SlidingWindow)
    if (causal or valid is not None) and T != S:
        raise ValueError("received attention expects a full prefill (as many keys as queries)")
    return B, H, T, Hkv, S


def key_range(mask, start: int, end: int, S: int) -> tuple[int, int]:
    """The keys [lo, hi) that queries [start, end) can see at all: causal ones only keys before
    `end`, a sliding window only the band; an explicit mask may reach any key."""
    if mask is None:
        return 0, end
    if isinstance(mask, SlidingWindow):
        return max(0, start - mask.size + 1), end
    return 0, S


def visible_block(mask, start: int, end: int, lo: int, hi: int, device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(visible (B|1, 1, c, n) bool, bias (B|1, 1, c, n) float32 or None) for queries
    [start, end) and keys [lo, hi) of a SlidingWindow or a mask tensor. bias is an additive float mask's values (as the kernel adds
    them); a key is visible where the mask allows it (True, or a bias above -inf)."""
    if isinstance(mask, SlidingWindow):
        return band_mask(start, end, lo, mask.size, device), None      # hi == end for a window
    if isinstance(mask, KeyAblation):                                  # a sink ablation's index rule
        return mask.visible(start, end, torch.arange(lo, hi, device=device)), None
    block = mask[:, :, start:end, lo:hi]
    if block.dtype == torch.bool:
        return block, None
    bias = block.float()
    return bias > -math.inf, bias


def block_logits(query, key, start: int, end: int, lo: int, hi: int, scale, softcap,
                 lse: torch.Tensor | None = None, buffer: torch.Tensor | None = None) -> torch.Tensor:
    """scale * q . k, soft-capped, minus lse (B, H, c) when given, for queries [start, end) and
    keys [lo, hi): (B, H, c, n) float32 (float64 for float64 inputs), written into `buffer`
    (flat, at least B H c n elements) when given. Grouped K/V are used as they are: the G query
    heads of one KV head are stacked as rows of one matmul, so no (B, H, S, D) copy of the keys
    is made. Without a cap, the scale and the lse go into the matmul itself (baddbmm): two
    passes over the block fewer."""
    B, H, _, D = query.shape
    Hkv = key.shape[1]
    work = torch.float64 if query.dtype == torch.float64 else torch.float32
    c, n = end - start, hi - lo
    rows = (H // Hkv) * c
    q = query[:, :, start:end].to(work).reshape(B * Hkv, rows, D)             # (B Hkv, G c, D)
    k = key[:, :, lo:hi].to(work).reshape(B * Hkv, n, D)                      # (B Hkv, n, D)
    out = None if buffer is None else buffer[: B * H * c * n].view(B * Hkv, rows, n)
    if softcap is None and lse is not None:
        shift = lse.to(work).reshape(B * Hkv, rows, 1).neg()                  # -lse per row
        return torch.baddbmm(shift, q, k.transpose(-1, -2), alpha=scale, out=out).view(B, H, c, n)
    logits = torch.bmm(q, k.transpose(-1, -2), out=out).view(B, H, c, n)      # (B, H, c, n)
    logits.mul_(scale)
    if softcap is not None:                     # softcap * tanh(s / softcap), in place
        logits.div_(softcap).tanh_().mul_(softcap)
    if lse is not None:
        logits.sub_(lse[..., None].to(work))
    return logits


def visible_count(mask, counted: torch.Tensor) -> torch.Tensor | None:
    """(B, S) int64: how many counted queries see each key, in closed form for causal attention
    (the counted queries t >= k) and a sliding window (those in [k, k + W)); None for an explicit
    mask (counted block by block from the mask)."""
    if mask is not None and not isinstance(mask, SlidingWindow):
        return None
    B, T = counted.shape
    upto = torch.zeros(B, T + 1, dtype=I64, device=counted.device)
    upto[:, 1:] = counted.long().cumsum(1)                                    # counted in [0, t)
    k = torch.arange(T, device=counted.device)
    end = torch.full_like(k, T) if mask is None else (k + mask.size).clamp_max(T)
    return upto[:, end] - upto[:, k]


def counted_queries(lse: torch.Tensor, valid: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(counted (B, T) bool, excluded (B, T) bool): the valid queries whose lse is finite in
    every head, and the valid ones left out because it is not."""
    finite = torch.isfinite(lse).all(1)                                       # (B, T)
    valid = torch.ones_like(finite) if valid is None else valid.to(lse.device).bool()
    return valid & finite, valid & ~finite


def received_attention(query, key, lse, mask, scale, *, softcap: float | None = None,
                       valid: torch.Tensor | None = None, block: int | None = None) -> ReceivedAttention:
    """Attention received by every key of one layer, summed over the queries that see it.

    query (B, H, T, D); key (B, Hkv, S, D), Hkv dividing H (query head h reads KV head
    h // (H / Hkv), as repeat_interleave); lse (B, H, T), the normaliser the kernel returned;
    mask: None (causal), a SlidingWindow or the (B|1, 1, T, S) bool / additive float mask
    attention used; softcap: Gemma 2's logit cap; valid (B, T) bool or None (all): queries and
    keys that count (padding and sliding-window context are False; needs T == S). Keys that
    are not valid get total 0 and count 0.

    Each block of queries costs one (B, H, block, n) logit tensor, n <= S the keys the block can
    see; `block` defaults to what keeps it at BLOCK_ELEMENTS, and to at most CAUSAL_BLOCK queries
    under a causal or sliding-window mask. A block's column sums are taken in
    the work dtype (float32, over at most `block` queries: a float64 sum would cost a float64
    copy of the block) and accumulated across blocks in float64.
    """
    B, H, T, Hkv, S = _check(query, key, lse, mask, valid)
    device = query.device
    counted, excluded = counted_queries(lse, valid)
    # A query that does not count gets lse = +inf: exp(l - inf) = 0 in every column, with no
    # extra pass over the logits (and no NaN from a query that sees no key, lse = -inf).
    work = torch.float64 if query.dtype == torch.float64 else torch.float32
    lse = lse.to(work).masked_fill(~counted[:, None, :], math.inf)           # (B, H, T)
    if block is None:
        block = max(1, BLOCK_ELEMENTS // max(1, B * H * S))
        if mask is None or isinstance(mask, SlidingWindow):
            block = min(block, CAUSAL_BLOCK)
    # One contiguous copy at most (transformers hands over a transposed view, bfloat16 models
    # another dtype): each block's (B Hkv, n, D) slice is then a view, not a copy of n keys.
    key = key.to(work).contiguous()
    total = torch.zeros(B, H, S, dtype=F64, device=device)
    # One logit buffer for every block (blocks differ in width, and fresh allocations of
    # varying size fragment the CPU heap: resident memory grew to 3-4 blocks without it).
    widest = min(S, block + mask.size - 1) if isinstance(mask, SlidingWindow) else S   # keys per block
    buffer = torch.empty(B * H * min(block, T) * widest, dtype=work, device=device)
    count = visible_count(mask, counted)                                      # (B, S) or None
    explicit = count is None
    if explicit:
        count = torch.zeros(B, S, dtype=I64, device=device)
    for start in range(0, T, block):
        end = min(start + block, T)
        lo, hi = key_range(mask, start, end, S)
        p = block_logits(query, key, start, end, lo, hi, scale, softcap, lse[:, :, start:end], buffer)  # l - lse
        if mask is None:        # keys before the block are seen by all of it: mask its diagonal only
            diagonal = torch.ones(end - start, end - start, dtype=torch.bool, device=device).triu_(1)
            # 0 after the exp rather than -inf before it: the same P, without the slow path that
            # torch's CPU exp takes for -inf (fused.py)
            p.exp_()[..., start - lo:].masked_fill_(diagonal, 0.0)
        else:
            visible, bias = visible_block(mask, start, end, lo, hi, device)  # (B|1, 1, c, n)
            if bias is not None:
                p.add_(bias)
            p.masked_fill_(~visible, -math.inf).exp_()
            if explicit:
                count[:, lo:hi] += (visible[:, 0] & counted[:, start:end, None]).sum(1)
        total[:, :, lo:hi] += p.sum(2)                                        # P[t, k], summed over t
    if valid is not None:
        keep = valid.to(device).bool()                                        # (B, S)
        total.mul_(keep[:, None, :])
        count.mul_(keep)
    return ReceivedAttention(total, count, excluded)


def shared_received_attention(b, query, key, lse, mask, scale, softcap=None) -> ReceivedAttention:
    """received_attention of one attention event, made once for every metric that reads it
    (sink anatomy, the per-token series: bus.Batch.derived), over batch `b`'s valid queries."""
    valid = None if b.all_valid else b.valid.to(query.device)
    return b.derived(RECEIVED, query, lambda: received_attention(
        query, key, lse, mask, scale, softcap=softcap, valid=valid))


def top_keys(received: ReceivedAttention, k: int = 1, min_queries: int = 1) -> torch.Tensor:
    """(B, H, k) int64: per sequence and head, the k keys with the highest score among those
    seen by at least `min_queries` counted queries (the last keys of a causal sequence are seen
    by a handful of queries and their scores are noisy). Ties: the lower position first."""
    score = received.score()                                                  # (B, H, S)
    enough = (received.count >= min_queries)[:, None, :]
    score = torch.where(enough & ~torch.isnan(score), score, -math.inf)
    if k == 1:              # argmax names the first of tied maxima: the same key, without a sort
        return score.argmax(-1, keepdim=True)
    # A stable descending sort breaks ties by position; topk would not promise an order.
    return torch.sort(score, dim=-1, descending=True, stable=True).indices[..., :k]


def gather_keys(x: torch.Tensor, keys: torch.Tensor, heads: int) -> torch.Tensor:
    """x (B, Hkv, S, D), keys (B, H, K) int64 positions per query head -> (B, H, K, D): the key
    (or value) vector each query head reads at those positions, from its own KV head."""
    B, Hkv = x.shape[:2]
    kv = torch.arange(heads, device=x.device) // (heads // Hkv)               # (H,)
    # Advanced indexing reads the K rows alone, whatever x's strides (a reshape of a transposed
    # key tensor would copy all of it).
    return x[torch.arange(B, device=x.device)[:, None, None], kv[None, :, None], keys.to(x.device)]


def as_head_keys(keys: torch.Tensor, B: int, H: int) -> torch.Tensor:
    """Sink keys as (B, H, K) int64: (K,) positions for every sequence and head, (B, K) per
    sequence, or (B, H, K) per sequence and head."""
    keys = torch.as_tensor(keys, dtype=I64)
    if keys.dim() == 1:
        keys = keys[None, None, :]
    elif keys.dim() == 2:
        keys = keys[:, None, :]
    return keys.expand(B, H, keys.shape[-1])


def key_probability(query, key, lse, keys, mask, scale, *, softcap: float | None = None,
                    chunk: int = 8192) -> torch.Tensor:
    """P[b, h, t, keys[b, h, j]] for every query t: (B, H, T, K) float32 (float64 for float64
    inputs), 0 where the key is masked from the query. O(T K D), no T x S tensor.

    query (B, H, T, D); key (B, Hkv, S, D); lse (B, H, T) as the kernel returned it; keys (K,),
    (B, K) or (B, H, K) key positions (see as_head_keys); mask and softcap as in
    received_attention. A generalisation of attention.first_key_probability to any keys.
    """
    B, H, T, _ = query.shape
    S = key.shape[2]
    keys = as_head_keys(keys, B, H).to(query.device)                          # (B, H, K)
    work = torch.float64 if query.dtype == torch.float64 else torch.float32
    kk = gather_keys(key, keys, H).to(work).transpose(-1, -2)                 # (B, H, D, K)
    logit = torch.empty(B, H, T, keys.shape[-1], dtype=work, device=query.device)
    for start in range(0, T, chunk):
        logit[:, :, start:start + chunk] = torch.matmul(query[:, :, start:start + chunk].to(work), kk)
    logit = cap_logits(logit.mul_(scale), softcap)
    t = torch.arange(T, device=query.device)[None, None, :, None]             # (1, 1, T, 1)
    j = keys[:, :, None, :]                                                   # (B, H, 1, K)
    if mask is None:
        visible = j <= t                                                      # (B, H, T, K)
    elif isinstance(mask, SlidingWindow):
        visible = (j <= t) & (j > t - mask.size)
    elif isinstance(mask, KeyAblation):
        visible = mask.allows(t, j)
    else:
        m = mask[:, 0].expand(B, T, S)[:, None].expand(B, H, T, S)             # views, no copy
        m = torch.gather(m, 3, j.expand(B, H, T, j.shape[-1]))                  # (B, H, T, K)
        if m.dtype == torch.bool:
            visible = m
        else:
            logit = logit + m.to(work)
            visible = m > -math.inf
    # Where the key is masked P is 0, also for a query that sees no key at all (lse = -inf).
    return torch.where(visible, torch.exp(logit - lse.to(work)[..., None]), 0.0)


@dataclass
class ValueDrains:
    """How much of one layer's attention output a few sink keys carry.

    value_norm_ratio (B, H, K) float64: ||v at the sink key|| / median ||v|| over the valid keys
    of the sequence, in the query head's KV head (torch.median: the lower middle value).
    norm_share (B, H, T) float64: ||c_t|| / ||o_t||, c_t = sum_j P[t, key_j] v_key_j the part of
    the output o_t that the sinks contribute. It can exceed 1 when other keys cancel it.
    projection_share (B, H, T) float64: (c_t . o_t) / ||o_t||^2, the sinks' share of o_t along
    its own direction; over all keys these shares sum to exactly 1, so it is additive (and
    negative when a sink pushes against the output).
    Both shares are NaN for queries that do not count or whose output is zero.
    """
    value_norm_ratio: torch.Tensor
    norm_share: torch.Tensor
    projection_share: torch.Tensor


def value_drains(value, out, probs, keys, *, valid: torch.Tensor | None = None,
                 chunk: int = 1024) -> ValueDrains:
    """value (B, Hkv, S, D); out (B, H, T, D) the attention output o_t = sum_k P[t, k] v_k as the
    back-end returns it (pre-gate, after a gpt-oss sink); probs (B, H, T, K) from
    key_probability for the same keys; keys (K,), (B, K) or (B, H, K); valid (B, T) or None.

    ||c_t||^2 = sum_ij P_i P_j (v_i . v_j) through the K x K Gram matrix of the sink values and
    c_t . o_t = sum_j P_j (v_j . o_t): O(T K D), no (B, H, T, D) copy of the contribution. Dot
    products in float32 (float64 for float64 inputs), over `chunk` queries at a time, so that
    no float copy of the whole output is made (a float32 output on the CPU: in one compiled read,
    kernels.drain_dots); the shares come back in float64.
    """
    B, H, T, _ = out.shape
    work = torch.float64 if out.dtype == torch.float64 else torch.float32
    keys = as_head_keys(keys, B, H).to(value.device)
    vk = gather_keys(value, keys, H).to(work)                                 # (B, H, K, D)
    norms = torch.linalg.vector_norm(value, dim=-1, dtype=work)               # (B, Hkv, S)
    if valid is not None:
        norms = norms.masked_fill(~valid.to(value.device).bool()[:, None, :], math.nan)
    median = norms.nanmedian(dim=-1).values.repeat_interleave(H // value.shape[1], dim=1)  # (B, H)
    ratio = (vk.norm(dim=-1) / median[..., None]).double()                    # (B, H, K)
    gram = vk @ vk.transpose(-1, -2)                                          # (B, H, K, K)
    if kernels.usable(out) and work == torch.float32:   # one compiled read of the output
        c_sq, c_dot_o, o_sq = kernels.drain_dots(out, vk, probs.to(work), gram)  # ||c_t||^2, c_t . o_t, ||o_t||^2
    else:
        c_sq = torch.empty(B, H, T, dtype=work, device=out.device)            # ||c_t||^2
        c_dot_o = torch.empty_like(c_sq)                                      # c_t . o_t
        o_sq = torch.empty_like(c_sq)                                         # ||o_t||^2
        for start in range(0, T, chunk):
            end = min(start + chunk, T)
            p = probs[:, :, start:end].to(work)                               # (B, H, c, K)
            o = out[:, :, start:end].to(work)                                 # (B, H, c, D)
            c_sq[:, :, start:end] = ((p @ gram) * p).sum(-1)
            c_dot_o[:, :, start:end] = (p * (o @ vk.transpose(-1, -2))).sum(-1)
            o_sq[:, :, start:end] = (o * o).sum(-1)
    c_sq, c_dot_o, o_sq = c_sq.double().clamp_min(0), c_dot_o.double(), o_sq.double()
    keep = o_sq > 0
    if valid is not None:
        keep = keep & valid.to(out.device).bool()[:, None, :]
    norm_share = torch.where(keep, c_sq.sqrt() / o_sq.sqrt(), math.nan)
    projection_share = torch.where(keep, c_dot_o / o_sq, math.nan)
    return ValueDrains(ratio, norm_share, projection_share)
