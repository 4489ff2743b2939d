"""What a probe analysis pass costs on a real model: SmolLM2-135M (30 layers, 9 query / 3 KV
heads, vocab 49152), the GGUF file probe.real_models downloads, dequantised to float32.

At T = 512, 2048 and 8192 (its longest context), one thread, prints time and peak memory added of
  plain   - the model's own SDPA forward, no hooks (logits included)
  probe   - probe's full pass through Capture: gates (none here), F-Attn, M-Act at four sites,
            sparsity histograms, loss
as ratios against `plain`. Each method at each length runs in its own fresh, niced process
(common.run_child), the two side by side, best of `--repeat`.
`--profile T` prints instead where the probe pass spends its time beyond the plain forward
(torch.profiler, self CPU time by operator, both passes).

    python benchmarks/real_overhead.py [--lengths 512 2048 8192] [--repeat 3]
    python benchmarks/real_overhead.py --profile 2048
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from common import child_args, ratio_table, timed  # noqa: E402

METHODS = ("plain", "probe")
MODEL_TEXT = "SmolLM2-135M-Instruct Q4_1 GGUF, dequantised to float32: 30 layers, hidden 576, 9 query / 3 KV heads"


def setup(T: int):
    import torch

    import probe
    from probe import real_models
    from probe.corpus import sample_texts

    torch.set_num_threads(1)
    lm = probe.load(real_models.fetch("smollm2"))
    text = "\n\n".join(sample_texts())
    ids = lm.tokenizer(text, add_special_tokens=False).input_ids
    ids = (ids * (T // len(ids) + 1))[:T]                       # real text, repeated up to T
    return lm, torch.tensor([ids])


def passes(lm, ids):
    import probe

    model, layout = lm.model, lm.layout

    def plain():
        return model(input_ids=ids, use_cache=False).logits

    def probed():
        with probe.Capture(model, layout) as cap, cap.batch(ids):
            cap.observe_logits(model(input_ids=ids, use_cache=False).logits)
    return {"plain": plain, "probe": probed}


def measure(method: str, T: int, repeat: int) -> dict:
    import torch

    lm, ids = setup(T)
    fn = passes(lm, ids)[method]
    with torch.inference_mode():
        seconds, peak_mb = timed(fn, repeat)
    return {"method": method, "T": T, "seconds": seconds, "peak_mb": peak_mb}


def profile(T: int, rows: int = 25) -> None:
    """Self CPU time per operator, probe pass and plain pass, after one warm-up of each."""
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile

    lm, ids = setup(T)
    fns = passes(lm, ids)
    with torch.inference_mode():
        for name in ("plain", "probe"):
            fns[name]()
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                fns[name]()
            print(f"\n== {name} pass, T = {T}, one thread ==")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--memory-gb", type=float, default=24, help="address-space cap per process")
    parser.add_argument("--profile", type=int, metavar="T", help="profile one length instead")
    args = parser.parse_args()
    if args.profile:
        import os

        os.environ["OMP_NUM_THREADS"] = "1"
        profile(args.profile)
        return
    print(MODEL_TEXT)
    ratio_table(__file__, METHODS, args.lengths, repeat=args.repeat, timeout=args.timeout,
                memory_gb=args.memory_gb)


if __name__ == "__main__":
    spec = child_args()
    if spec is not None:
        print(json.dumps(measure(spec["method"], spec["T"], spec["repeat"])))
    else:
        main()
