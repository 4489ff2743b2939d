"""What a probe analysis pass costs on a real model: SmolLM2-135M (30 layers, 9 query / 3 KV
heads, vocab 49152), the GGUF file probe.load.real_models downloads, dequantised to float32.

At T = 512, 2048 and 8192 (its longest context), one thread, prints time and peak memory added of
  plain   - the model's own SDPA forward, no hooks (logits included)
  probe   - probe's full pass through Capture: gates (none here), F-Attn, M-Act at four sites,
            sparsity histograms, loss
  anatomy - with --anatomy: the same pass with sink anatomy on (probe analyze --anatomy: received
            attention per key from an extra Q.K^T pass per layer, top keys, value drains)
as ratios against `plain`. At each length a fresh, niced process (common.run_child) times the
two side by side, alternating plain / probe `--repeat` times and keeping the best of each; time
is the thread's CPU time (process_time), with wall time beside it: on a shared machine a niced
process waits for the CPU, which inflates wall time at random; two more fresh processes, one
per method, measure the peak memory each pass adds (after a warm-up pass at 64 tokens;
common.timed: the high-water mark reset after loading, which peaks higher than a pass; glibc's
heap held steady, common.STEADY_HEAP).
`--profile T` prints instead where the probe pass spends its time beyond the plain forward
(torch.profiler, self CPU time by operator, both passes).

    python benchmarks/real_overhead.py [--lengths 512 2048 8192] [--repeat 3] [--anatomy]
    python benchmarks/real_overhead.py --profile 2048
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from common import child_args, run_child, timed  # noqa: E402

METHODS = ("plain", "probe")
MODEL_TEXT = "SmolLM2-135M-Instruct Q4_1 GGUF, dequantised to float32: 30 layers, hidden 576, 9 query / 3 KV heads"


def setup(T: int):
    import torch

    import probe
    from probe.load import real_models
    from probe.data.corpus import sample_texts

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

    def probed(**anatomy):
        with probe.Capture(model, layout, **anatomy) as cap, cap.batch(ids):
            cap.observe_logits(model(input_ids=ids, use_cache=False).logits)
    vocab = model.config.get_text_config().vocab_size
    return {"plain": plain, "probe": probed, "anatomy": lambda: probed(anatomy=True, vocab_size=vocab)}


def measure(method: str, T: int, repeat: int, methods=METHODS) -> dict:
    """method "time": best seconds of each of `methods`, alternating; "plain" / "probe" /
    "anatomy": peak MB added."""
    import time

    import torch

    lm, ids = setup(T)
    fns = passes(lm, ids)
    with torch.inference_mode():
        if method != "time":
            # A warm-up pass at 64 tokens first: what a method loads once per process (probe's
            # metric modules and pandas, ~40 MB resident; the plain forward's first-call
            # buffers, ~12 MB) is not memory the pass at T adds.
            passes(lm, ids[:, :64])[method]()
            return {"method": method, "T": T, "peak_mb": timed(fns[method], 1)[1]}
        best = {f"{name}_{clock}": float("inf") for name in methods for clock in ("wall", "cpu")}
        for _ in range(repeat):
            for name in methods:
                wall, cpu = time.perf_counter(), time.process_time()
                fns[name]()
                best[f"{name}_cpu"] = min(best[f"{name}_cpu"], time.process_time() - cpu)
                best[f"{name}_wall"] = min(best[f"{name}_wall"], time.perf_counter() - wall)
    return {"method": method, "T": T, **best}


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
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--memory-gb", type=float, default=24, help="address-space cap per process")
    parser.add_argument("--profile", type=int, metavar="T", help="profile one length instead")
    parser.add_argument("--anatomy", action="store_true", help="also the pass with sink anatomy on")
    args = parser.parse_args()
    methods = (*METHODS, "anatomy") if args.anatomy else METHODS
    if args.profile:
        import os

        os.environ["OMP_NUM_THREADS"] = "1"
        profile(args.profile)
        return
    print(MODEL_TEXT)
    print("time: CPU seconds of the one thread (wall seconds, which other jobs on a shared machine inflate)")
    others = methods[1:]
    print(f"{'T':>6} {'plain s':>16}" + "".join(f" {m + ' s':>16} {'x plain':>13}" for m in others)
          + f" {'plain MB':>9}" + "".join(f" {m + ' MB':>10} {'x plain':>8}" for m in others), flush=True)
    for T in args.lengths:
        r = {m: run_child(__file__, {"method": m, "T": T, "repeat": args.repeat, "methods": methods},
                          args.timeout, args.memory_gb, steady_heap=m != "time") for m in ("time", *methods)}
        errors = [f"{m}: {x['error']}" for m, x in r.items() if "error" in x]
        if errors:
            print(f"{T:>6} did not finish: {'; '.join(errors)}", flush=True)
            continue
        t, mem = r["time"], {m: r[m]["peak_mb"] for m in methods}
        cell = {m: f"{t[m + '_cpu']:.2f} ({t[m + '_wall']:.2f})" for m in methods}
        ratio = {m: f"{t[m + '_cpu'] / t['plain_cpu']:.2f} ({t[m + '_wall'] / t['plain_wall']:.2f})" for m in others}
        print(f"{T:>6} {cell['plain']:>16}" + "".join(f" {cell[m]:>16} {ratio[m]:>13}" for m in others)
              + f" {mem['plain']:>9.0f}" + "".join(f" {mem[m]:>10.0f} {mem[m] / mem['plain']:>8.2f}" for m in others),
              flush=True)


if __name__ == "__main__":
    spec = child_args()
    if spec is not None:
        print(json.dumps(measure(spec["method"], spec["T"], spec["repeat"], tuple(spec.get("methods", METHODS)))))
    else:
        main()
