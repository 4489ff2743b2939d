"""What a probe analysis pass costs against a plain forward pass.

For a tiny Qwen3-style model (hidden 256, 4 layers, 8 heads) at several sequence lengths,
prints the time and the peak memory added by:
  plain   - a Hugging Face SDPA forward, no hooks
  probe   - probe's full analysis pass (gates, F-Attn, M-Act, sparsity, loss), via Capture
  eager   - Hugging Face eager attention with output_attentions=True (T x T per layer)
as ratios against `plain`. Each measurement runs in its own process so that peak RSS is
its own; one thread, best of `--repeat` runs.

    python benchmarks/overhead.py [--lengths 512 2048 8192] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

METHODS = ("plain", "probe", "eager")


def build_model():
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=1024, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=8, head_dim=32,
                         max_position_embeddings=65536, attn_implementation="sdpa")
    return Qwen3ForCausalLM(config).eval()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(method: str, T: int, repeat: int) -> dict:
    import torch

    import probe
    from probe.load import describe

    torch.set_num_threads(1)
    model = build_model()
    ids = torch.randint(0, 1024, (1, T), generator=torch.Generator().manual_seed(0))
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
        base = peak_rss_mb()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return {"method": method, "T": T, "seconds": min(times), "peak_mb": peak_rss_mb() - base}


def run_child(method: str, T: int, repeat: int, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--child", method, str(T), "--repeat", str(repeat)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"method": method, "T": T, "error": f"over {timeout:.0f} s"}
    if out.returncode != 0:
        reason = "out of memory" if out.returncode in (-9, 137) else out.stderr.strip().splitlines()[-1:]
        return {"method": method, "T": T, "error": str(reason)}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "T"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]), args.repeat)))
        return
    print(f"{'T':>6} {'method':>6} {'time s':>8} {'x plain':>8} {'peak MB':>9} {'x plain':>8}")
    for T in args.lengths:
        rows = {m: run_child(m, T, args.repeat, args.timeout) for m in METHODS}
        plain = rows["plain"]
        for m, r in rows.items():
            if "error" in r:
                print(f"{T:>6} {m:>6} {'did not finish: ' + r['error']:>36}")
                continue
            tr = r["seconds"] / plain["seconds"] if "seconds" in plain else float("nan")
            mr = r["peak_mb"] / plain["peak_mb"] if plain.get("peak_mb") else float("nan")
            print(f"{T:>6} {m:>6} {r['seconds']:>8.3f} {tr:>8.2f} {r['peak_mb']:>9.0f} {mr:>8.2f}")


if __name__ == "__main__":
    main()
