"""What a probe analysis pass costs against a plain forward pass.

For a tiny Qwen3-style model (hidden 256, 4 layers, 8 heads) at several sequence lengths,
prints the time and the peak memory added by:
  plain   - a Hugging Face SDPA forward, no hooks
  probe   - probe's full analysis pass (gates, F-Attn, M-Act, sparsity, loss), via Capture
  eager   - Hugging Face eager attention with output_attentions=True (T x T per layer)
as ratios against `plain`. Each measurement runs in its own niced process (common.run_child)
so that peak RSS is its own; one thread, best of `--repeat` runs.

    python benchmarks/overhead.py [--lengths 512 2048 8192] [--repeat 3] [--memory-gb 16]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import build_model, child_args, run_child, timed, token_ids  # noqa: E402

METHODS = ("plain", "probe", "eager")
# The README's table was measured on the common model with one KV head per query head (no GQA).
KV_HEADS = 8


def measure(method: str, T: int, repeat: int) -> dict:
    import torch

    import probe
    from probe.load.loader import describe

    torch.set_num_threads(1)
    model = build_model(num_key_value_heads=KV_HEADS)
    ids = token_ids(T)
    layout = describe(model)

    def plain():
        return model(input_ids=ids, use_cache=False).logits

    def probed():
        with probe.Capture(model, layout) as cap, cap.batch(ids):
            cap.observe_logits(model(input_ids=ids, use_cache=False).logits)

    def eager():
        model.set_attn_implementation("eager")
        try:
            return model(input_ids=ids, use_cache=False, output_attentions=True).logits
        finally:
            model.set_attn_implementation("sdpa")

    fn = {"plain": plain, "probe": probed, "eager": eager}[method]
    with torch.inference_mode():
        seconds, peak_mb = timed(fn, repeat)
    return {"method": method, "T": T, "seconds": seconds, "peak_mb": peak_mb}


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600)
    # eager at T = 8192 adds ~11 GB of RSS; its address space is somewhat larger.
    parser.add_argument("--memory-gb", type=float, default=16, help="address-space cap per process")
    args = parser.parse_args()
    print(f"{'T':>6} {'method':>6} {'CPU s':>8} {'x plain':>8} {'peak MB':>9} {'x plain':>8}")
    for T in args.lengths:
        rows = {m: run_child(__file__, {"method": m, "T": T, "repeat": args.repeat}, args.timeout,
                             args.memory_gb)
                for m in METHODS}
        plain = rows["plain"]
        for m, r in rows.items():
            if "error" in r:
                print(f"{T:>6} {m:>6} {'did not finish: ' + r['error']:>36}")
                continue
            tr = r["seconds"] / plain["seconds"] if "seconds" in plain else float("nan")
            mr = r["peak_mb"] / plain["peak_mb"] if plain.get("peak_mb") else float("nan")
            print(f"{T:>6} {m:>6} {r['seconds']:>8.3f} {tr:>8.2f} {r['peak_mb']:>9.0f} {mr:>8.2f}")


if __name__ == "__main__":
    spec = child_args()
    if spec is not None:
        print(json.dumps(measure(spec["method"], spec["T"], spec["repeat"])))
    else:
        main()
