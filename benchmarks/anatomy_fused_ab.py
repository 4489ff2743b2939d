"""Sink anatomy with its column sums fused into the attention pass, against the two passes it
replaced (the flash kernel, then received_attention), inside the whole analysis.

One process, SmolLM2-135M (as benchmarks/whole_analysis.py: real text repeated up to T, one
sequence, float32, one thread), timing alternately: a plain forward, `probe.analyze` with default
options, with anatomy=True, and with anatomy=True and the fused pass switched off
(probe.metrics.anatomy.fused.fusable patched to refuse). Best CPU time of --repeat each; prints
the ratios to the plain forward and what anatomy adds beyond the default analysis either way.

    python benchmarks/anatomy_fused_ab.py [--lengths 512 2048] [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).parent)]

from whole_analysis import calls, setup, uptime  # noqa: E402


def measure(T: int, repeat: int) -> dict[str, float]:
    from probe.metrics.anatomy import fused

    lm, ids = setup(T)
    fns = calls(lm, ids)
    plans = {"plain": (fns["plain"], True), "default": (fns["analyze"], True),
             "fused": (fns["anatomy"], True), "two passes": (fns["anatomy"], False)}
    fusable = fused.fusable
    best = dict.fromkeys(plans, float("inf"))
    fns["plain"](), fns["anatomy"]()                      # what a process loads once
    try:
        for _ in range(repeat):
            for name, (fn, fuse) in plans.items():
                fused.fusable = fusable if fuse else (lambda *a: False)
                start = time.process_time()
                fn()
                best[name] = min(best[name], time.process_time() - start)
    finally:
        fused.fusable = fusable
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load: {uptime()}")
    print(f"{'T':>6} {'plain s':>8} {'default':>14} {'anatomy fused':>16} {'two passes':>16}   anatomy beyond default")
    for T in args.lengths:
        b = measure(T, args.repeat)
        x = {k: v / b["plain"] for k, v in b.items()}
        print(f"{T:>6} {b['plain']:>8.2f} {b['default']:>7.2f} {x['default']:.2f}x {b['fused']:>9.2f} "
              f"{x['fused']:.2f}x {b['two passes']:>9.2f} {x['two passes']:.2f}x   fused "
              f"{b['fused'] - b['default']:.2f} s, two passes {b['two passes'] - b['default']:.2f} s", flush=True)
    print(f"load: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
