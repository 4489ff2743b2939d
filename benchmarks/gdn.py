"""What measuring Gated DeltaNet layers (--gdn) costs, and that its memory grows linearly in T.

A tiny Qwen3.5 hybrid (tests/tiny.py's `qwen3_5` kind: hidden 64, layers 0-2 Gated DeltaNet with
4 value heads over 2 key heads of 16 dims, layer 3 gated softmax), one sequence of T random
tokens, float32, one thread, each measurement in its own niced process (common.run_child):

  plain     the model's forward, no hooks
  probe     probe's default pass (Capture: gates, F-Attn, M-Act, sparsity, ...)
  gdn       the same pass with --gdn: the GDN layers' per-token statistics (SiLU(z), beta, decay,
            sparsity, head norms)
  gdn_keys  --gdn --anatomy: also the per-key terms of every GDN layer (and the softmax anatomy)
  analyze   what a user runs: the whole public probe.analyze(lm, ids, seq_len=T, bos="none",
            batch_size=1) with every default (tables, summary, intervals at their default
            resamples, per-token series), the pass above plus everything around it
  analyze_gdn  the same with gdn=True (`probe analyze --gdn`)

CPU seconds (best of --repeat), the ratio to a plain forward timed in the same process, alternating
with it (best of --repeat each), and the peak RSS added, beside a T x T float32 matrix's size.

--width wide keeps the layer pattern and the small vocabulary but gives every layer a Qwen3.5-sized
width (hidden 1024, 16 value and 16 key heads of 128 dims in the GDN layers, 8 query heads of 256
dims in the softmax one): there the forward's matrix products, not the hooks' fixed costs, set
the time, as in a real hybrid.

    python benchmarks/gdn.py [--lengths 2048 16384] [--repeat 1] [--memory-gb 8] [--width tiny|wide]
    python benchmarks/gdn.py --memory-only --lengths 4096 16384     # peak memory alone (no timing)
    python benchmarks/gdn.py --memory-only --lengths 16384 --methods gdn_keys --timeout 3600
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import child_args, clocks, run_child  # noqa: E402

METHODS = ("plain", "probe", "gdn", "gdn_keys", "analyze", "analyze_gdn")
WIDTHS = {
    "tiny": {},
    "wide": dict(hidden_size=1024, intermediate_size=3072, num_attention_heads=8, num_key_value_heads=2,
                 head_dim=256, linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128,
                 linear_value_head_dim=128,
                 # sum(mrope_section) = head_dim * partial_rotary_factor / 2, as Qwen3.5's own
                 rope_parameters=dict(rope_type="default", rope_theta=1e4, partial_rotary_factor=0.25,
                                      mrope_section=[11, 11, 10])),
}


def hybrid(T: int, width: str = "tiny"):
    """(the loaded hybrid of this width, one row of T random tokens), float32."""
    import torch

    sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
    import tiny

    import probe

    path = tiny.make_checkpoint("qwen3_5", Path(tempfile.mkdtemp()) / "m", tokenizer=False,
                                max_position_embeddings=max(2048, T), **WIDTHS[width])
    return probe.load(path), torch.randint(3, 200, (1, T), generator=torch.Generator().manual_seed(0))


def measure(method: str, T: int, repeat: int, width: str = "tiny", part: str = "time") -> dict:
    """part "memory": the peak RSS the pass adds (run under common.STEADY_HEAP, so that the peak
    is the peak of live memory); "time": CPU seconds and the ratio to a plain forward, under the
    allocator's defaults, as a user runs it (the steady heap maps and unmaps every large
    temporary, which costs system time a user does not pay)."""
    import torch

    import probe

    torch.set_num_threads(1)
    lm, ids = hybrid(T, width)

    def run(what: str = method):
        with torch.inference_mode():
            if what == "plain":
                lm.model(input_ids=ids, use_cache=False)
                return
            if what.startswith("analyze"):
                probe.analyze(lm, ids, seq_len=ids.shape[1], bos="none", batch_size=1, progress=False,
                              gdn=what == "analyze_gdn")
                return
            cap = probe.Capture(lm.model, lm.layout, gdn=what.startswith("gdn"), anatomy=what == "gdn_keys",
                                vocab_size=lm.model.config.vocab_size)
            with cap, cap.batch(ids):
                lm.model(input_ids=ids, use_cache=False)
    run()                                                          # warm-up (the kernel's one warning)
    if part == "memory":
        return {"method": method, "T": T, "peak_mb": clocks(run, 1)["peak_mb"], "tt_float32_mb": T * T * 4 / 2 ** 20}
    c = clocks(run, repeat)
    # The ratio to a plain forward is timed in this same process, alternating with it: processes
    # started minutes apart on a shared machine see different loads, one process sees the same.
    cpu = lambda what: (lambda t0: (run(what), time.process_time() - t0)[1])(time.process_time())
    pairs = [(cpu("plain"), cpu(method)) for _ in range(repeat)]
    ratio = min(m for _, m in pairs) / min(p for p, _ in pairs)
    return {"method": method, "T": T, **c, "ratio": ratio, "tt_float32_mb": T * T * 4 / 2 ** 20}


def main() -> None:
    args = child_args()
    if args is not None:
        print(json.dumps(measure(**args)))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 16384])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--memory-gb", type=float, default=8)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--width", choices=sorted(WIDTHS), default="tiny")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    ap.add_argument("--memory-only", action="store_true",
                    help="only the peak memory (one process per method and length), no CPU timing")
    o = ap.parse_args()
    print(f"{'T':>6} {'method':>11} {'cpu s':>8} {'x plain':>8} {'wall s':>8} {'peak MB':>8} {'T x T f32 MB':>12}")
    for T in o.lengths:
        for method in o.methods:
            args = dict(method=method, T=T, repeat=o.repeat, width=o.width)
            r = {"seconds": math.nan, "ratio": math.nan, "wall_seconds": math.nan,
                 "tt_float32_mb": T * T * 4 / 2 ** 20} if o.memory_only else \
                run_child(__file__, dict(args, part="time"), o.timeout, o.memory_gb)
            if "error" not in r:
                r = {**r, **run_child(__file__, dict(args, part="memory"), o.timeout, o.memory_gb, steady_heap=True)}
            if "error" in r:
                print(f"{T:>6} {method:>11} {r['error']}")
                continue
            ratio = f"{r['ratio']:>8.2f}"
            print(f"{T:>6} {method:>11} {r['seconds']:>8.2f} {ratio} {r['wall_seconds']:>8.2f} {r['peak_mb']:>8.1f} "
                  f"{r['tt_float32_mb']:>12.0f}", flush=True)


if __name__ == "__main__":
    main()
