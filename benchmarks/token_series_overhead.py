"""What capturing the per-token series (--token-series, probe/metrics/token_series/) adds to the
analysis pass on a real model: SmolLM2-135M (benchmarks/real_overhead.py's setup: the GGUF file
dequantised to float32, real text repeated up to T), one thread.

Side by side in one fresh, niced process, alternating `--repeat` times and keeping the best of
each: probe's full pass through Capture with token_series=0 (none) and with the series of every
token of the sequence (token_series=T: the default 4096 covers T = 2048 whole), and with
--anatomy both ways too when asked (the series then add the attention each key receives, read
from the received attention sink anatomy computes anyway). Time is the thread's CPU time
(process_time), wall time beside it.

--hybrid tiny|wide measures a hybrid instead (benchmarks/gdn.py's Qwen3.5-shaped model: three
Gated DeltaNet layers, then one gated softmax layer; `wide` at Qwen3.5's width, one row of random
tokens): both passes with --gdn, the series then adding the GDN layers' beta, decay and SiLU(z)
per value head (and with --anatomy the key-0 share, read from the shares the GDN metric's
per-key split computes anyway) to the softmax layers' series.

    python benchmarks/token_series_overhead.py [--lengths 2048] [--repeat 3] [--anatomy] [--hybrid wide]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from common import child_args, run_child  # noqa: E402
from real_overhead import MODEL_TEXT, setup  # noqa: E402


def measure(T: int, repeat: int, anatomy: bool, hybrid: str | None = None) -> dict:
    import time

    import torch

    import probe

    if hybrid:
        import gdn

        torch.set_num_threads(1)
        lm, ids = gdn.hybrid(T, hybrid)
    else:
        lm, ids = setup(T)
    model, layout = lm.model, lm.layout
    vocab = model.config.get_text_config().vocab_size
    options = {"gdn": True} if hybrid else {}

    def probed(series: int, **more):
        with probe.Capture(model, layout, token_series=series, **options, **more) as cap, cap.batch(ids):
            cap.observe_logits(model(input_ids=ids, use_cache=False).logits)
        if series:
            captured = cap.metrics["token_series"].captured()
            assert captured["token_ids"].shape == (T,)
            assert not hybrid or {"gdn_beta_heads", "gdn_decay_heads", "gdn_gate_heads"} <= set(captured["series"])
            assert not (hybrid and more) or "gdn_key0_heads" in captured["series"]

    fns = {"without": lambda: probed(0), "with": lambda: probed(T)}
    if anatomy:
        fns.update({"anatomy_without": lambda: probed(0, anatomy=True, vocab_size=vocab),
                    "anatomy_with": lambda: probed(T, anatomy=True, vocab_size=vocab)})
    best = {f"{name}_{clock}": float("inf") for name in fns for clock in ("wall", "cpu")}
    with torch.inference_mode():
        for name, fn in fns.items():            # a warm-up of each
            fn()
        for _ in range(repeat):
            for name, fn in fns.items():
                wall, cpu = time.perf_counter(), time.process_time()
                fn()
                best[f"{name}_cpu"] = min(best[f"{name}_cpu"], time.process_time() - cpu)
                best[f"{name}_wall"] = min(best[f"{name}_wall"], time.perf_counter() - wall)
    return {"T": T, **best}


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--anatomy", action="store_true")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--memory-gb", type=float, default=24)
    parser.add_argument("--hybrid", choices=("tiny", "wide"), default=None,
                        help="a Qwen3.5-shaped hybrid with --gdn (benchmarks/gdn.py) instead of SmolLM2")
    args = parser.parse_args()
    print(f"Qwen3.5-shaped hybrid ({args.hybrid} width, benchmarks/gdn.py), --gdn on both passes, float32, "
          "one thread" if args.hybrid else MODEL_TEXT)
    print("CPU seconds of the one thread (wall seconds); best of", args.repeat)
    for T in args.lengths:
        r = run_child(__file__, {"T": T, "repeat": args.repeat, "anatomy": args.anatomy, "hybrid": args.hybrid},
                      args.timeout, args.memory_gb)
        if "error" in r:
            print(f"T = {T}: did not finish: {r['error']}", flush=True)
            continue
        pairs = [("without", "with")] + ([("anatomy_without", "anatomy_with")] if args.anatomy else [])
        for off, on in pairs:
            print(f"T = {T} {off.replace('without', '').strip('_') or 'plain pass'}: without series "
                  f"{r[off + '_cpu']:.2f} s ({r[off + '_wall']:.2f}), with {r[on + '_cpu']:.2f} s "
                  f"({r[on + '_wall']:.2f}): x {r[on + '_cpu'] / r[off + '_cpu']:.3f} "
                  f"({r[on + '_wall'] / r[off + '_wall']:.3f})", flush=True)


if __name__ == "__main__":
    spec = child_args()
    if spec is not None:
        print(json.dumps(measure(spec["T"], spec["repeat"], spec["anatomy"], spec.get("hybrid"))))
    else:
        main()
