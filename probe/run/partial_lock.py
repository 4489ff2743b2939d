"""One run per partial folder: `RUN.partial/lock`, held while a run writes there.

The lock is an exclusive flock on `RUN.partial/lock`, which the operating system drops when
the process ends, however it ends; a second run on the same --out, with --force, --resume or
neither, is refused while it is held (resume.py saves and continues the state itself).

What a partial folder holds: a pass's state (progress.json, state-rank{r}.pt, README.txt), and
for a context sweep also the run directory of every length already done (NAME@LENGTH/, with
probe's marker, probe/api/sweep_saved.py), so that --resume reads them back instead of
analysing those lengths again.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..core.atomic import describe_os_error, shared_mode
from ..core.errors import ProbeError, flag, on_command_line

LOCK = "lock"
PROGRESS = "progress.json"


def another_folder() -> str:
    """What to change to write elsewhere: --out on the command line, the partial= folder in Python."""
    return "another --out" if on_command_line() else f"another {flag('partial')} folder"


_held: dict[str, list] = {}        # resolved folder -> [open lock file descriptor, claims]


def claim(folder: Path, *, clear: bool = False) -> None:
    """Take the lock on `folder` (made if absent) for this process; re-entrant.

    clear (--force): remove whatever an earlier, finished or dead, run left in it. Raises
    ProbeError when another process holds the lock."""
    folder = Path(folder)
    key = str(folder.resolve())
    if key not in _held:
        _check_ours(folder)
        _held[key] = [_lock(folder), 0]
    _held[key][1] += 1
    if clear:
        _clear(folder)


def release(folder: Path, *, discard: bool = False, runs: bool = False) -> None:
    """Undo one claim. discard: the pass is complete, remove its saved state now; runs: also the
    run directories a sweep saved (the sweep is written whole). A sweep's pass discards only its
    own state: the lengths done before it stay saved until the sweep's --out is written. The
    last claim closes the lock, after removing the folder if it holds nothing worth resuming."""
    folder = Path(folder)
    key = str(folder.resolve())
    if key not in _held:
        return
    if discard:
        _clear(folder, runs=runs)
    _held[key][1] -= 1
    if _held[key][1] > 0:
        return
    fd, _ = _held.pop(key)
    if not holds_state(folder):
        shutil.rmtree(folder, ignore_errors=True)
    os.close(fd)


def _check_ours(folder: Path) -> None:
    """probe works only in a partial folder it made: never through a symbolic link (whatever it
    points to would be emptied), never in a folder of someone else's files."""
    if folder.is_symlink():
        raise ProbeError(f"{folder} is a symbolic link; probe never follows a link to its partial run "
                         f"folder: remove the link or choose {another_folder()}")
    foreign = [e.name for e in folder.iterdir() if not _ours(e)] if folder.is_dir() else []
    if foreign:
        raise ProbeError(f"{folder} holds files probe did not write there ({foreign[0]}"
                         f"{', ...' if len(foreign) > 1 else ''}); move them away or choose {another_folder()}")


def _ours(entry: Path) -> bool:
    """A name probe writes in a partial folder: the lock, the README, the saved state, and the
    temporaries those are written through (atomic.write_with); a sweep's saved run directories
    and the temporary folders they are written through (atomic.atomic_directory)."""
    name = entry.name
    if not entry.is_symlink() and entry.is_dir():
        return _saved_run(entry) or (name.startswith(".") and (".partial-" in name or ".old-" in name))
    return (not entry.is_symlink() and entry.is_file()
            and (name in (LOCK, PROGRESS, "README.txt") or (name.startswith("state-rank") and name.endswith(".pt"))
                 or (name.startswith(".") and name.endswith(".tmp"))))


def _saved_run(entry: Path) -> bool:
    """A run directory a sweep saved here: a folder, not a link, holding probe's marker."""
    from ..core.owned import marked

    return not entry.name.startswith(".") and entry.is_dir() and not entry.is_symlink() and marked(entry)


def refuse_waiting_run(folder: Path, resume: bool, *, pass_only: bool = False) -> None:
    """A run that is not --resume must not start over state an interrupted one saved.
    pass_only: look only at a pass's state (a sweep's pass, whose earlier lengths are saved
    beside it by design)."""
    if not resume and (holds_pass_state(folder) if pass_only else holds_state(folder)):
        raise ProbeError(f"an interrupted run is waiting in {folder}; pass {flag('resume', True)} to continue it "
                         f"or {flag('force', True) if on_command_line() else f'delete {folder}'} to start again")


def _clear(folder: Path, *, runs: bool = True) -> None:
    """Everything in a folder we hold the lock of, but the lock (and, unless runs, the run
    directories a sweep saved there)."""
    for entry in folder.iterdir():
        if entry.name != LOCK and (runs or not _saved_run(entry)):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)


def holds_pass_state(folder: Path) -> bool:
    """Whether a pass saved state to continue in `folder`."""
    return Path(folder).is_dir() and any(p.name == PROGRESS or p.name.startswith("state-rank")
                                         for p in Path(folder).iterdir())


def holds_state(folder: Path) -> bool:
    """Whether a run saved anything worth resuming in `folder`: a pass's state, or the run
    directories of a sweep's finished lengths."""
    return holds_pass_state(folder) or (Path(folder).is_dir() and any(_saved_run(p) for p in Path(folder).iterdir()))


def _lock(folder: Path) -> int:
    import fcntl
    import tempfile

    for _ in range(5):
        if folder.exists() and not folder.is_dir():
            raise ProbeError(f"{folder} is a file, not a partial run folder; remove it or choose "
                             f"{another_folder()}")
        if folder.is_dir():
            fd = _open_lock(folder / LOCK)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ProbeError(f"another probe run{_owner(folder)} is writing {folder}; wait for it "
                                 f"to finish or choose {another_folder()}") from None
            try:
                same = os.stat(folder / LOCK).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:                  # its owner finished and removed it meanwhile: again
                os.close(fd)
                continue
            _write_pid(fd)
            return fd
        # A new folder appears with its lock already held: made privately, then renamed.
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
        except OSError as err:
            raise ProbeError(f"cannot write {folder} ({describe_os_error(err)}); "
                             f"choose {another_folder()}") from None
        shared_mode(tmp, folder=True)
        fd = _open_lock(tmp / LOCK)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _write_pid(fd)
        try:
            os.rename(tmp, folder)
        except OSError:                   # another run made it first: look again
            os.close(fd)
            shutil.rmtree(tmp, ignore_errors=True)
            continue
        return fd
    raise ProbeError(f"could not take the lock on {folder}; another probe run keeps replacing it")


def _open_lock(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise ProbeError(f"cannot write {path} ({describe_os_error(err)}); "
                         f"choose {another_folder()}") from None


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _owner(folder: Path) -> str:
    try:
        pid = int((folder / LOCK).read_text().strip())
    except (OSError, ValueError):
        return ""
    return f" (process {pid})"
