"""Resumable analysis passes: reducer state saved between batches, continued with --resume.

An interrupted `probe analyze --out RUN` (Ctrl-C, kill, a crash) leaves `RUN.partial/`: a
README saying how to continue, `progress.json` (batches done, and a fingerprint of the model,
its weights, the tokens and the options) and `state-rank{r}.pt` (every reducer's state after
the last saved batch, with the same fingerprint and batch count). State is saved only between
batches, when every reducer has seen whole batches; the pass then continues with the next
batch, so a resumed run adds the same numbers in the same order as an uninterrupted one and
gives identical tables. Each file is written to a temporary and renamed into place, so an
interruption while saving leaves the previous state whole.

While a run uses `RUN.partial/` it holds an exclusive lock on `RUN.partial/lock` (released by
the operating system when the process ends, however it ends): a second run on the same --out,
with --force or --resume or neither, is refused while the first one runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import warnings
from pathlib import Path

import torch

from .atomic import describe_os_error, shared_mode, write_text, write_torch
from .errors import ProbeError, flag, on_command_line

LOCK = "lock"
PROGRESS = "progress.json"
START_AGAIN = "pass --force to start again"


def partial_dir(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".partial")


# -- what must be the same to continue ---------------------------------------------------------

def fingerprint(loaded, dataset, **options) -> dict:
    """What must be the same for saved state to be continued: model, weights, tokens, options."""
    return {"checkpoint": loaded.path, "config_hash": loaded.config_hash,
            "weights": weights_identity(loaded),
            "tokens_sha256": dataset.digest(), "sequences": len(dataset.sequences),
            **{k: v for k, v in options.items()}}


SAMPLE_BLOCKS, SAMPLE_BYTES = 64, 1 << 16


def weights_identity(loaded) -> dict:
    """The identity of the weights that are measured.

    A checkpoint directory: per weight file its size, modification time and a digest of its
    first and last MiB (the safetensors header sits at the start) and of 64 blocks of 64 KiB
    spread over the rest (the whole file when it is smaller than that): a retrained or
    re-saved checkpoint differs, and reading a few MiB costs nothing next to the pass.
    A model object: per parameter its shape, dtype, float64 sum and a digest of up to 4096
    evenly spaced elements."""
    path = Path(loaded.path) if loaded.path else None
    if loaded.config_hash is not None and path is not None and path.is_dir():
        files = sorted(path.glob("*.safetensors")) + sorted(path.glob("pytorch_model*.bin"))
        return {"files": {f.name: _file_identity(f) for f in files}}
    return {"parameters": _parameter_digest(loaded.model)}


def _file_identity(file: Path) -> dict:
    st = file.stat()
    h = hashlib.sha256()
    with file.open("rb") as f:
        if st.st_size <= 2 * (1 << 20) + SAMPLE_BLOCKS * SAMPLE_BYTES:
            h.update(f.read())
        else:
            offsets = [0] + [(1 << 20) + i * (st.st_size - (2 << 20)) // SAMPLE_BLOCKS
                             for i in range(SAMPLE_BLOCKS)] + [st.st_size - (1 << 20)]
            for offset in offsets:
                f.seek(offset)
                h.update(f.read(1 << 20 if offset in (0, st.st_size - (1 << 20)) else SAMPLE_BYTES))
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": h.hexdigest()}


def _parameter_digest(model) -> str:
    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in model.state_dict().items():
            flat = p.detach().reshape(-1)
            total = sum(float(c.double().sum()) for c in flat.split(1 << 22)) if flat.numel() else 0.0
            step = max(1, flat.numel() // 4096)
            sample = flat[::step].float().cpu().numpy().tobytes()
            h.update(f"{name}|{tuple(p.shape)}|{p.dtype}|{total.hex()}|".encode())
            h.update(sample)
    return h.hexdigest()


def _as_json(value):
    return json.loads(json.dumps(value, default=str))


# -- one run per partial folder ------------------------------------------------------------------

_held: dict[str, list] = {}        # resolved folder -> [open lock file descriptor, claims]


def claim(folder: Path, *, clear: bool = False) -> None:
    """Take the lock on `folder` (made if absent) for this process; re-entrant.

    clear (--force): remove whatever an earlier, finished or dead, run left in it. Raises
    ProbeError when another process holds the lock."""
    folder = Path(folder)
    key = str(folder.resolve())
    if key not in _held:
        _held[key] = [_lock(folder), 0]
    _held[key][1] += 1
    if clear:
        _clear(folder)


def release(folder: Path, *, discard: bool = False) -> None:
    """Undo one claim. discard: the run is complete, remove what it saved now. The last claim
    closes the lock, after removing the folder if it holds nothing worth resuming."""
    folder = Path(folder)
    key = str(folder.resolve())
    if key not in _held:
        return
    if discard:
        _clear(folder)
    _held[key][1] -= 1
    if _held[key][1] > 0:
        return
    fd, _ = _held.pop(key)
    if not holds_state(folder):
        shutil.rmtree(folder, ignore_errors=True)
    os.close(fd)


def refuse_waiting_run(folder: Path, resume: bool) -> None:
    """A run that is not --resume must not start over state an interrupted one saved."""
    if not resume and holds_state(folder):
        raise ProbeError(f"an interrupted run is waiting in {folder}; pass {flag('resume', True)} to continue it "
                         f"or {flag('force', True) if on_command_line() else f'delete {folder}'} to start again")


def _clear(folder: Path) -> None:
    """Everything in a folder we hold the lock of, but the lock."""
    for entry in folder.iterdir():
        if entry.name != LOCK:
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)


def holds_state(folder: Path) -> bool:
    """Whether a run saved anything worth resuming in `folder`."""
    return Path(folder).is_dir() and any(p.name == PROGRESS or p.name.startswith("state-rank")
                                         for p in Path(folder).iterdir())


def _lock(folder: Path) -> int:
    import fcntl
    import tempfile

    for _ in range(5):
        if folder.exists() and not folder.is_dir():
            raise ProbeError(f"{folder} is a file, not a partial run folder; remove it or choose "
                             "another --out")
        if folder.is_dir():
            fd = _open_lock(folder / LOCK)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ProbeError(f"another probe run{_owner(folder)} is writing {folder}; wait for it "
                                 "to finish or choose another --out") from None
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
                             "choose another --out") from None
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
                         "choose another --out") from None


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _owner(folder: Path) -> str:
    try:
        pid = int((folder / LOCK).read_text().strip())
    except (OSError, ValueError):
        return ""
    return f" (process {pid})"


# -- reducer state -------------------------------------------------------------------------------

def _walk(reducer, out: list) -> list:
    out.append(reducer)
    for child in reducer.children().values():
        _walk(child, out)
    return out


def _all_reducers(cap) -> list:
    found = []
    for r in cap.reducers():
        _walk(r, found)
    return found


def snapshot(cap) -> list[dict]:
    """Every reducer's state, on the CPU, in a fixed order."""
    return [{**{n: t.detach().cpu().clone() for n, t in r.state_tensors().items()},
             **{n: list(getattr(r, n)) for n in r.gathered}} for r in _all_reducers(cap)]


