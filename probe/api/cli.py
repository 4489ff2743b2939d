"""The `probe` command line: `main(argv) -> exit status`, so tests call it directly."""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from . import collector, console
from ..core import errors
from ..core.errors import ProbeError
from ..core.options import DEVICE, DTYPE, DTYPE_NAMES, seed_argument
from ..core.owned import FORCE_HELP
from ..load.checkpoint_path import check_exists
from .report_args import (GROUP_HELP, PAIR_HELP, groups_of, pairs_of, print_between, print_claims,
                          print_differences, print_intervals)
from .cli_names import (_run_name, compare_names, different_tokens, print_summary, unique_names,  # noqa: F401
                        warn_repeated)
from .check_cli import cmd_check
from .cli_parser import OneLineParser
from .view_cli import cmd_view

EXIT_USAGE = 2


def _analysis_options(p: argparse.ArgumentParser, *, leave_out=()) -> None:
    """--data, then one option per command-line field of probe.core.options.AnalysisOptions."""
    from ..core.options import add_cli_arguments

    p.add_argument("--data", help="text file, folder of text files, JSONL (text or input_ids), "
                                  ".npy/.pt token ids; default: a built-in sample of Python docs")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    add_cli_arguments(p, leave_out=leave_out)


TITLE_HELP = "the report's title (default: 'Gated attention report: A vs B', the runs' names)"


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = OneLineParser(prog="probe", description="Mechanistic analysis of gated attention.")
    parser.add_argument("--version", action="version", version=f"probe {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    a = sub.add_parser("analyze", help="measure one checkpoint and write a run directory")
    a.add_argument("checkpoint", help="local Hugging Face checkpoint directory, or a .gguf file")
    a.add_argument("--out", help="run directory to write (default runs/<checkpoint name>)")
    a.add_argument("--name", help="the model's name in tables and reports")
    a.add_argument("--report", "--format", dest="report", metavar="FORMATS",
                   help="also write a report: html, pdf or html,pdf (--format, as for compare and report)")
    _analysis_options(a)

    r = sub.add_parser("report", help="write an HTML/PDF report from saved run directories")
    r.add_argument("runs", nargs="+", help="run directories written by probe analyze")
    r.add_argument("--out", required=True, help="folder for report.html / report.pdf")
    r.add_argument("--format", default="html,pdf", help="html, pdf or html,pdf (default: html,pdf)")
    r.add_argument("--title", help=TITLE_HELP)
    r.add_argument("--figures", metavar="DIR",
                   help="also write every figure as its own PDF and SVG with its caption into DIR")
    r.add_argument("--force", action="store_true", help="replace report.html / report.pdf (and figures) "
                   "that an earlier probe report wrote into --out")
    r.add_argument("--pair", nargs="+", metavar="BASE:GATED", help=PAIR_HELP)
    r.add_argument("--group", nargs="+", metavar="NAME:RUN,RUN", help=GROUP_HELP)

    c = sub.add_parser("compare", help="analyse several checkpoints on the same tokens, one report")
    c.add_argument("checkpoints", nargs="+", help="baseline first, then gated variants")
    c.add_argument("--out", required=True, help="folder for one run directory per model and the report")
    c.add_argument("--format", default="html,pdf",
                   help="report formats: html, pdf or html,pdf; \"\" for none (default: html,pdf)")
    c.add_argument("--title", help=TITLE_HELP)
    c.add_argument("--name", nargs="+", metavar="NAME",
                   help="the models' names in tables, reports and run folders, one per checkpoint "
                        "(default: the folder names)")
    c.add_argument("--figures", metavar="DIR",
                   help="also write every figure as its own PDF and SVG with its caption into DIR")
    c.add_argument("--pair", nargs="+", metavar="BASE:GATED", help=PAIR_HELP)
    c.add_argument("--group", nargs="+", metavar="NAME:RUN,RUN", help=GROUP_HELP)
    # A compare of one length starts over; a --seq-len sweep saves each run and --resume continues it.
    _analysis_options(c, leave_out=("checkpoint_seconds",))
    for action in c._actions:           # the analysis options' help, said of compare
        if action.dest == "resume":
            action.help = ("continue an interrupted --seq-len sweep from OUT (its finished runs are kept); a "
                           "compare of one length starts over")

    t = sub.add_parser("train", help="train a small no-gate / headwise / elementwise model to analyse")
    from ..train.cli import add_arguments as add_train_arguments

    add_train_arguments(t)

    g = sub.add_parser("graft", help="add an attention-output gate to an ungated Llama (e.g. SmolLM2)")
    from ..train.graft import add_arguments as add_graft_arguments

    add_graft_arguments(g)

    v = sub.add_parser("view", help="the per-token viewer of one run, or two side by side, as one HTML file")
    from .view_cli import add_arguments as add_view_arguments

    add_view_arguments(v)

    k = sub.add_parser("check", help="check that probe reads the gate the model applies (pass/fail table)")
    k.add_argument("checkpoint", help="local Hugging Face checkpoint directory, or a .gguf file")
    k.add_argument("--gate", help="declare a gate: MODULE:LAYOUT:GRANULARITY[:ACTIVATION], or none")
    k.add_argument("--dtype", choices=DTYPE_NAMES, default=DTYPE)
    k.add_argument("--device", default=DEVICE, help="cpu, cuda, cuda:1, ...")
    k.add_argument("--seq-len", type=int, default=16, help="tokens per random test sequence (default 16)")
    k.add_argument("--batch-size", type=int, default=2)
    k.add_argument("--seed", type=seed_argument, default=0)
    return parser


def main(argv: list[str] | None = None, *, own_process: bool = False) -> int:
    """Run one command; `own_process`: the process ends after it (the `probe` script), so its
    garbage collector may be tuned for a short command (probe/api/collector.py)."""
    argv = sys.argv[1:] if argv is None else argv
    command_line = "probe " + " ".join(shlex.quote(a) for a in argv)
    # Everything, imports included, runs inside the try: a Ctrl-C while torch loads is one line.
    interrupt = console.watch_interrupts()
    try:
        with errors.command_line(), console.scoped(), interrupt:
            args = build_parser().parse_args(argv)
            for checkpoint in getattr(args, "checkpoints", None) or [getattr(args, "checkpoint", None)]:
                if checkpoint is not None:      # a mistyped path: one line now, not after torch imports
                    check_exists(Path(checkpoint))
            if own_process:
                with interrupt.held():          # torch's C++ import must not be interrupted midway
                    collector.import_frozen(collector.stack_of(args))
            return {"analyze": cmd_analyze, "report": cmd_report, "compare": cmd_compare,
                    "train": cmd_train, "check": cmd_check, "graft": cmd_graft,
                    "view": cmd_view}[args.command](args, command_line)
    except ProbeError as err:
        print(f"probe: error: {errors.printable(err)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("probe: interrupted; nothing was written", file=sys.stderr)
        return 130
    except BaseException as err:
        if errors.is_rust_panic(err):        # a library's Rust panic: BaseException, not Exception
            print(f"probe: error: a library failed inside its Rust code ({errors.first_line(err)}); "
                  "this is a bug in that library or in probe: please report it", file=sys.stderr)
            return 1
        if not isinstance(err, Exception) or not interrupt.seen:
            raise
        # A library turned the Ctrl-C into another error (transformers' lazy imports re-raise
        # an interrupted import as ModuleNotFoundError): it is still the user's Ctrl-C.
        print("probe: interrupted; nothing was written", file=sys.stderr)
        return 130
    finally:
        if "probe.run.distributed" in sys.modules:      # only a command that ran can have set it up
            sys.modules["probe.run.distributed"].finish()
        if own_process:
            collector.freeze_before_exit()


def run() -> None:
    """The `probe` script and `python -m probe`: one command in a process of its own."""
    sys.exit(main(own_process=True))


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
    from ..data.corpus import sample_texts

    return None, sample_texts()


def _checked_options(args):
    """(AnalysisOptions from the command line, every one checked, and the data read), so that a
    mistake is reported before any output directory or partial state is touched. A --seq-len
    list (a context sweep) is kept in args.lengths; the options carry its longest length."""
    from ..data.sequences import read_data
    from ..core.options import AnalysisOptions

    args.lengths = None
    if isinstance(args.seq_len, tuple):
        from .sweep import parse_lengths

        args.lengths = parse_lengths(args.seq_len)
        args.seq_len = max(args.lengths)
    elif getattr(args, "resume", False) and args.command == "compare":
        raise ProbeError("--resume continues a --seq-len sweep; probe compare of one length writes nothing "
                         "until every model is done and starts over")

    # The partial folder is OUT.partial/ (cmd_analyze); a stand-in here lets --resume be checked.
    options = AnalysisOptions.from_cli(args, partial="OUT.partial" if getattr(args, "resume", False) else None,
                                       command=None)
    data, texts = _data(args)
    return options, read_data(data, texts=texts, text_field=options.text_field)


def _run_analysis(checkpoint, options, data, name, command_line, partial=None):
    from .analyze import analyze

    return analyze(checkpoint, data, options=options, name=name, partial=partial, command=command_line)


def cmd_analyze(args, command_line) -> int:
    from ..core.atomic import check_output_dir, check_writable
    from ..run.distributed import is_main
    from .outputs import write_runs
    from ..core.owned import inputs_of
    from ..run.resume import claim, holds_state, partial_dir, refuse_waiting_run, release

    formats = _formats(args.report)
    options, data = _checked_options(args)
    console.raise_if_interrupted()
    out = Path(args.out or Path("runs") / _run_name(args.checkpoint))
    if args.lengths:
        return _sweeps([args.checkpoint], [args.name], options, data, args, out, formats, command_line)
    main_rank = is_main()                      # under torchrun only rank 0 writes and prints
    partial = partial_dir(out)
    if args.resume and (out / "summary.json").exists() and not partial.exists():
        print(f"probe: {out} is a finished run; there is nothing to resume (pass --force instead of "
              "--resume to run it again)", file=sys.stderr)
        return 0
    if args.resume and main_rank and not holds_state(partial):
        # A mistyped --out would otherwise start over without a word.
        print(f"probe: no saved state in {partial}/; --resume starts from the beginning",
              file=sys.stderr)
    if main_rank:
        check_output_dir(out, args.force, inputs_of(args))      # refuse before spending time on the model
        check_writable(out)
        # Held until the run is written: a second run on this --out is refused meanwhile.
        claim(partial, clear=args.force and not args.resume)
    try:
        if main_rank:
            refuse_waiting_run(partial, args.resume)        # before spending time on the model
        try:
            analysis = _run_analysis(args.checkpoint, options, data, args.name, command_line,
                                     partial=partial)
        except KeyboardInterrupt:
            saved = partial / "progress.json"
            where = (f"the batches done so far are saved in {partial}/; continue with the same command "
                     "plus --resume") if saved.exists() else "nothing was saved yet"
            print(f"probe: interrupted; {where}", file=sys.stderr)
            return 130
        if not main_rank:
            return 0
        console.raise_if_interrupted()
        reports = write_runs(analysis, out, force=args.force, formats=formats, inputs=inputs_of(args))
    finally:
        if main_rank:
            release(partial)
    print_summary([analysis])
    print_intervals([analysis])
    from .ablation_console import print_ablations

    print_ablations([analysis])
    print(f"wrote {errors.printable(out)}/")
    for path in reports.values():
        print(f"wrote {errors.printable(path)}")
    return 0


def cmd_report(args, command_line) -> int:
    from .outputs import load_run_dirs, write_report

    formats = _formats(args.format)
    out = Path(args.out)
    _check_figures_dir(args.figures, args.force)
    for run in args.runs:
        # A run directory, or a folder of them (probe compare's, a context sweep's).
        if not Path(run).exists():
            raise ProbeError(f"{run} does not exist; give a run directory written by probe analyze")
        if not (Path(run) / "summary.json").exists() and not any(Path(run).glob("*/summary.json")):
            raise ProbeError(f"{run} is not a probe run directory (no summary.json); "
                             "create it with probe analyze")
    runs = load_run_dirs([Path(r) for r in args.runs])      # a run that does not fit: one line, now
    pairs, groups = pairs_of(args.pair, runs), groups_of(args.group, runs)
    for path in write_report(runs, out, formats=formats, title=args.title, force=args.force,
                             figures=args.figures, pairs=pairs, groups=groups).values():
        print(f"wrote {errors.printable(path)}")
    print_claims(runs, pairs)
    print_between(runs)
    return 0


def _check_figures_dir(figures: str | None, force: bool) -> None:
    """--figures DIR: refuse to overwrite figures of an earlier report without --force."""
    if figures is None:
        return
    from ..core.atomic import check_writable

    target = Path(figures)
    if target.exists() and not target.is_dir():
        raise ProbeError(f"--figures {figures} is a file; give a folder")
    check_writable(target, "--figures")          # before the analysis, not after it
    if not force and target.is_dir() and any(target.glob("figure-*")):
        raise ProbeError(f"{figures} already holds figures; pass --force to replace them")


def cmd_compare(args, command_line) -> int:
    from ..core.atomic import check_output_dir, check_writable
    from ..load.preflight import check_checkpoint
    from .ablation_console import print_ablations
    from ..run.distributed import is_main
    from .outputs import write_runs
    from ..core.owned import inputs_of

    formats = _formats(args.format)
    options, data = _checked_options(args)
    console.raise_if_interrupted()
    out = Path(args.out)
    main_rank = is_main()                      # under torchrun only rank 0 writes and prints
    if main_rank:
        check_output_dir(out, args.force, inputs_of(args))
        check_writable(out)
        _check_figures_dir(args.figures, args.force)
    names = compare_names(args.checkpoints, args.name)
    if main_rank:
        warn_repeated(args.checkpoints)
    pairs_of(args.pair, None, names)                 # a malformed --pair: one line, before any pass
    for checkpoint in args.checkpoints:              # a broken last one: before the first is analysed
        check_checkpoint(checkpoint)
    if args.lengths:
        return _sweeps(args.checkpoints, names, options, data, args, out, formats, command_line)
    analyses = [_run_analysis(ckpt, options, data, name, command_line)
                for ckpt, name in zip(args.checkpoints, names)]
    if not main_rank:
        return 0
    console.raise_if_interrupted()
    pairs, groups = pairs_of(args.pair, analyses), groups_of(args.group, analyses)
    reports = write_runs(dict(zip(names, analyses)), out, force=args.force, formats=formats,
                         title=args.title, figures=args.figures, inputs=inputs_of(args), pairs=pairs, groups=groups)
    print_summary(analyses)
    print_intervals(analyses)
    if len({a.meta.get("tokens_sha256") for a in analyses}) > 1:
        print(f"probe: warning: {different_tokens(analyses, names)}", file=sys.stderr)
    from probe.reports.runs import load_runs

    runs = load_runs(analyses)          # read into report tables once, for the three tables below
    print_claims(runs, pairs)
    print_differences(runs, pairs)
    print_ablations(analyses)
    print_between(runs)
    print(f"wrote {errors.printable(out)}/")                     # the run folders first, as probe analyze prints them
    for path in reports.values():
        print(f"wrote {errors.printable(path)}")
    if args.figures and not formats:
        from probe.reports import write_figures

        print(f"wrote {errors.printable(write_figures([out / n for n in names], args.figures))}")
    return 0


def _sweeps(checkpoints, names, options, data, args, out: Path, formats, command_line) -> int:
    """A context sweep of each checkpoint (probe/api/sweep_cli.py): each length saved as it
    finishes, --out written whole at the end, --resume continuing an interrupted sweep."""
    from .sweep_cli import run_sweeps

    return run_sweeps(checkpoints, names, options, data, args, out, formats, command_line)


def cmd_graft(args, command_line) -> int:
    from ..train.graft import run

    return run(args, command_line)


def cmd_train(args, command_line) -> int:
    from ..train.cli import run

    try:
        return run(args, command_line)
    except KeyboardInterrupt:
        print(f"probe: interrupted; continue from the last checkpoint with the same command "
              f"plus --resume (it is in {args.out})", file=sys.stderr)
        return 130
