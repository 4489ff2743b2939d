"""Peak memory of "k sinks + W recent" (probe's key ablation, probe/capture/key_ablation.py)
against a plain forward, on SmolLM2-135M at T = 8192 (docs/sinks.md).

    python benchmarks/sink_memory.py [--T 8192] [--window 1024] [--sinks 4]

Each measurement is its own process: load the model, clear the peak (/proc/self/clear_refs),
run one forward of the decoder (hidden states, no (T, V) logits, so that attention's memory is
not hidden under the logits'), read the peak resident set (VmHWM). plain: transformers' SDPA;
ablated: probe's back-end with the window and sinks in every layer.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def status_mb(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(what: str, T: int, window: int, sinks: int, layers: int | None) -> dict:
    import gc

    import torch

    import probe
    from probe.capture.key_ablation import ablating
    from probe.capture.hooks import using_probe_attention
    from probe.families.key_masks import KeyAblation
    from probe.load import real_models

    torch.set_num_threads(1)
    loaded = probe.load(real_models.fetch("smollm2"))
    model = loaded.model.eval()
    if layers:      # the first `layers` decoder layers: the same per-layer shapes, less CPU time
        model.model.layers = model.model.layers[:layers]
        loaded.layout.layers = loaded.layout.layers[:layers]
    ids = torch.randint(0, 49152, (1, T), generator=torch.Generator().manual_seed(0))
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:       # VmHWM := VmRSS from here on
        f.write("5")
    before = status_mb("VmRSS")
    start = time.time()
    with torch.inference_mode():
        if what == "plain":
            model.set_attn_implementation("sdpa")
            model.model(input_ids=ids, use_cache=False)
        else:
            ab = KeyAblation(window=window, sinks=sinks)
            with using_probe_attention(model), ablating({p.mixer: ab for p in loaded.layout.layers}):
                model.model(input_ids=ids, use_cache=False)
    return dict(what=what, T=T, rss_before_mb=before, peak_mb=status_mb("VmHWM"), seconds=time.time() - start)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--T", type=int, default=8192)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--sinks", type=int, default=4)
    parser.add_argument("--layers", type=int, default=None,
                        help="keep only the first N decoder layers (the peak is per layer; CPU time is not)")
    parser.add_argument("--child", default=None)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.T, args.window, args.sinks, args.layers)))
        return 0
    results = {}
    for what in ("plain", "ablated"):
        out = subprocess.run([sys.executable, __file__, "--child", what, "--T", str(args.T), "--window",
                              str(args.window), "--sinks", str(args.sinks)] + (["--layers", str(args.layers)] if args.layers else []),
                             capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
        if out.returncode:
            print(out.stderr[-2000:], file=sys.stderr)
            return 1
        results[what] = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(results[what]), flush=True)
    p, a = results["plain"], results["ablated"]
    grow = lambda r: r["peak_mb"] - r["rss_before_mb"]      # noqa: E731
    print(f"T={args.T}{f', first {args.layers} layers' if args.layers else ''} window {args.window} + {args.sinks} sinks: peak {a['peak_mb']:.0f} MB vs plain "
          f"{p['peak_mb']:.0f} MB ({a['peak_mb'] / p['peak_mb']:.2f}x); the forward's own growth "
          f"{grow(a):.0f} MB vs {grow(p):.0f} MB ({grow(a) / grow(p):.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