def restore(cap, state: list[dict], where: Path | str = "the saved partial state") -> None:
    """Load saved state into cap's reducers, after checking that every tensor fits."""
    reducers = _all_reducers(cap)
    misfit = f"{where} does not fit this model; {START_AGAIN}"
    if not isinstance(state, list) or len(reducers) != len(state):
        raise ProbeError(misfit)
    for r, saved in zip(reducers, state):
        tensors, gathered = r.state_tensors(), set(r.gathered)
        if not isinstance(saved, dict) or set(saved) != set(tensors) | gathered:
            raise ProbeError(misfit)
        for name, now in tensors.items():
            value = saved[name]
            if not isinstance(value, torch.Tensor) or value.shape != now.shape or value.dtype != now.dtype:
                raise ProbeError(misfit)
        if any(not isinstance(saved[name], list) for name in gathered):
            raise ProbeError(misfit)
    for r, saved in zip(reducers, state):
        device = r.device
        for name, value in saved.items():
            setattr(r, name, value.to(device) if isinstance(value, torch.Tensor) else list(value))


def state_digest(batches_done, reducers) -> str | None:
    """SHA-256 of the batch count and every saved value: a state file whose count or numbers were
    changed after saving (so that a resumed run would count some batches twice, or none) fails it."""
    h = hashlib.sha256(f"{batches_done!r}|".encode())
    try:
        for saved in reducers:
            for name in sorted(saved):
                value = saved[name]
                h.update(f"{name}|".encode())
                h.update(value.numpy().tobytes() if isinstance(value, torch.Tensor) else repr(value).encode())
    except (TypeError, AttributeError, RuntimeError):
        return None                     # not the shape of a saved state: restore() says so
    return h.hexdigest()


