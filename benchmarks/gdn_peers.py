"""TransformerLens 4.3's effective attention of a Gated DeltaNet layer against probe's per-key
terms, on the same inputs: how far each one's sum misses the kernel's own output, its CPU time
and its peak memory.

The inputs are random and float32, one sequence, grouped heads (--heads value heads over half as
many key heads): q, k, v, beta = sigmoid(.) and g = -softplus(.) as a Qwen3.5 layer hands them
to its kernel. The reference output is transformers' `torch_chunk_gated_delta_rule` (the torch
kernel Qwen3.5 runs without flash-linear-attention), which L2-normalises q and k and scales q by
1/sqrt(d_k) itself.

  tl_raw    TransformerLens' `GatedDeltaNetBridge.compute_effective_attention` on the hooked
            q and k (before the kernel's normalisation, as its hooks carry them), times v
  tl_normed the same on q and k normalised and scaled as the kernel uses them (the best case
            for it: its docstring names the missing normalisation as one of two gaps)
  probe     probe's write-basis terms (probe/metrics/gdn/decompose.py), summed block by block

TransformerLens builds a (heads, T, T) matrix and drops the delta rule's key-removal term (its
docstring calls the result "an interpretability heuristic, not a faithful output
decomposition"); probe's terms are exact and streamed (O(T d) memory plus one block).

    python benchmarks/gdn_peers.py [--lengths 256 2048] [--heads 4] [--dim 64]

Each measurement runs in its own niced process with one thread (common.run_child).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import child_args, clocks, run_child  # noqa: E402

METHODS = ("kernel", "tl_raw", "tl_normed", "probe")


def inputs(T: int, heads: int, dim: int, seed: int = 0):
    """(q, k (1, T, heads/2, dim), v (1, T, heads, dim), g, beta (1, T, heads)) float32."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    kh = max(1, heads // 2)
    q, k = (torch.randn(1, T, kh, dim, generator=gen) for _ in range(2))
    v = torch.randn(1, T, heads, dim, generator=gen)
    beta = torch.sigmoid(torch.randn(1, T, heads, generator=gen))
    g = -torch.nn.functional.softplus(torch.randn(1, T, heads, generator=gen) - 2.0)
    return q, k, v, g, beta


def kernel_output(q, k, v, g, beta):
    """(1, T, heads, dim) float32: transformers' torch kernel, grouped heads repeated as Qwen3.5 does."""
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    rep = v.shape[2] // q.shape[2]
    q, k = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)
    out, _ = torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)
    return out


def normed(q, k):
    """q and k as the kernel uses them: L2-normalised, q scaled by 1/sqrt(d_k)."""
    import torch.nn.functional as F

    return F.normalize(q, dim=-1) * q.shape[-1] ** -0.5, F.normalize(k, dim=-1)


def tl_output(q, k, v, g, beta):
    """(1, T, heads, dim): TransformerLens' effective attention M (1, heads, T, T) times v."""
    from transformer_lens.model_bridge.generalized_components.gated_delta_net import GatedDeltaNetBridge

    p = "blocks.0.linear_attn"
    cache = {f"{p}.hook_q": q, f"{p}.hook_k": k, f"{p}.hook_beta": beta, f"{p}.hook_log_decay": g}
    # The method reads only the cache (no bridge state), so it runs on the same tensors unbound.
    M = GatedDeltaNetBridge.compute_effective_attention(None, cache, 0)
    return (M @ v.transpose(1, 2)).transpose(1, 2)


def probe_output(q, k, v, g, beta):
    """(1, T, heads, dim): the sum of probe's per-key terms, streamed over query blocks."""
    import torch

    from probe.metrics.gdn.decompose import KeyTerms, written_values

    rep = v.shape[2] // q.shape[2]
    qn, kn = normed(q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2))
    H = lambda x: x[0].transpose(0, 1).double()                                   # (heads, T, ...)
    qh, kh = H(qn), H(kn)
    u, _ = written_values(kh, H(v), H(beta), H(g))
    recon = torch.cat([r for *_, r in KeyTerms(qh, kh, u, H(g)).blocks()], 1)       # (heads, T, dim)
    return recon.transpose(0, 1)[None].float()


def measure(method: str, T: int, heads: int, dim: int, repeat: int) -> dict:
    import torch

    torch.set_num_threads(1)
    q, k, v, g, beta = inputs(T, heads, dim)
    reference = kernel_output(q, k, v, g, beta)
    args = (*normed(q, k), v, g, beta) if method == "tl_normed" else (q, k, v, g, beta)
    fn = {"kernel": kernel_output, "tl_raw": tl_output, "tl_normed": tl_output, "probe": probe_output}[method]
    with torch.inference_mode():
        out = fn(*args)
        c = clocks(lambda: fn(*args), repeat)
    error = float((out.double() - reference.double()).norm() / reference.double().norm())
    return {"method": method, "T": T, "rel_error": error, **c}


def main() -> None:
    args = child_args()
    if args is not None:
        print(json.dumps(measure(**args)))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 2048])
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--memory-gb", type=float, default=8)
    ap.add_argument("--timeout", type=float, default=1800)
    o = ap.parse_args()
    print(f"{'T':>6} {'method':>10} {'rel. error':>11} {'cpu s':>8} {'peak MB':>8}")
    for T in o.lengths:
        for method in METHODS:
            r = run_child(__file__, dict(method=method, T=T, heads=o.heads, dim=o.dim, repeat=o.repeat),
                          o.timeout, o.memory_gb, steady_heap=True)
            if "error" in r:
                print(f"{T:>6} {method:>10} {r['error']}")
                continue
            print(f"{T:>6} {method:>10} {r['rel_error']:>11.2e} {r['seconds']:>8.3f} {r['peak_mb']:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
