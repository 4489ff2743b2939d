"""Step time of continued training on a grafted SmolLM2: gates only against all weights.

    python benchmarks/graft_step.py [--grafted DIR] [--threads 2] [--batch 4] [--seq-len 256] [--steps 3]

One training step as probe train takes it (forward with labels, backward, gradient clipping,
AdamW step) on random tokens, float32 on the CPU; the first step is a warm-up and not timed.
Without --grafted, SmolLM2-135M is fetched (probe.load.real_models) and grafted with an identity
headwise gate into /tmp. Prints the median seconds a step for each mode and their ratio.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # this checkout's probe


def step_times(model, ids: torch.Tensor, steps: int) -> list[float]:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    times = []
    for i in range(steps + 1):
        t = time.perf_counter()
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i:                                   # step 0 warms up allocators and kernels
            times.append(time.perf_counter() - t)
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--grafted", help="a probe graft folder (default: graft SmolLM2 into /tmp)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=3, help="timed steps per mode (after one warm-up)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from probe.train.continued import freeze
    from probe.load.loader import load

    folder = args.grafted
    if folder is None:
        from probe.train.graft import graft
        from probe.load.real_models import fetch

        folder = Path(tempfile.mkdtemp(prefix="graft-bench-")) / "smollm2-headwise"
        graft(fetch("smollm2", progress=print), gate="headwise", init="identity", out=folder)
    model = load(folder).model.train()
    model.set_attn_implementation("sdpa")
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq_len),
                        generator=torch.Generator().manual_seed(0))
    results = {}
    for mode in ("gates", "all"):
        freeze(model, mode)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        times = step_times(model, ids, args.steps)
        results[mode] = statistics.median(times)
        print(f"{mode:>5}: {trainable:>11,} trained parameters, median {results[mode]:.2f} s a step "
              f"(steps {', '.join(f'{t:.2f}' for t in times)}; batch {args.batch} x {args.seq_len}, "
              f"{args.threads} threads)")
    print(f"all / gates: {results['all'] / results['gates']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
