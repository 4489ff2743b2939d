"""A sweep's finished lengths on disk, so that an interrupted sweep loses only the length it was on.

With a partial folder (the CLI: OUT.partial/, the folder and lock of a single run's --resume,
probe/run/partial_lock.py), every length's run directory is saved there, whole (one rename),
as soon as that length is done: OUT.partial/NAME@LENGTH/, a normal run directory plus
FINGERPRINT, what the run was made from. `--resume` reads a saved length back instead of
analysing it again, but only when its fingerprint equals the one this sweep would write; the
final --out gets each saved run directory's files (probe/api/outputs.py `write_runs`) and the
partial folder goes.

FINGERPRINT also holds the SHA-256 of every file of the saved run directory (`files`): a saved
length whose files were edited, added or removed since is refused, in one line, like one made
with other options (docs/usage.md: an edited `OUT.partial/` is refused).

The fingerprint is the pass's own (probe/run/resume.py `fingerprint`: checkpoint, config hash,
the weights' identity, dtype, gate layout) with every option that changes a number of the run
(the whole AnalysisOptions but how it is shown and saved), the sweep's lengths, and the
SHA-256 of the token ids cut at the longest length: the tokens of every length are a function
of those (probe/api/sweep.py), so equal fingerprints mean the saved run is the one this sweep
would make.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..core.errors import ProbeError, flag

FINGERPRINT = "sweep-fingerprint.json"
FILES = "files"           # FINGERPRINT's key of the run directory's file digests
# Options that do not change what a run measures: how it is shown, where its state goes.
NOT_COMPARED = ("progress", "command", "partial", "resume", "checkpoint_seconds")


def sweep_fingerprint(loaded, longest, options, lengths, *, dtype) -> dict:
    """What every saved length of this sweep must share: see the module docstring. `longest`:
    the dataset cut at the longest length; `options`: the sweep's, before each length's."""
    from ..run.resume import fingerprint

    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
              if f.name not in NOT_COMPARED and f.name not in ("seq_len", "max_sequences", "name")}
    found = {**fields, **fingerprint(loaded, longest, model_dtype=dtype, gate_layout=loaded.layout.gate_layout,
                                     lengths=list(lengths))}
    return _as_json(found)


def length_fingerprint(sweep: dict, run_options) -> dict:
    """The sweep's fingerprint with one length's own options (its seq_len, sequences, name)."""
    return {**sweep, "length": {k: getattr(run_options, k) for k in ("seq_len", "max_sequences", "name")}}


def saved(folder: Path | None, run: str) -> Path | None:
    """The run directory of `run` saved in `folder`, or None (a folder without its fingerprint
    is never one: the two are written in one rename)."""
    if folder is None:
        return None
    path = Path(folder) / run
    return path if (path / FINGERPRINT).is_file() and not path.is_symlink() else None


def check(path: Path, expected: dict) -> None:
    """Refuse, in one line, a saved length made with another model, weights, data or options."""
    from ..run.resume import start_again

    try:
        found = json.loads((path / FINGERPRINT).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        found = None
    if not isinstance(found, dict):
        raise ProbeError(f"{path / FINGERPRINT} is damaged; {start_again()}")
    found = dict(found)
    files = found.pop(FILES, None)
    differ = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
    if "length" in differ:
        differ.remove("length")
        differ += sorted(k for k in (expected.get("length") or {}) if (found.get("length") or {}).get(k)
                         != expected["length"][k])
    if differ:
        what = ", ".join(differ[:4]) + (", ..." if len(differ) > 4 else "")
        raise ProbeError(f"{path} was made with other options, data or weights than this sweep ({what} "
                         f"{'differs' if len(differ) == 1 else 'differ'}); rerun the same command with "
                         f"{flag('resume', True)}, or {start_again()}")
    if not isinstance(files, dict) or files != digests(path):
        raise ProbeError(f"{path} has changed since it was saved (a file of it was edited, added or removed); "
                         f"it cannot be trusted: {start_again()}")


def save(folder: Path, analysis, fingerprint: dict) -> Path:
    """The run directory of one finished length, with its fingerprint, into `folder`, whole."""
    from ..core.atomic import atomic_directory, write_text

    path = Path(folder) / analysis.meta["name"]
    # force: a run directory left without a fingerprint, or one --resume checked and found
    # wanting, never reaches here with one; what is replaced is a temporary or a stale copy.
    with atomic_directory(path, force=True) as tmp:
        analysis.write_into(tmp)
        recorded = {**fingerprint, FILES: digests(tmp)}
        write_text(tmp / FINGERPRINT, json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    return path


def digests(path: Path) -> dict[str, str] | None:
    """{relative file name: SHA-256} of every file of a saved run directory but its fingerprint;
    None when it holds something that is not a plain file (a link, a socket): never trusted."""
    import hashlib

    found = {}
    for item in sorted(Path(path).rglob("*")):
        name = item.relative_to(path).as_posix()
        if name == FINGERPRINT or (item.is_dir() and not item.is_symlink()):
            continue
        if item.is_symlink() or not item.is_file():
            return None
        digest = hashlib.sha256()
        with open(item, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        found[name] = digest.hexdigest()
    return found


def write_readme(folder: Path, command: str | None) -> None:
    """What the folder is and how to continue, for whoever finds it: written when the sweep
    starts and after each length (a pass's own README, resume.py, is not written over it)."""
    from ..core.atomic import write_text

    done = saved_runs(folder)           # every model's (probe compare's share the folder)
    command = command or "probe analyze ... --seq-len ..."
    hint = command + ("" if "--resume" in command else " --resume")
    write_text(Path(folder) / "README.txt",
               "A context sweep runs here, or was interrupted; its output is written to --out when every\n"
               f"length is done. The lengths done so far are saved here: {', '.join(done) or 'none yet'}.\n"
               f"Continue it with the same command plus --resume:\n  {hint}\n")


def saved_runs(folder: Path) -> list[str]:
    """The runs saved in `folder`, shortest length first within each model."""
    if not Path(folder).is_dir():
        return []
    names = [p.name for p in Path(folder).iterdir() if saved(folder, p.name) is not None]
    return sorted(names, key=lambda n: (n.rpartition("@")[0], int(n.rpartition("@")[2])
                                        if n.rpartition("@")[2].isdigit() else 0))


def _as_json(value):
    return json.loads(json.dumps(value, default=str))
