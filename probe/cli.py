"""The `probe` command line: `main(argv) -> exit status`, so tests call it directly."""
from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import warnings
from pathlib import Path

from .errors import ProbeError

EXIT_USAGE = 2


def _analysis_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help="text file, folder of text files, JSONL (text or input_ids), "
                                  ".npy/.pt token ids; default: a built-in sample of Python docs")
    p.add_argument("--seq-len", type=int, default=512, help="tokens per sequence (default 512)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-sequences", type=int, help="analyse at most this many sequences")
    p.add_argument("--bos", choices=("auto", "prepend", "none"), default="auto",
                   help="what sits at position 0: the tokenizer's default, always BOS, or never")
    p.add_argument("--per-document", action="store_true", help="one sequence per document, padded")
    p.add_argument("--max-length", type=int, metavar="N",
                   help="with --per-document: the longest sequence (default --seq-len); longer "
                        "documents are covered by sliding windows of N tokens (see --stride). "
                        "Without --per-document: the sequence length is min(--seq-len, N)")
    p.add_argument("--stride", type=int, metavar="S",
                   help="sliding windows start every S tokens (default: back to back); tokens an "
                        "earlier window counted are context only, so each token counts once")
    p.add_argument("--on-long", choices=("truncate", "slide", "error"),
                   help="documents longer than --max-length / --seq-len or the model's positions: "
                        "truncate (with a warning), slide (windows), or refuse; default slide when "
                        "--max-length or --stride is given, else truncate")
    p.add_argument("--text-field", default="text", help="JSONL field that holds the text")
    p.add_argument("--tokenizer", help="directory with tokenizer files, if the checkpoint has none")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--device-map", help="e.g. auto: shard a large model over GPUs with accelerate "
                                        "(one process; under torchrun use --device cuda)")
    p.add_argument("--gate", help="declare a gate: MODULE:LAYOUT:GRANULARITY[:ACTIVATION], or none")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="replace an existing output directory")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--token-groups", help="JSON file of extra token groups for gates_by_token_type.csv: "
                                          '{"name": ["token", 123, ...]}')
    p.add_argument("--interventions", nargs="?", const="all", metavar="LIST",
                   help="also measure the loss under gate / massive-activation interventions "
                        "(all, or a comma list of mean_gate,gate_one,gate_zero,massive_zero): "
                        "interventions.csv")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="probe", description="Mechanistic analysis of gated attention.")
    sub = parser.add_subparsers(dest="command", required=True)

    a = sub.add_parser("analyze", help="measure one checkpoint and write a run directory")
    a.add_argument("checkpoint", help="local Hugging Face checkpoint directory")
    a.add_argument("--out", help="run directory to write (default runs/<checkpoint name>)")
    a.add_argument("--name", help="the model's name in tables and reports")
    a.add_argument("--report", help="also write a report: html, pdf or html,pdf")
    a.add_argument("--resume", action="store_true",
                   help="continue an interrupted analysis from OUT.partial/ (same command otherwise)")
    a.add_argument("--save-every", type=float, default=30.0, metavar="SECONDS",
                   help="save the pass's state for --resume at most this often (default 30; 0: every batch)")
    _analysis_options(a)

    r = sub.add_parser("report", help="write an HTML/PDF report from saved run directories")
    r.add_argument("runs", nargs="+", help="run directories written by probe analyze")
    r.add_argument("--out", required=True, help="folder for report.html / report.pdf")
    r.add_argument("--format", default="html,pdf", help="html, pdf or html,pdf")
    r.add_argument("--title")
    r.add_argument("--figures", metavar="DIR",
                   help="also write every figure as its own PDF and SVG with its caption into DIR")
    r.add_argument("--force", action="store_true")

    c = sub.add_parser("compare", help="analyse several checkpoints on the same tokens, one report")
    c.add_argument("checkpoints", nargs="+", help="baseline first, then gated variants")
    c.add_argument("--out", required=True, help="folder for one run directory per model and the report")
    c.add_argument("--format", default="html,pdf", help="report formats: html, pdf or html,pdf; \"\" for none")
    c.add_argument("--title")
    c.add_argument("--figures", metavar="DIR",
                   help="also write every figure as its own PDF and SVG with its caption into DIR")
    _analysis_options(c)

    t = sub.add_parser("train", help="train a small no-gate / headwise / elementwise model to analyse")
    from .train.cli import add_arguments as add_train_arguments

    add_train_arguments(t)

    k = sub.add_parser("check", help="check that probe reads the gate the model applies (pass/fail table)")
    k.add_argument("checkpoint", help="local Hugging Face checkpoint directory")
    k.add_argument("--gate", help="declare a gate: MODULE:LAYOUT:GRANULARITY[:ACTIVATION], or none")
    k.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    k.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    k.add_argument("--seq-len", type=int, default=16, help="tokens per random test sequence (default 16)")
    k.add_argument("--batch-size", type=int, default=2)
    k.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    command_line = "probe " + " ".join(shlex.quote(a) for a in argv)
    warnings.simplefilter("ignore", FutureWarning)
    warnings.formatwarning = lambda msg, *a, **k: f"probe: warning: {msg}\n"
    try:
        return {"analyze": cmd_analyze, "report": cmd_report, "compare": cmd_compare,
                "train": cmd_train, "check": cmd_check}[args.command](args, command_line)
    except ProbeError as err:
        print(f"probe: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("probe: interrupted; nothing was written", file=sys.stderr)
        return 130
    finally:
        from .distributed import finish

        finish()


def _formats(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    formats = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = set(formats) - {"html", "pdf"}
    if unknown:
        raise ProbeError(f"unknown report format {', '.join(sorted(unknown))}; use html, pdf or html,pdf")
    return formats


def _data(args):
    if args.data:
        return args.data, None
    from .corpus import sample_texts

    return None, sample_texts()


def _run_analysis(checkpoint, args, name, command_line, partial=None):
    from .analyze import analyze

    data, texts = _data(args)
    return analyze(checkpoint, data, texts=texts, tokenizer=args.tokenizer, name=name,
                   seq_len=args.seq_len, batch_size=args.batch_size, bos=args.bos,
                   per_document=args.per_document, max_sequences=args.max_sequences,
                   dtype=args.dtype, device=args.device, device_map=args.device_map, gate=args.gate,
                   progress=not args.quiet, seed=args.seed, on_long=args.on_long,
                   text_field=args.text_field,
                   token_groups=args.token_groups, interventions=args.interventions,
                   max_length=args.max_length, stride=args.stride, partial=partial,
                   resume=getattr(args, "resume", False), command=command_line,
                   checkpoint_seconds=getattr(args, "save_every", 30.0))


def cmd_analyze(args, command_line) -> int:
    from .atomic import check_output_dir

    from .distributed import is_main

    formats = _formats(args.report)
    out = Path(args.out or Path("runs") / Path(args.checkpoint).name)
    main_rank = is_main()                      # under torchrun only rank 0 writes and prints
    from .resume import partial_dir

    partial = partial_dir(out)
    if main_rank:
        check_output_dir(out, args.force)      # refuse before spending time on the model
        if args.force and not args.resume and partial.exists():
            shutil.rmtree(partial)
    try:
        analysis = _run_analysis(args.checkpoint, args, args.name, command_line, partial=partial)
    except KeyboardInterrupt:
        saved = partial / "progress.json"
        where = (f"the batches done so far are saved in {partial}/; continue with the same command "
                 "plus --resume") if saved.exists() else "nothing was saved yet"
        print(f"probe: interrupted; {where}", file=sys.stderr)
        return 130
    if not main_rank:
        return 0
    analysis.save(out, force=args.force)
    print_summary([analysis])
    print(f"wrote {out}/")
    if formats:
        from reports import build_report

        for path in build_report([out], out, formats=formats).values():
            print(f"wrote {path}")
    return 0


def cmd_report(args, command_line) -> int:
    from reports import build_report

    formats = _formats(args.format)
    out = Path(args.out)
    for fmt in formats:
        if (out / f"report.{fmt}").exists() and not args.force:
            raise ProbeError(f"{out / f'report.{fmt}'} already exists; pass --force to replace it")
    _check_figures_dir(args.figures, args.force)
    for run in args.runs:
        if not (Path(run) / "summary.json").exists():
            raise ProbeError(f"{run} is not a probe run directory (no summary.json); "
                             "create it with probe analyze")
    for path in build_report([Path(r) for r in args.runs], out, formats=formats, title=args.title,
                             figures=args.figures).values():
        print(f"wrote {path}")
    print_claims([Path(r) for r in args.runs])
    return 0


def _check_figures_dir(figures: str | None, force: bool) -> None:
    """--figures DIR: refuse to overwrite figures of an earlier report without --force."""
    if figures is None:
        return
    target = Path(figures)
    if target.exists() and not target.is_dir():
        raise ProbeError(f"--figures {figures} is a file; give a folder")
    if not force and target.is_dir() and any(target.glob("figure-*")):
        raise ProbeError(f"{figures} already holds figures; pass --force to replace them")


def cmd_compare(args, command_line) -> int:
    from .atomic import check_output_dir

    from .distributed import is_main

    formats = _formats(args.format)
    out = Path(args.out)
    main_rank = is_main()                      # under torchrun only rank 0 writes and prints
    if main_rank:
        check_output_dir(out, args.force)
        _check_figures_dir(args.figures, args.force)
    names = unique_names(args.checkpoints)
    analyses = [_run_analysis(ckpt, args, name, command_line) for ckpt, name in zip(args.checkpoints, names)]
    if not main_rank:
        return 0
    from .atomic import atomic_directory

    with atomic_directory(out, args.force) as tmp:
        for analysis, name in zip(analyses, names):
            (tmp / name).mkdir()
            analysis.write_into(tmp / name)
    print_summary(analyses)
    if len({a.meta.get("tokens_sha256") for a in analyses}) > 1:
        print("probe: warning: the models did not see the same token ids (their tokenizers or BOS "
              "policies differ), so per-token comparisons do not apply; pass token ids (.npy / .pt) "
              "to compare on identical input", file=sys.stderr)
    print_claims(analyses)
    if formats:
        from reports import build_report

        for path in build_report([out / n for n in names], out, formats=formats, title=args.title,
                                 figures=args.figures).values():
            print(f"wrote {path}")
    elif args.figures:
        from reports import write_figures

        print(f"wrote {write_figures([out / n for n in names], args.figures)}")
    print(f"wrote {out}/")
    return 0


def cmd_check(args, command_line) -> int:
    """Exit 0 when every check passes (or there is no gate to check), 1 when one fails."""
    from .check import run_checks, summary_line
    from .load import load

    loaded = load(args.checkpoint, dtype=args.dtype, device=args.device, gate=args.gate)
    report = run_checks(loaded, seq_len=args.seq_len, batch_size=args.batch_size, seed=args.seed)
    if len(report.frame):
        print(report.to_string())
    line = summary_line(report, loaded.layout)
    if report.passed:
        print(line)
        return 0
    print(f"probe: check failed: {line}", file=sys.stderr)
    return 1


def cmd_train(args, command_line) -> int:
    from .train.cli import run

    try:
        return run(args, command_line)
    except KeyboardInterrupt:
        print(f"probe: interrupted; continue from the last checkpoint with the same command "
              f"plus --resume (it is in {args.out})", file=sys.stderr)
        return 130


def unique_names(checkpoints) -> list[str]:
    names = []
    for ckpt in checkpoints:
        base = Path(ckpt).name or "model"
        name, n = base, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


def print_summary(analyses) -> None:
    import pandas as pd

    frame = pd.concat([a.summary_frame() for a in analyses])
    with pd.option_context("display.float_format", lambda v: f"{v:.4g}", "display.width", 120):
        print(frame.to_string(na_rep="-"))


def print_claims(analyses) -> None:
    """The paper's claims checked on these models (Analysis objects or run directories;
    reports/claims.py has the rules)."""
    from reports.claims import claims_table, claims_text

    print()
    print(claims_text(claims_table(analyses)))
