"""Write files and directories so that a reader sees either the old or the complete new one."""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import ProbeError, flag, on_command_line


def write_text(path: Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output_dir(path: Path, force: bool) -> None:
    if path.exists() and not force:
        other = "--out" if on_command_line() else "path"
        raise ProbeError(f"output directory {path} already exists; pass {flag('force', True)} to replace "
                         f"it or choose another {other}")


@contextmanager
def atomic_directory(path: Path, force: bool = False):
    """Yield a temporary sibling directory; on success it replaces `path` in one rename."""
    path = Path(path)
    check_output_dir(path, force)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.partial-"))
    except OSError as err:
        raise ProbeError(f"cannot write to {path.parent} ({err.strerror})") from None
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ProbeError(f"could not write {path} ({err.strerror}); is the disk full?") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
