"""What the commands write: run directories with their report, and reports of saved runs.

Each is written whole or not at all. A run directory and the report beside it are built in one
temporary folder and renamed into place together, so a full disk while writing the report
leaves neither (the command can simply be run again). A report of saved runs goes into an
existing folder: the files this command added are removed again when it fails.
"""
from __future__ import annotations

from pathlib import Path

from ..core.atomic import atomic_directory, describe_os_error, os_error_in, write_text
from ..core.errors import ProbeError, first_line
from ..core.owned import mark


def write_runs(analyses: dict[str, object] | object, out: Path, *, force: bool, formats=(),
               title: str | None = None, figures: Path | None = None,
               inputs: dict | None = None, pairs=None, groups=None, files: dict[str, str] | None = None,
               leave_out=()) -> dict[str, Path]:
    """Write one run directory (an Analysis) or a folder of them ({name: Analysis}) at `out`,
    with report.<fmt> for each of `formats` (and every figure on its own in `figures`, a folder
    of its own); returns {format: final path}. inputs ({what: path}): what the command read,
    which --force must never replace (owned.py). files ({name: text}): more files written
    into the folder with the runs (a sweep's context_length.csv), so they appear together.

    A value of {name: ...} may also be a run directory already saved (a Path: a sweep's finished
    length, probe/api/sweep_saved.py): its files, but those named in leave_out, go in as they
    are, without the run being read into memory.

    A report step that fails for another reason than the disk (a bug, a table the report
    cannot draw) does not cost the run: the run directories are kept, without a report, and
    the error says how to write the report from them."""
    out = Path(out)
    failed = None
    with atomic_directory(out, force, "compare" if isinstance(analyses, dict) else "run", inputs) as tmp:
        if isinstance(analyses, dict):
            folders = {}
            for name, analysis in analyses.items():
                if isinstance(analysis, Path):
                    _link_run(analysis, tmp / name, leave_out)
                else:
                    (tmp / name).mkdir()
                    mark(tmp / name, "run")
                    analysis.write_into(tmp / name)
                folders[tmp / name] = out / name
        else:
            analyses.write_into(tmp)
            folders = {tmp: out}
        for file, text in (files or {}).items():
            write_text(tmp / file, text)
        if formats:
            # Figures asked for inside --out go into the folder that replaces it.
            inside = _within(figures, out) if figures is not None else None
            try:
                _report(folders, tmp, formats, title, tmp / inside if inside is not None else figures,
                        pairs, groups)
            except Exception as err:
                if os_error_in(err) is not None:
                    raise
                failed = err
                for fmt in formats:
                    (tmp / f"report.{fmt}").unlink(missing_ok=True)
    if failed is not None:
        runs = "the run directories are" if isinstance(analyses, dict) else "the run directory is"
        raise ProbeError(f"the report could not be written ({type(failed).__name__}: {first_line(failed)}); "
                         f"{runs} saved in {out}/: write the report with probe report "
                         f"{' '.join(str(out / n) for n in analyses) if isinstance(analyses, dict) else out} "
                         f"--out {out}")
    written = {fmt: out / f"report.{fmt}" for fmt in formats}
    if formats and figures:
        written["figures"] = Path(figures)
    return written


def _link_run(saved: Path, into: Path, leave_out=()) -> None:
    """The files of a saved run directory (its marker included) into the new folder `into`:
    hard links, since probe never changes a written file in place (it writes a new one and
    renames it), so the saved copy stays whole if this folder is thrown away; a copy where the
    file system has no hard links."""
    import os
    import shutil

    into.mkdir()
    for file in sorted(Path(saved).iterdir()):
        if file.name in leave_out or not file.is_file() or file.is_symlink():
            continue
        try:
            os.link(file, into / file.name)
        except OSError:
            shutil.copy2(file, into / file.name)


def _within(path: Path, folder: Path) -> Path | None:
    """`path` relative to `folder` when it lies inside it, else None."""
    path, folder = Path(path).absolute(), Path(folder).absolute()
    try:
        return path.relative_to(folder)
    except ValueError:
        return None


def _report(folders: dict[Path, Path], into: Path, formats, title, figures=None, pairs=None,
            groups=None) -> None:
    """Build the report from run directories written in a temporary folder; the report names
    them where they will be."""
    from probe.reports import build_report, load_runs

    runs = load_runs(list(folders))
    where = dict(zip(runs.models, folders.values()))
    runs.sources.update({model: str(path) for model, path in where.items()})
    build_report(runs, into, formats=formats, title=title, figures=figures, pairs=pairs, groups=groups)


def write_report(runs, out: Path, *, formats, title: str | None, force: bool,
                 figures: Path | None = None, pairs=None, groups=None) -> dict:
    """`probe report`: report.<fmt> of saved runs (run directories or the `Runs` read from
    them) into the folder `out`."""
    from probe.reports import build_report

    from ..core.atomic import check_writable
    from ..results.run_files import RunDirectoryError

    if not formats:
        raise ProbeError("--format is empty; use html, pdf or html,pdf")
    check_writable(out)
    targets = [out / f"report.{fmt}" for fmt in formats]
    for target in targets:
        if target.exists() and not force:
            raise ProbeError(f"{target} already exists; pass --force to replace it")
    new = [t for t in targets if not t.exists()]
    made_folder = not out.exists()
    try:
        return build_report(runs, out, formats=formats, title=title, figures=figures, pairs=pairs,
                            groups=groups)
    except RunDirectoryError as err:
        raise ProbeError(str(err)) from None
    except Exception as err:
        cause = os_error_in(err)
        if cause is None:
            raise
        for target in new:
            target.unlink(missing_ok=True)
        if made_folder:
            try:
                out.rmdir()
            except OSError:
                pass
        raise ProbeError(f"could not write the report into {out} ({describe_os_error(cause)}); "
                         "nothing was written") from None


def load_run_dirs(run_dirs: list[Path]):
    """Read saved runs for the claims table, one line for a run directory that does not fit."""
    from probe.reports import load_runs

    from ..results.run_files import RunDirectoryError

    try:
        return load_runs(run_dirs)
    except RunDirectoryError as err:
        raise ProbeError(str(err)) from None
