"""`probe view RUN [RUN] --out FILE.html`: the per-token viewer of one run, or of two side by side
on the same tokens (reports/viewer/), as one self-contained HTML file."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import ProbeError, printable


def add_arguments(v) -> None:
    v.add_argument("runs", nargs="+", help="one run directory, or two on the same tokens (side by side)")
    v.add_argument("--out", required=True, help="the HTML file to write")
    v.add_argument("--title", help="the page's title (default: the runs' names)")
    v.add_argument("--force", action="store_true", help="replace --out if it exists")


def cmd_view(args, command_line) -> int:
    from probe.reports.viewer import page

    from ..core.atomic import check_writable, write_text
    from .outputs import load_run_dirs

    out = Path(args.out)
    if out.is_dir():
        raise ProbeError(f"--out {printable(out)} is a folder; give a file name such as tokens.html")
    if out.exists() and not args.force:
        raise ProbeError(f"{printable(out)} exists; pass --force to replace it")
    for run in args.runs:
        if not (Path(run) / "summary.json").is_file():
            raise ProbeError(f"{printable(run)} is not a probe run directory (no summary.json); "
                             "create it with probe analyze")
    if not out.exists():
        check_writable(out)
    text = page(load_run_dirs([Path(r) for r in args.runs]), title=args.title)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, text)
    print(f"wrote {printable(out)} ({len(text.encode()) / 1e6:.1f} MB)")
    return 0
