"""What the sink-anatomy pass costs next to the attention call itself, per layer.

Random tensors shaped like one SmolLM2-135M layer (9 query heads, 3 KV heads, head_dim 64,
batch 1), float32, one thread, each measurement in its own process (best time of --repeat;
peak RSS the calls add over what the process held before them: q, k, v and, for received and
sinks, the kernel's out and lse, computed in the kernel's process and loaded from a file):
  sdpa      torch's scaled_dot_product_attention (causal), the plain forward's call;
  kernel    the CPU flash kernel with log-sum-exp that the `probe` back-end calls instead;
  received  probe.metrics.anatomy.received.received_attention from that lse: one extra Q.K^T pass over query
            blocks, never T x T (what every layer costs under anatomy);
  sinks     received, then the top key per head (top_keys), P on it for every query
            (key_probability) and the value drains (value_drains): the extras are O(T D);
  fused     probe.metrics.anatomy.fused.attention_with_received: the attention output, its lse
            and the column sums in one pass, what the `probe` back-end runs instead of kernel +
            received on plain causal float32 CPU attention (no window).
--window W adds the same on a sliding window of W keys (banded blocks; SDPA then gets the
(1, 1, T, T) mask transformers builds for it). Without a window, SDPA and received are also
timed alternately in one process, the steadier ratio on a shared machine.

    python benchmarks/anatomy_kernel.py [--lengths 2048 8192] [--repeat 3] [--window 512]

Prints one row per (T, method) and the ratios received / sdpa (time and peak memory).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).parent)]

from common import child_args, run_child, timed  # noqa: E402

SHAPE = dict(heads=9, kv_heads=3, head_dim=64)
METHODS = ("sdpa", "kernel", "received", "sinks", "fused")


def child(args: dict) -> dict:
    import torch

    from probe.capture.attention import SlidingWindow
    from probe.metrics.anatomy.received import key_probability, received_attention, top_keys, value_drains

    torch.set_num_threads(1)
    T, method, window = args["T"], args["method"], args.get("window")
    H, Hkv, D = SHAPE["heads"], SHAPE["kv_heads"], SHAPE["head_dim"]
    scale = D ** -0.5
    mask = SlidingWindow(window) if window else None

    def make(t):
        g = torch.Generator().manual_seed(0)
        return (torch.randn(1, H, t, D, generator=g), torch.randn(1, Hkv, t, D, generator=g),
                torch.randn(1, Hkv, t, D, generator=g))

    def kernel(q, k, v):
        from probe.capture.attention import attention_with_lse
        return attention_with_lse(q, k, v, mask, scale)

    def sdpa(q, k, v):
        if window:      # what transformers hands SDPA for a sliding-window layer: a (1, 1, T, T) mask
            i = torch.arange(q.shape[2])
            band = ((i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window))[None, None]
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=band, scale=scale,
                                                                    enable_gqa=True)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                                                enable_gqa=True)

    def run(q, k, v, out, lse):
        if method == "fused":
            from probe.metrics.anatomy.fused import attention_with_received
            return attention_with_received(q, k, v, scale, block=args.get("block"))
        if method == "sdpa":
            return sdpa(q, k, v)
        if method == "kernel":
            return kernel(q, k, v)
        r = received_attention(q, k, lse, mask, scale, block=args.get("block"))
        if method == "sinks":
            keys = top_keys(r, 1, min_queries=16)
            p = key_probability(q, k, lse, keys, mask, scale)
            value_drains(v, out, p, keys)
        return r

    with torch.no_grad():
        small = make(64)
        run(*small, *kernel(*small))                 # warm-up: one-off allocations not counted
        q, k, v = make(T)
        if method == "interleaved":
            return {**args, **interleaved(q, k, v, args["repeat"])}
        out = lse = None
        if method in ("received", "sinks"):
            out, lse = torch.load(args["saved"])
        seconds, peak = timed(lambda: run(q, k, v, out, lse), args["repeat"])
        if method == "kernel":      # saved for the next children: computing it there would raise
            torch.save(kernel(q, k, v), args["saved"])   # their RSS peak above what they measure
    return {**args, "seconds": seconds, "peak_mb": peak}


def interleaved(q, k, v, repeat: int) -> dict:
    """SDPA and the received pass timed alternately in one process (best of each): on a shared
    machine the load drifts between processes, and this ratio is the steadier one."""
    import time

    import torch

    from probe.capture.attention import attention_with_lse
    from probe.metrics.anatomy.received import received_attention

    scale = q.shape[-1] ** -0.5
    _, lse = attention_with_lse(q, k, v, None, scale)
    best = {"sdpa": float("inf"), "received": float("inf")}
    calls = {"sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(
                 q, k, v, is_causal=True, scale=scale, enable_gqa=True),
             "received": lambda: received_attention(q, k, lse, None, scale)}
    for _ in range(repeat):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - start)
    return {"sdpa_s": best["sdpa"], "received_s": best["received"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--window", type=int, default=None, help="also time a sliding window of W keys")
    parser.add_argument("--block", type=int, default=None, help="queries per block (default: bounded logits)")
    args = parser.parse_args()
    print(f"one layer shaped like SmolLM2-135M: {SHAPE['heads']} query / {SHAPE['kv_heads']} KV heads, "
          f"head_dim {SHAPE['head_dim']}, batch 1, float32, one thread; best of {args.repeat}")
    print(f"{'T':>6} {'window':>6} {'method':>9} {'seconds':>9} {'peak MB':>9}")
    saved = Path(tempfile.mkdtemp(prefix="anatomy-kernel-")) / "out_lse.pt"
    for window in (None, args.window) if args.window else (None,):
        for T in args.lengths:
            rows = {}
            for method in METHODS:
                if method == "fused" and window:          # the fused pass is plain causal attention only
                    continue
                spec = {"method": method, "T": T, "repeat": args.repeat, "window": window,
                        "block": args.block, "saved": str(saved)}
                rows[method] = run_child(__file__, spec, timeout=1800, memory_gb=16)
                r = rows[method]
                if "error" in r:
                    print(f"{T:>6} {window or '-':>6} {method:>9} {r['error']}")
                    continue
                print(f"{T:>6} {window or '-':>6} {method:>9} {r['seconds']:>9.3f} {r['peak_mb']:>9.1f}")
            if all("error" not in r for r in rows.values()):
                base = rows["sdpa"]
                for m in ("kernel", "received", "sinks", "fused"):
                    if m not in rows:
                        continue
                    t = rows[m]["seconds"] / base["seconds"]
                    mem = rows[m]["peak_mb"] / base["peak_mb"] if base["peak_mb"] > 0 else float("nan")
                    print(f"{'':>6} {'':>6} {m + '/sdpa':>16}  time {t:.2f}x  peak memory {mem:.2f}x")
                if "fused" in rows:     # what anatomy adds to a layer's attention, before and after fusing
                    two = rows["kernel"]["seconds"] + rows["received"]["seconds"]
                    print(f"{'':>6} {'':>6} {'fused/(kernel+received)':>16}  time "
                          f"{rows['fused']['seconds'] / two:.2f}x ({rows['fused']['seconds']:.3f} s / {two:.3f} s)")
            if window is None:
                r = run_child(__file__, {"method": "interleaved", "T": T, "repeat": 2 * args.repeat},
                              timeout=1800, memory_gb=16)
                if "error" in r:
                    print(f"{T:>6} {'-':>6} interleaved: {r['error']}")
                else:
                    print(f"{'':>6} {'':>6} {'received/sdpa':>16}  time {r['received_s'] / r['sdpa_s']:.2f}x "
                          f"timed alternately in one process ({r['received_s']:.3f} s / {r['sdpa_s']:.3f} s)")
    saved.unlink(missing_ok=True)
    saved.parent.rmdir()
    return 0


if __name__ == "__main__":
    spec = child_args()
    if spec is not None:
        print(json.dumps(child(spec)))
        sys.exit(0)
    sys.exit(main())
