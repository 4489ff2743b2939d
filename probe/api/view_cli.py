"""`probe view RUN [RUN] --out FILE.html`: the per-token viewer of one run, or of two side by side
on the same tokens (reports/viewer/), as one self-contained HTML file."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import ProbeError, printable


def add_arguments(v) -> None:
    v.add_argument("runs", nargs="+", help="one run directory, or two on the same tokens (side by side)")
    v.add_argument("--out", required=True, help="the HTML file to write")
    v.add_argument("--title", help="the page's title (default: the runs' names)")
    v.add_argument("--force", action="store_true",
                   help="replace --out if it exists and is a page probe view wrote (nothing else)")


def cmd_view(args, command_line) -> int:
    from probe.reports.viewer import page

    from ..core.atomic import check_writable, describe_os_error, write_text
    from .outputs import load_run_dirs

    out = Path(args.out)
    if out.is_dir():
        raise ProbeError(f"--out {printable(out)} is a folder; give a file name such as tokens.html")
    if out.exists() and not args.force:
        raise ProbeError(f"{printable(out)} exists; pass --force to replace it")
    if out.exists() and not _written_by_view(out):
        # --force replaces an earlier page of probe view, never a run's file or a checkpoint's.
        raise ProbeError(f"--out {printable(out)} is not a page probe view wrote; --force replaces only "
                         "those: choose another file name, or remove it yourself")
    for run in args.runs:
        if not (Path(run) / "summary.json").is_file():
            inner = sorted(p for p in Path(run).glob("*/summary.json")) if Path(run).is_dir() else []
            if inner:            # a compare or sweep folder: its runs are one level down
                runs = f"{len(inner)} run{'s' if len(inner) > 1 else ''}"
                raise ProbeError(f"{printable(run)} holds {runs} (a compare or sweep folder); pass one or two "
                                 f"of them, such as {printable(inner[0].parent)}")
            raise ProbeError(f"{printable(run)} is not a probe run directory (no summary.json); "
                             "create it with probe analyze")
    if not out.exists():
        check_writable(out)
    text = page(load_run_dirs([Path(r) for r in args.runs]), title=args.title)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text(out, text)
    except OSError as err:            # /proc, /sys: writable to root by access(), not in fact
        raise ProbeError(f"could not write --out {printable(out)} ({describe_os_error(err)}); "
                         "choose another place; nothing was written") from None
    size = len(text.encode())
    print(f"wrote {printable(out)} ({size / 1e6:.1f} MB)" if size >= 1e5 else
          f"wrote {printable(out)} ({size / 1e3:.0f} kB)")
    return 0


def _written_by_view(path: Path) -> bool:
    """Whether `path` is a page probe view wrote: its head names the generator."""
    from probe.reports.viewer import GENERATOR

    try:
        with open(path, "rb") as f:
            return GENERATOR.encode() in f.read(4096)
    except OSError:
        return False
