"""Which folders `--force` may replace: only a probe output folder, nothing else.

probe writes a marker file, `.probe-output`, into every folder it writes whole (a run
directory, a compare folder, a train folder). `--force` replaces an existing folder only when it
holds that marker (or, for runs written before the marker existed, when every file in it is one
a run directory holds), and never a folder that holds, or lies inside, one of the command's
inputs (the checkpoint, the data, the tokenizer, the token-groups file): those would be read
first and deleted after. Anything else is refused in one line, before anything is touched.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import ProbeError, flag, on_command_line

MARKER = ".probe-output"
FORCE_HELP = ("replace an existing --out that probe wrote: replaces a probe output folder, nothing else "
              "(never one holding the checkpoint or the data)")
KINDS = ("run", "compare", "train")
# The working names probe makes beside --out NAME: `.NAME.partial-<pid>-XXXXXXXX` (atomic.py),
# `.NAME.partial.XXXXXXXX` (partial_lock.py), `NAME.partial`: at most this many bytes more.
NAME_ROOM = 32
# What a run directory written before the marker existed can hold (docs/run-directory.md).
_RUN_FILES = {"meta.json", "summary.json", "report.html", "report.pdf", "train_config.json"}


def mark(folder: Path, kind: str) -> None:
    """Write the marker into a folder probe is writing (a run's before it is renamed into place,
    so a plain write is whole by the time anyone sees it)."""
    (Path(folder) / MARKER).write_text(json.dumps({"written_by": "probe", "kind": kind}) + "\n")


def marked(folder: Path) -> bool:
    """Whether `folder` holds probe's marker (a real file, not a link to one)."""
    marker = Path(folder) / MARKER
    return marker.is_file() and not marker.is_symlink()


def _legacy_run(folder: Path) -> bool:
    """A run directory from before the marker: summary.json, and only files a run holds."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return False
    return (any(e.name == "summary.json" for e in entries)
            and all(e.is_file() and not e.is_symlink() and (e.suffix == ".csv" or e.name in _RUN_FILES)
                    for e in entries))


def _legacy_compare(folder: Path) -> bool:
    entries = list(folder.iterdir())
    runs = [e for e in entries if e.is_dir() and not e.is_symlink()]
    rest = [e for e in entries if e not in runs]
    return bool(runs) and all(_legacy_run(r) for r in runs) and all(
        e.is_file() and not e.is_symlink() and e.name in ("report.html", "report.pdf") for e in rest)


def is_probe_output(folder: Path) -> bool:
    folder = Path(folder)
    return folder.is_dir() and not folder.is_symlink() and (
        marked(folder) or _legacy_run(folder) or _legacy_compare(folder)
        or (folder / "train_config.json").is_file())      # a train folder from before the marker


def _option() -> str:
    return "--out" if on_command_line() else "path"


def check_out_name(path: Path) -> None:
    """An output must be a folder of its own with a name that leaves room for probe's working
    names beside it: `.`, `..`, `/` and a name near the file system's limit are refused."""
    path = Path(path)
    if path.name in ("", ".", "..") or path.parts[-1:] in (("..",), (".",)):
        raise ProbeError(f"{_option()} {path} names no folder of its own (probe writes a whole folder "
                         f"and renames it into place); give a new folder, e.g. {_option()} runs/mymodel")
    try:
        limit = os.pathconf(path.parent if path.parent.exists() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    size = len(os.fsencode(path.name))
    if size + NAME_ROOM > limit:
        raise ProbeError(f"{_option()} {path.name[:40]}... is {size} bytes long; probe needs {NAME_ROOM} more "
                         f"for its working folders beside it and the limit is {limit}: choose a shorter name")


def _inside(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_inputs_apart(out: Path, inputs: dict[str, object]) -> None:
    """Refuse an --out that holds or lies inside an input ({what: path}): replacing it would
    delete that input."""
    target = Path(out).resolve()
    for what, given in inputs.items():
        for item in given if isinstance(given, (list, tuple)) else (given,):
            if not isinstance(item, (str, os.PathLike)) or not str(item) or str(item).startswith("synthetic:"):
                continue
            source = Path(item).resolve()
            if _inside(source, target):
                relation = "is" if source == target else "holds"
                raise ProbeError(f"{_option()} {out} {relation} the {what} {item}; --force replaces a probe output "
                                 f"folder, nothing else: choose another {_option()}")
            if _inside(target, source):
                raise ProbeError(f"{_option()} {out} is inside the {what} {item}; --force replaces a probe "
                                 f"output folder, nothing else: choose another {_option()}")


def check_replaceable(out: Path, inputs: dict[str, object] | None = None) -> None:
    """--force on an existing --out: only a probe output folder that holds none of the inputs."""
    out = Path(out)
    check_inputs_apart(out, inputs or {})
    if out.is_symlink():
        raise ProbeError(f"{_option()} {out} is a symbolic link; probe does not replace a folder through a "
                         f"link: choose another {_option()}")
    if out.is_dir() and any(out.iterdir()) and not is_probe_output(out):
        raise ProbeError(f"{_option()} {out} is not a folder probe wrote (it has no {MARKER} marker); "
                         f"{flag('force', True)} replaces a probe output folder, nothing else: choose "
                         f"another {_option()} or remove it yourself")


def inputs_of(args) -> dict[str, object]:
    """The paths a command reads, from its parsed arguments: {what: path or paths}."""
    found = {"checkpoint": getattr(args, "checkpoint", None) or getattr(args, "checkpoints", None),
             "data": getattr(args, "data", None), "tokenizer": getattr(args, "tokenizer", None),
             "token-groups file": getattr(args, "token_groups", None),
             "run directory": getattr(args, "runs", None)}
    return {what: value for what, value in found.items() if value}