def batches_for(rank: int, world: int, sequences: int, batch_size: int) -> int:
    """How many batches process `rank` of `world` runs (data.Dataset.batches)."""
    total = -(-sequences // batch_size) if batch_size > 0 else 0
    return len(range(rank, total, world))


class PassCheckpoint:
    """Saves reducer state into a partial run folder every `every_seconds` (0: every batch).

    Used as a context manager around the pass: when the pass fails before anything was saved,
    the folder it made is removed again, so that the next command does not find a run to resume."""

    def __init__(self, folder: Path, fingerprint: dict, *, rank: int = 0, every_seconds: float = 30.0,
                 resume_hint: str = ""):
        self.folder, self.fingerprint, self.rank = Path(folder), _as_json(fingerprint), rank
        self.every_seconds = every_seconds
        self.resume_hint = resume_hint
        self._last = time.monotonic()
        self._claimed = False

    @property
    def state_file(self) -> Path:
        return self.folder / f"state-rank{self.rank}.pt"

    @property
    def total_batches(self) -> int:
        fp = self.fingerprint
        return batches_for(self.rank, int(fp.get("world") or 1), int(fp["sequences"]),
                           int(fp.get("batch_size") or 0))

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is not None and self._claimed:
            self._claimed = False
            release(self.folder)

    def start(self, cap, resume: bool) -> int:
        """Prepare the folder; with resume, load saved state into cap. Returns batches done."""
        from .distributed import barrier

        # Under torchrun only rank 0 looks, and every rank waits for it: otherwise rank 1 would
        # find the folder that rank 0 has just made and refuse.
        if self.rank == 0:
            claim(self.folder)
            self._claimed = True
            refuse_waiting_run(self.folder, resume)
        barrier()
        if resume and (self.folder / PROGRESS).exists() and self.state_file.exists():
            return self._load(cap)
        if self.rank == 0:
            self._write(self.folder / "README.txt", lambda: write_text(
                self.folder / "README.txt",
                "This analysis was interrupted before it finished; nothing here is a result.\n"
                f"Continue it with the same command plus --resume:\n  {self.resume_hint}\n"))
        return 0

    def _load(self, cap) -> int:
        progress = _read_progress(self.folder / PROGRESS)
        try:
            with warnings.catch_warnings():      # torch's remarks on a foreign pickle: not a second line
                warnings.simplefilter("ignore")
                state = torch.load(self.state_file, weights_only=True)
        except Exception as err:        # truncated, garbage, or not a state file at all
            raise ProbeError(f"{self.state_file} is damaged ({_short(err)}); {START_AGAIN}") from None
        if progress.get("fingerprint") != self.fingerprint:
            raise ProbeError(f"{self.folder} was made with another model, weights, data or options; "
                             f"rerun the same command with {flag('resume', True)}, or {START_AGAIN}")
        if not isinstance(state, dict) or state.get("fingerprint") != self.fingerprint:
            raise ProbeError(f"{self.state_file} was not saved by this run (another model, weights, "
                             f"data or options); {START_AGAIN}")
        done, total, listed = state.get("batches_done"), self.total_batches, progress.get("batches_done")
        if type(done) is not int or not 0 <= done <= total:
            raise ProbeError(f"{self.state_file} says {done!r} batches are done but this data makes "
                             f"{total}; the saved state is damaged: {START_AGAIN}")
        # progress.json is written after the state, so it never lists more batches than it.
        if self.rank == 0 and (type(listed) is not int or not 0 <= listed <= done):
            raise ProbeError(f"{self.folder / PROGRESS} says {listed!r} batches are done but the "
                             f"saved state holds {done}; the folder was edited: {START_AGAIN}")
        if state.get("digest") != state_digest(done, state.get("reducers")):
            raise ProbeError(f"{self.state_file} does not match its own checksum: it was edited or is "
                             f"damaged; {START_AGAIN}")
        restore(cap, state.get("reducers"), self.state_file)
        return done

    def after_batch(self, cap, batches_done: int, *, force: bool = False) -> None:
        if not force and time.monotonic() - self._last < self.every_seconds:
            return
        reducers = snapshot(cap)
        state = {"batches_done": batches_done, "fingerprint": self.fingerprint, "reducers": reducers,
                 "digest": state_digest(batches_done, reducers)}
        self._write(self.state_file, lambda: write_torch(self.state_file, state))
        if self.rank == 0:
            progress = json.dumps({"batches_done": batches_done, "fingerprint": self.fingerprint},
                                  indent=2) + "\n"
            self._write(self.folder / PROGRESS, lambda: write_text(self.folder / PROGRESS, progress))
        self._last = time.monotonic()

    def _write(self, path: Path, write) -> None:
        try:
            write()
        except OSError as err:
            raise ProbeError(f"could not save the analysis state in {path} ({describe_os_error(err)}); "
                             "free space or choose another --out") from None

    def finish(self) -> None:
        if self.rank == 0 and self._claimed:
            self._claimed = False
            release(self.folder, discard=True)
        elif self.rank != 0:
            self.state_file.unlink(missing_ok=True)


def _read_progress(path: Path) -> dict:
    try:
        progress = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ProbeError(f"{path} is damaged ({_short(err)}); {START_AGAIN}") from None
    if not isinstance(progress, dict):
        raise ProbeError(f"{path} holds a JSON {type(progress).__name__}, not the object a run "
                         f"saves; {START_AGAIN}")
    return progress


def _short(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return (text[0][:160] if text else type(err).__name__)
