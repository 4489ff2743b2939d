"""The third part of `make demo`: SmolLM2-135M-Instruct against its grafted, trained arm, on the same tokens.

The grafted arm is rebuilt here from the downloaded base and the trained gate weights shipped in
examples/grafts/ (headwise gates only, 30 x Linear(576, 9): 155,790 numbers; never the base's
weights), with `probe graft BASE --gate-weights FILE`. Both models are analysed on the same
Python documentation text and put side by side in one report; docs/grafting.md says how the gates
were trained and what the experiment found.
"""
from __future__ import annotations

import json
from pathlib import Path

GATES = Path(__file__).resolve().parent / "grafts" / "smollm2-headwise-identity-gates.safetensors"
SEQ_LEN, SEQUENCES = 512, 2            # as the real-model part of the demo
NAMES = ("SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct-grafted")


def run(out: Path, report, base_gguf: Path) -> int:
    """Graft, analyse both models into out/runs/, write out/report.html; `report` is the CLI."""
    import probe
    from probe.data.corpus import sample_texts
    from probe.train.graft import graft

    print(f"\n[demo] part 3: SmolLM2 with grafted, trained headwise gates ({GATES.name}) against the base")
    grafted = graft(base_gguf, gate="headwise", init="identity", gate_weights=GATES, out=out / "grafted",
                    force=True, say=lambda line: print(f"[demo] {line}"))
    trained = probe.load(grafted).config.graft["gate_weights"]
    runs = out / "runs"
    for name, path in zip(NAMES, (base_gguf, grafted)):
        print(f"[demo] analysing {name} ({SEQUENCES} x {SEQ_LEN} tokens)")
        analysis = probe.analyze(path, texts=sample_texts(), seq_len=SEQ_LEN, max_sequences=SEQUENCES,
                                 bos="none", name=name, progress=False)
        analysis.save(runs / name, force=True)
    code = report(["report", *[str(runs / n) for n in NAMES], "--out", str(out), "--format", "html", "--force",
                   "--title", "SmolLM2-135M-Instruct and the same model with grafted headwise gates, trained with the "
                   "base frozen"])
    if code == 0:
        print_findings(runs, trained)
    return code


def print_findings(runs: Path, trained: dict) -> None:
    print(f"\n[demo] base vs grafted on the same tokens (gates trained {trained.get('steps')} steps of "
          f"{trained.get('tokens_per_step')} tokens, lr {trained.get('lr')}, base frozen)")
    print(f"{'model':<31}{'loss':>7}{'F-Attn':>8}{'sink rate':>10}{'M-Act':>9}{'mean gate':>10}")
    for name in NAMES:
        s = json.loads((runs / name / "summary.json").read_text())
        gate = f"{s['mean_gate']:.3f}" if s.get("mean_gate") is not None else "-"
        print(f"{name:<31}{s['loss']:>7.3f}{s['f_attn']:>8.3f}{s['sink_rate']:>10.2f}{s['m_act']:>9.0f}{gate:>10}")
