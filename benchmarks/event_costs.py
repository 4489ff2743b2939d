"""Where the metrics' time on the events goes: each subscriber of each event (probe/capture/bus.py
Pass.on), timed inside one `probe.analyze` of SmolLM2-135M at T tokens, after two warm analyses.

    python benchmarks/event_costs.py [--T 512] [--analyses 3]

Prints, per (event, metric method), its total wall time over the last analysis, its calls and
the time per call, largest first. The same metric on tensors of the same shape costs about twice
as much at the events that follow a large matmul (hook_attn_out after o_proj, hook_mlp_out after
the MLP) as at those that follow an add (hook_resid_mid, hook_resid_post): the interpreter's
caches, not its instruction count (docs/benchmarks.md, "Stop 60"). Wall time with one torch
thread: run it alone.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, default=512, help="tokens of the one sequence analysed")
    parser.add_argument("--analyses", type=int, default=3, help="analyses run; the last is reported")
    args = parser.parse_args()
    warnings.simplefilter("ignore")                 # the one-sequence interval warning, each call

    import probe.capture.bus as bus
    from whole_analysis import calls, setup

    spent: dict[str, list] = collections.defaultdict(lambda: [0.0, 0])
    subscribe = bus.Pass.on

    def on(self, event, fn):
        label = f"{event:22s} {getattr(fn, '__qualname__', repr(fn))}"

        def timed(*a, **k):
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                cell = spent[label]
                cell[0] += time.perf_counter() - start
                cell[1] += 1
        return subscribe(self, event, timed)

    bus.Pass.on = on
    lm, ids = setup(args.T)
    analyze = calls(lm, ids)["analyze"]
    for _ in range(max(1, args.analyses)):
        spent.clear()
        analyze()
    total = sum(seconds for seconds, _ in spent.values())
    print(f"SmolLM2-135M, T = {args.T}, the last of {args.analyses} analyses: {total * 1e3:.1f} ms on the events")
    for label, (seconds, n) in sorted(spent.items(), key=lambda kv: -kv[1][0]):
        print(f"  {label:72s} {seconds * 1e3:7.1f} ms  x{n:<4d} {seconds / n * 1e6:7.0f} us per call")


if __name__ == "__main__":
    main()
