"""Write files and directories so that a reader sees either the old or the complete new one.

Temporary files and folders are made private by `tempfile`; what ends up in place gets the
permissions the user's umask gives a new file or folder, as `open` and `mkdir` would.
"""
from __future__ import annotations

import errno
import glob
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import ProbeError, flag, on_command_line


def umask() -> int:
    """The process's umask (os.umask can only be read by setting it)."""
    current = os.umask(0o022)
    os.umask(current)
    return current


def shared_mode(path: Path, *, folder: bool) -> None:
    """Give a file or folder that tempfile made private the mode the umask gives new ones."""
    os.chmod(path, (0o777 if folder else 0o666) & ~umask())


def write_text(path: Path, text: str) -> None:
    write_with(path, lambda f: f.write(text.encode("utf-8")))


def write_with(path: Path, write) -> None:
    """Call write(binary file) on a temporary file beside `path`, fsync, then rename it over
    `path`. On any failure (a full disk, Ctrl-C) the temporary is removed and `path` is as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        shared_mode(Path(tmp), folder=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def serialized(obj) -> memoryview:
    """torch.save into memory: written to disk by write_with, a full disk is then an OSError
    (ENOSPC) rather than a RuntimeError from inside torch's zip writer."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getbuffer()


def write_torch(path: Path, obj) -> None:
    """torch.save(obj, path), atomically."""
    data = serialized(obj)
    write_with(path, lambda f: f.write(data))


def describe_os_error(err: OSError) -> str:
    """'No space left on device; is the disk full?' and the like: what the OS said, and a hint."""
    reason = err.strerror or str(err)
    hint = {errno.ENOSPC: "; is the disk full?", errno.EDQUOT: "; is the disk quota used up?",
            errno.EACCES: "; check its permissions", errno.EPERM: "; check its permissions"}.get(err.errno, "")
    return reason + hint


def check_writable(path: Path, what: str = "--out") -> None:
    """Refuse, before any work, an output whose nearest existing ancestor is a file or a folder
    this user cannot make a folder in (`--out afile/sub`, a read-only file system, /proc). `what` names the
    option or argument that gave the path ("" for none)."""
    path = Path(path)
    named, other = (f"{what} {path}", f"another {what}") if what else (str(path), "another place")
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if path.exists() and not path.is_dir():
        raise ProbeError(f"{named} is a file, not a folder; choose {other}")
    if not ancestor.is_dir():
        raise ProbeError(f"cannot create {named}: {ancestor} is a file, not a folder; choose {other}")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        reason = "the file system is read-only" if _read_only(ancestor) else "permission denied"
        raise ProbeError(f"cannot write {named}: {ancestor} is not writable ({reason}); choose {other}")
    # os.access answers from the mode bits, and for root almost always yes: a folder made and
    # removed is the answer of the file system itself (/proc, a root-squashed share).
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".probe-check-", dir=ancestor))
    except OSError as error:
        raise ProbeError(f"cannot write {named}: {ancestor} refuses a new folder "
                         f"({error.strerror or error}); choose {other}") from None


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def check_output_dir(path: Path, force: bool, inputs: dict | None = None) -> None:
    """Refuse, before any work, an --out that exists (without force), that is a file, that
    names no folder of its own, or that force may not replace (owned.py: only a probe output
    folder, never one holding or inside an input)."""
    from .owned import check_out_name, check_replaceable, is_probe_output

    path = Path(path)
    other = "--out" if on_command_line() else "path"
    check_out_name(path)
    if path.exists() and not path.is_dir():
        named = f"--out {path}" if on_command_line() else str(path)
        raise ProbeError(f"{named} is a file, not a run directory; choose another {other}")
    if path.exists() and not force:
        if not is_probe_output(path) and any(path.iterdir()):
            raise ProbeError(f"output directory {path} already exists and is not a folder probe wrote; "
                             f"choose another {other}")
        raise ProbeError(f"output directory {path} already exists; pass {flag('force', True)} to replace "
                         f"it or choose another {other}")
    if path.exists() or path.is_symlink():
        check_replaceable(path, inputs)


def remove(path: Path) -> None:
    """Remove a file or a folder tree, whichever `path` is; nothing if it is not there."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def atomic_directory(path: Path, force: bool = False, kind: str = "run", inputs: dict | None = None):
    """Yield a temporary sibling directory, marked as probe's (owned.py); on success it
    replaces `path` in one rename. Its name carries this process's id, so that a later run
    removes what a killed one left (sweep_stale)."""
    from .owned import mark

    path = Path(path)
    check_output_dir(path, force, inputs)
    check_writable(path, "")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(path)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.partial-{os.getpid()}-"))
        shared_mode(tmp, folder=True)
    except OSError as err:
        raise ProbeError(f"cannot write {path} in {path.parent} ({describe_os_error(err)})") from None
    try:
        mark(tmp, kind)
        yield tmp
        if path.exists() or path.is_symlink():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            remove(old)
        else:
            os.replace(tmp, path)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        cause = os_error_in(err)
        if cause is None:
            raise
        raise ProbeError(f"could not write {path} ({describe_os_error(cause)}); nothing was written") from None


def sweep_stale(path: Path) -> None:
    """Remove `.NAME.partial-<pid>-*` folders beside `path` that a process which no longer runs
    left (a SIGKILL while the run directory was being written)."""
    for entry in Path(path).parent.glob(f".{glob.escape(path.name)}.*-*"):
        rest = entry.name[len(path.name) + 2:]
        kind, _, tail = rest.partition("-")
        pid = tail.split("-", 1)[0]
        if kind == "partial" and pid.isdigit() and not _alive(int(pid)) \
                and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:                       # another user's process: alive
        return True
    return True


def os_error_in(err: BaseException) -> OSError | None:
    """The OSError behind `err`, if any: a writer that fails on a full disk sometimes raises
    something else while cleaning up (matplotlib's PDF backend: zlib.error), with the OSError
    as its context."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None
