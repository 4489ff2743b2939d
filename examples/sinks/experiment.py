"""Does the model need its sink? The sink-ablation experiment of docs/sinks.md, reduced to what a
CPU runs in minutes: the three tiny arms that ship with probe, then SmolLM2-135M and its grafted
arm (the shipped trained gate file), each under the same --ablate spec on the same tokens.

    python examples/sinks/experiment.py --out sinks-out tiny          # ~1 minute
    python examples/sinks/experiment.py --out sinks-out smollm2 --seq-len 2048 --sequences 4
    probe report sinks-out/runs/* --out sinks-out/report              # "What the sink does"

Every run is a probe run directory (ablations.csv, ablation_positions.csv beside the usual
tables); the console table of each is printed as it finishes, with the wall time and the load.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TINY_SPEC = "windows=16,32,64 sinks=0,1,4 key0 value0 massive=zero,mean first=remove,replace:\\n"
REAL_SPEC = "windows=64,256,1024 sinks=0,1,4 key0 value0 first=remove massive=zero,mean"
GATES = HERE.parent / "grafts" / "smollm2-headwise-identity-gates.safetensors"


def analyse(path, name: str, out: Path, spec: str, seq_len: int, sequences: int, **options) -> None:
    import probe
    from probe.api.ablation_console import ablation_lines
    from probe.data.corpus import sample_texts

    start = time.time()
    analysis = probe.analyze(path, texts=sample_texts(), seq_len=seq_len, max_sequences=sequences, ablate=spec,
                             name=name, progress=False, **options)
    analysis.save(out / "runs" / name, force=True)
    print(f"\n{name}: {sequences} x {seq_len} tokens, {time.time() - start:.0f} s, load {os.getloadavg()[0]:.2f}")
    print("\n".join(ablation_lines(analysis.ablations)), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("tiny", "smollm2"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--sequences", type=int, default=None)
    parser.add_argument("--spec", default=None)
    args = parser.parse_args(argv)
    if args.part == "tiny":              # the arms were trained on 128-token rows with a BOS first
        for arm in ("none", "headwise", "elementwise"):
            analyse(HERE.parent / "checkpoints" / arm, f"tiny-{arm}", args.out, args.spec or TINY_SPEC,
                    args.seq_len or 128, args.sequences or 64)
        return 0
    from probe.load import real_models
    from probe.train.graft import graft

    base = real_models.fetch("smollm2")
    grafted = graft(base, gate="headwise", init="identity", gate_weights=GATES, out=args.out / "grafted",
                    force=True, say=print)
    for path, name in ((base, "SmolLM2-135M"), (grafted, "SmolLM2-135M-grafted")):
        analyse(path, name, args.out, args.spec or REAL_SPEC, args.seq_len or 2048, args.sequences or 4, bos="none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
