"""Does the model need its sink? The sink-ablation experiment of docs/sinks.md, reduced to what a
CPU runs in minutes: the three tiny arms that ship with probe, then SmolLM2-135M and its grafted
arm (the shipped trained gate file), each under the same --ablate spec on the same tokens.

    python examples/sinks/experiment.py --out sinks-out tiny          # ~1 minute
    python examples/sinks/experiment.py --out sinks-out smollm2 --seq-len 2048 --sequences 16 --anatomy
    python examples/sinks/experiment.py --out sinks-out smollm2 --models base \
        --also SmolLM2-135M-gates-random=ARM_FOLDER       # any other checkpoint on the same tokens
    probe report sinks-out/runs/* --out sinks-out/report              # "What the sink does"

Every run is a probe run directory (ablations.csv, ablation_positions.csv beside the usual
tables); the console table of each is printed as it finishes, with the wall time and the load.
A run directory that exists already is kept (an interrupted experiment goes on where it stopped);
--force measures it again. Past 2,048 tokens a run's name ends in -T<seq-len>.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TINY_SPEC = "windows=16,32,64 sinks=0,1,4 key0 value0 massive=zero,mean first=remove,replace:\\n"
REAL_SPEC = "windows=64,256,1024 sinks=0,1,4 key0 value0 first=remove,replace:\\n massive=zero,mean"
GATES = HERE.parent / "grafts" / "smollm2-headwise-identity-gates.safetensors"


def analyse(path, name: str, out: Path, spec: str, seq_len: int, sequences: int, force: bool = False,
            **options) -> None:
    import probe
    from probe.api.ablation_console import ablation_lines
    from probe.data.corpus import sample_texts

    if seq_len > 2048:
        name = f"{name}-T{seq_len}"
    if (out / "runs" / name).exists() and not force:
        print(f"{name}: {out / 'runs' / name} exists, kept (--force measures it again)", flush=True)
        return
    start = time.time()
    analysis = probe.analyze(path, texts=sample_texts(), seq_len=seq_len, max_sequences=sequences, ablate=spec,
                             name=name, progress=False, **options)
    analysis.save(out / "runs" / name, force=True)
    print(f"\n{name}: {sequences} x {seq_len} tokens, {time.time() - start:.0f} s, load {os.getloadavg()[0]:.2f}")
    print("\n".join(ablation_lines(analysis.ablations)), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("part", choices=("tiny", "smollm2"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--sequences", type=int, default=None)
    parser.add_argument("--spec", default=None)
    parser.add_argument("--models", default="base,grafted",
                        help="smollm2: base, grafted (the shipped trained gates) or both, comma-separated")
    parser.add_argument("--also", action="append", default=[], metavar="NAME=CHECKPOINT",
                        help="smollm2: one more checkpoint measured on the same tokens (a trained graft arm)")
    parser.add_argument("--force", action="store_true", help="measure again runs whose directory exists")
    parser.add_argument("--anatomy", action="store_true",
                        help="also measure where the attention on key 0 goes under each ablation (top receiving keys)")
    args = parser.parse_args(argv)
    if args.part == "tiny":              # the arms were trained on 128-token rows with a BOS first
        for arm in ("none", "headwise", "elementwise"):
            analyse(HERE.parent / "checkpoints" / arm, f"tiny-{arm}", args.out, args.spec or TINY_SPEC,
                    args.seq_len or 128, args.sequences or 64, force=args.force, anatomy=args.anatomy)
        return 0
    from probe.load import real_models
    from probe.train.graft import graft

    models = set(args.models.split(","))
    base = real_models.fetch("smollm2")
    todo = [(base, "SmolLM2-135M")] if "base" in models else []
    if "grafted" in models:
        todo.append((graft(base, gate="headwise", init="identity", gate_weights=GATES, out=args.out / "grafted",
                           force=True, say=print), "SmolLM2-135M-grafted"))
    todo += [(Path(path), name) for name, _, path in (also.partition("=") for also in args.also)]
    for path, name in todo:
        analyse(path, name, args.out, args.spec or REAL_SPEC, args.seq_len or 2048, args.sequences or 4,
                force=args.force, bos="none", anatomy=args.anatomy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
