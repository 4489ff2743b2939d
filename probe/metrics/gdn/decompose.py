"""The exact split of a Gated DeltaNet output into per-key terms, streamed (no T x T matrix kept).

The gated delta rule, per value head, with state S (d_k x d_v), G_t = sum_{r<=t} g_r and
Gamma_{t,s} = exp(G_t - G_s) (the Gated DeltaNet paper, arXiv 2412.06464; transformers'
torch_recurrent_gated_delta_rule):

    u_t = beta_t (v_t - e^{g_t} S_{t-1}^T k_t)       the value actually written at t
    S_t = e^{g_t} S_{t-1} + k_t u_t^T
    o_t = S_t^T q_t

so, unrolled, with q and k as the kernel uses them (L2-normalised, q scaled by 1/sqrt(d_k)):

    o_t = sum_{s<=t} c_{t,s},   c_{t,s} = P_{t,s} u_s,   P_{t,s} = Gamma_{t,s} (q_t . k_s)

(the write basis: each term is key s's written value u_s, read back by query t through the
decayed key match). "Key s" is position s after the causal conv1d, which mixes each position
with the three before it: key 0 carries token 0 only, key s carries tokens s-3 .. s.

`written_values` computes u (and the final state) by the chunked form of the recurrence, in
float64: within a chunk, (I + A) U = diag(beta) (V - e^{c} K S_0) with
A_{i,j} = beta_i e^{c_i - c_j} (k_i . k_j) for j < i and c the decay summed from the chunk's
start. `KeyTerms.blocks` then walks the queries a block at a time: each block's P (H, Bq, t1)
is formed, read and dropped, so memory is O(T d) plus one block.

What is read from the terms (documented in docs/gdn.md):
- the key-0 share of query t: |c_{t,0}| / sum_s |c_{t,s}| (Euclidean norms, |c_{t,s}| =
  |P_{t,s}| |u_s|): the share of the output's parts carried by key 0, in [0, 1], summing to 1
  over keys like an attention probability; and the signed projection c_{t,0} . o_t / |o_t|^2,
  which sums to 1 over keys exactly;
- the state share phi_s = Gamma_{T,s} (k_s^T S_T u_s) / |S_T|_F^2: S_T = sum_s Gamma_{T,s} k_s u_s^T,
  so sum_s phi_s = 1 exactly.
"""
from __future__ import annotations

import math

import torch

F64 = torch.float64
CHUNK = 64
BLOCK = 1 << 22             # elements of one query block's (H, Bq, t1) temporaries


def written_values(k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor,
                   chunk: int = CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """k (H, L, dk), v (H, L, dv), beta, g (H, L), float64 -> (u (H, L, dv), S_L (H, dk, dv))."""
    H, L, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(H, dk, dv, dtype=F64, device=k.device)
    u = torch.empty(H, L, dv, dtype=F64, device=k.device)
    eye = torch.eye(chunk, dtype=F64, device=k.device)
    for a in range(0, L, chunk):
        b = min(L, a + chunk)
        kk, vv, bb = k[:, a:b], v[:, a:b], beta[:, a:b]
        c = g[:, a:b].cumsum(-1)                                          # (H, C), <= 0
        n = b - a
        lower = torch.ones(n, n, dtype=torch.bool, device=k.device).tril(-1)
        decay = (c[:, :, None] - c[:, None, :]).masked_fill(~lower, -math.inf).exp()   # (H, C, C)
        A = bb[:, :, None] * decay * (kk @ kk.transpose(1, 2))
        rhs = bb[:, :, None] * (vv - c.exp()[:, :, None] * (kk @ S))
        uu = torch.linalg.solve_triangular(A + eye[:n, :n], rhs, upper=False, unitriangular=True)
        u[:, a:b] = uu
        S = c[:, -1:, None].exp() * S + (kk * (c[:, -1:] - c).exp()[:, :, None]).transpose(1, 2) @ uu
    return u, S


def state_share(k: torch.Tensor, u: torch.Tensor, g: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """phi (H, L): key s's share of the final state's squared Frobenius norm (sums to 1)."""
    G = g.cumsum(-1)
    gamma = (G[:, -1:] - G).exp()                                         # (H, L)
    ks = k @ S                                                            # (H, L, dv)
    norm2 = (S * S).sum((1, 2))                                           # (H,)
    return gamma * (ks * u).sum(-1) / norm2[:, None].clamp_min(torch.finfo(F64).tiny)


class KeyTerms:
    """One sequence of one GDN layer, every value head: q, k (H, L, dk), u (H, L, dv), G (H, L),
    float64. `blocks()` yields, per block of queries [t0, t1), P (H, Bq, t1) and the sum of the
    terms (H, Bq, dv)."""

    def __init__(self, q, k, u, g, block_elements: int = BLOCK):
        self.q, self.k, self.u = q, k, u
        self.G = g.cumsum(-1)
        self.unorm = torch.linalg.vector_norm(u, dim=-1)                 # (H, L)
        self.block_elements = block_elements

    def blocks(self):
        H, L, _ = self.q.shape
        t0 = 0
        while t0 < L:
            rows = max(1, self.block_elements // max(1, H * L))
            t1 = min(L, t0 + rows)
            P = self.weights(t0, t1)                                       # (H, Bq, t1)
            yield t0, t1, P, P @ self.u[:, :t1]
            t0 = t1

    def weights(self, t0: int, t1: int) -> torch.Tensor:
        """P_{t,s} = Gamma_{t,s} (q_t . k_s) for t in [t0, t1), s < t1 (0 where s > t)."""
        G = self.G
        pos = torch.arange(t0, t1, device=G.device)
        keys = torch.arange(t1, device=G.device)
        later = keys[None, :] > pos[:, None]                               # (Bq, t1)
        decay = (G[:, t0:t1, None] - G[:, None, :t1]).masked_fill(later, -math.inf).exp()
        return (self.q[:, t0:t1] @ self.k[:, :t1].transpose(1, 2)) * decay

    def magnitudes(self, P: torch.Tensor) -> torch.Tensor:
        """|c_{t,s}| = |P_{t,s}| |u_s| (H, Bq, t1)."""
        return P.abs() * self.unorm[:, None, :P.shape[-1]]


def gated(recon: torch.Tensor, o: torch.Tensor, z: torch.Tensor, weight: torch.Tensor,
          eps: float) -> torch.Tensor:
    """The terms' sum carried through RMSNormGated: weight * SiLU(z) * rsqrt(mean(o^2) + eps) *
    recon, with the per-token factor taken from the kernel's own o (for a fixed factor the norm
    is linear). recon, o, z (..., dv) -> (..., dv) float64."""
    r = torch.rsqrt(o.double().pow(2).mean(-1, keepdim=True) + eps)
    return weight.double() * torch.nn.functional.silu(z.double()) * r * recon
