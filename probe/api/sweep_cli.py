"""`probe analyze` / `probe compare` with a --seq-len list: a context sweep of each checkpoint.

Each length's run directory is saved into OUT.partial/ as soon as that length is done (the
folder and lock of a single run's --resume; probe/api/sweep_saved.py), so a sweep killed at its
longest length keeps the shorter ones. When every length of every model is done, --out is
written in one rename as before (a run folder per model and length, context_length.csv, the
report), from the saved run directories, and OUT.partial/ goes. `--resume` continues an
interrupted sweep: saved lengths are read back, the interrupted pass continues from its
saved state, the rest run.
"""
from __future__ import annotations

import filecmp
import sys
from pathlib import Path

from . import console
from ..core.errors import ProbeError, printable


def check_sweep_name(name, longest: int) -> None:
    """A sweep's --name names folders (NAME@LENGTH in OUT.partial/ and in --out): refused, in one
    line before anything runs, unless it is one folder name that leaves room for probe's working
    names beside it (probe/core/owned.py check_out_name; `..` would write beside --out)."""
    import os

    from ..core.owned import NAME_ROOM

    if name is None:
        return
    shown = printable(name if len(name) <= 40 else name[:40] + "...")
    if not name.strip() or name in (".", "..") or any(c in name for c in "/\\\0"):
        raise ProbeError(f"--name {shown!r} is not a folder name (a sweep writes NAME@LENGTH folders): give a "
                         "name without '/', '\\', and other than '.' or '..'")
    size = len(os.fsencode(f"{name}@{longest}"))
    if size + NAME_ROOM > 255:
        raise ProbeError(f"--name {shown} is too long: {name}@{longest} takes {size} bytes, and a folder name "
                         f"holds at most {255 - NAME_ROOM} here; choose a shorter name")


def run_sweeps(checkpoints, names, options, data, args, out: Path, formats, command_line) -> int:
    from ..core.atomic import check_output_dir, check_writable
    from ..run.distributed import world
    from ..run.resume import claim, holds_state, partial_dir, refuse_waiting_run, release
    from .outputs import write_runs
    from .sweep import check_uniform, describe, sweep
    from .sweep_saved import FINGERPRINT

    for name in names:
        check_sweep_name(name, max(args.lengths))
    if world()[1] > 1:
        # Its lengths are saved, locked and written by one process; torchrun would race on them.
        raise ProbeError("a --seq-len sweep runs in one process; run it without torchrun")
    resume = bool(getattr(args, "resume", False))
    partial = partial_dir(out)
    if resume and (out / "context_length.csv").exists() and not partial.exists():
        print(f"probe: {out} is a finished sweep; there is nothing to resume (pass --force instead of "
              "--resume to run it again)", file=sys.stderr)
        return 0
    check_output_dir(out, args.force)
    check_writable(out)
    if resume and not holds_state(partial):
        print(f"probe: no saved state in {partial}/; --resume starts from the beginning", file=sys.stderr)
    # Held until --out is written: a second run on this --out is refused meanwhile.
    claim(partial, clear=args.force and not resume)
    written = False
    try:
        refuse_waiting_run(partial, resume)             # before spending time on a model
        o = options.replace(command=command_line, partial=partial, resume=resume)
        try:
            sweeps = [sweep(ckpt, data, lengths=args.lengths, options=o, name=name, keep_runs=False,
                            progress_line=lambda line: print(line, file=sys.stderr) if options.progress else None)
                      for ckpt, name in zip(checkpoints, names)]
            check_uniform(sweeps)
            console.raise_if_interrupted()
            folders = {n: p for s in sweeps for n, p in s.run_names().items()}
            table = _table(sweeps)
            try:
                reports = write_runs(folders, out, force=args.force, formats=formats,
                                     title=getattr(args, "title", None), figures=getattr(args, "figures", None),
                                     files={"context_length.csv": table.to_csv(index=False)},
                                     leave_out=(FINGERPRINT,))
            except BaseException:
                # A report that failed after --out was renamed into place: the runs are there.
                written = _carries(out, folders)
                raise
            written = True
        except KeyboardInterrupt:
            print(f"probe: interrupted after {printable(out)}/ was written" if written else
                  f"probe: interrupted; {_saved_line(partial)}", file=sys.stderr)
            return 130
    finally:
        release(partial, discard=written, runs=written)
    for s in sweeps:
        print(describe(s))
    print(f"wrote {printable(out)}/ ({len(folders)} runs and context_length.csv)")
    for path in reports.values():
        print(f"wrote {printable(path)}")
    return 0


def _table(sweeps):
    import pandas as pd

    parts = [s.table() for s in sweeps]
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def _carries(out: Path, folders: dict[str, Path]) -> bool:
    """Whether --out holds exactly the saved runs (their meta.json, timestamp and all)."""
    try:
        return all(filecmp.cmp(out / name / "meta.json", saved / "meta.json", shallow=False)
                   for name, saved in folders.items())
    except OSError:
        return False


def _saved_line(partial: Path) -> str:
    """Which lengths an interrupted sweep saved where, and how to go on."""
    from ..run.partial_lock import PROGRESS
    from .sweep_saved import saved_runs

    done = saved_runs(partial)
    parts = []
    if done:
        parts.append(f"{', '.join(done)} {'is' if len(done) == 1 else 'are'} saved in {printable(partial)}/")
    if (partial / PROGRESS).exists():
        parts.append(f"the batches done so far of the length that was running are saved in {printable(partial)}/"
                     if not done else "so are the batches done so far of the length that was running")
    if not parts:
        return "nothing was saved yet"
    return "; ".join(parts) + "; continue with the same command plus --resume"
