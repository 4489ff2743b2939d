"""Where probe.analyze's compiled CPU kernels start to pay (probe/metrics/kernels.py MIN_VALUES).

Two costs side by side:
- what the kernels save per analysis, on SmolLM2-135M in one warm process (whole_analysis.setup:
  one sequence of T tokens, one torch thread): the plain forward, the analysis with the kernels
  and on the torch path (kernels.MIN_VALUES set to 0, then out of reach), alternating, best of
  --repeat, CPU time; each analysis's activation values (T x hidden size x layers) beside them;
- what a new process pays to load them: `import numba` and the first call of each cached kernel
  that a default analysis uses, in a fresh process (wall time; run any analysis of a real model
  once first, so that the kernels are compiled and cached and only their load is timed).

    python benchmarks/kernel_choice.py [--lengths 16 64 128 512] [--repeat 5]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from whole_analysis import ROOT, calls, setup, uptime  # noqa: E402

# numba's import and the first call of each kernel a default analysis's events use (loaded from
# the cache), timed in a new process after probe's own imports.
LOAD = """
import time
import torch
from probe.metrics import kernels
from probe.metrics.bins import BINS, NONFINITE, inside_bins
from probe.metrics.reducers import cut_bits
x, start = torch.rand(64, 4, 8), time.perf_counter()
kernels.bin_counts_below(x, [x.numel()], inside_bins((cut_bits(0.01),)), BINS)
span = kernels.scan_rows(x.view(64, 32), None, 4, BINS)
kernels.float64_sum(x)
kernels.vector_norms(x)
kernels.occupied(kernels.bin_counts(x, [x.numel()], BINS).numpy()[0], 1, NONFINITE)
kernels.signed_peak(x.view(64, 32), torch.from_numpy(span[4].copy()))
print(time.perf_counter() - start)
"""


def saving(T: int, repeat: int) -> dict:
    """CPU seconds of the plain forward, the kernels' analysis and the torch path's, best of repeat."""
    from probe.metrics import kernels

    lm, ids = setup(T)
    fns = calls(lm, ids)
    analyze = fns["analyze"]

    def on_path(least: int):
        def run():                  # probe.analyze's choice, with kernels.MIN_VALUES = least
            kept, kernels.MIN_VALUES = kernels.MIN_VALUES, least
            try:
                return analyze()
            finally:
                kernels.MIN_VALUES = kept
        return run
    methods = {"plain": fns["plain"], "kernels": on_path(0), "torch path": on_path(1 << 62)}
    for f in methods.values():
        f()
    best = dict.fromkeys(methods, float("inf"))
    for _ in range(repeat):
        for name, f in methods.items():
            start = time.process_time()
            f()
            best[name] = min(best[name], time.process_time() - start)
    config = lm.model.config
    return {**best, "values": T * config.hidden_size * config.num_hidden_layers}


def load_seconds() -> float:
    """Wall seconds of numba's import and each kernel's first call (LOAD), in a new process."""
    done = subprocess.run([sys.executable, "-c", LOAD], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 128, 512])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load: {uptime()}")
    print("SmolLM2-135M, one sequence, CPU s, best of", args.repeat)
    print(f"{'T':>6} {'values':>10} {'plain':>8} {'kernels':>8} {'torch path':>10} {'saved':>8}")
    for T in args.lengths:
        r = saving(T, args.repeat)
        print(f"{T:>6} {r['values']:>10,} {r['plain']:>8.3f} {r['kernels']:>8.3f} {r['torch path']:>10.3f} "
              f"{r['torch path'] - r['kernels']:>8.3f}", flush=True)
    print(f"numba's load in a new process (its import, each kernel's first call): {load_seconds():.2f} s wall")
    print(f"load: {uptime()}")


if __name__ == "__main__":
    main()
