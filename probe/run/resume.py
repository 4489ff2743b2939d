"""Resumable analysis passes: reducer state saved between batches, continued with --resume.

An interrupted `probe analyze --out RUN` (Ctrl-C, kill, a crash) leaves `RUN.partial/`: a
README saying how to continue, `progress.json` (batches done, and a fingerprint of the model,
its weights, the tokens and the options) and `state-rank{r}.pt` (every reducer's state after
the last saved batch, with the same fingerprint and batch count). State is saved only between
batches, when every reducer has seen whole batches; the pass then continues with the next
batch, so a resumed run adds the same numbers in the same order as an uninterrupted one and
gives identical tables. Each file is written to a temporary and renamed into place, so an
interruption while saving leaves the previous state whole.

While a run uses `RUN.partial/` it holds an exclusive lock on `RUN.partial/lock`
(partial_lock.py): a second run on the same --out is refused while the first one runs.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
import warnings
from pathlib import Path

import torch

from ..core.atomic import describe_os_error, write_text, write_torch
from ..core.errors import ProbeError, flag, on_command_line
from .partial_lock import (LOCK, PROGRESS, another_folder, claim, holds_pass_state, holds_state,  # noqa: F401  (the CLI's)
                           refuse_waiting_run, release)
from ..metrics.reducers import flatten

def start_again() -> str:
    """How to throw the saved state away, in the user's terms."""
    return "pass --force to start again" if on_command_line() else f"delete the {flag('partial')} folder to start again"


def partial_dir(out: Path) -> Path:
    from ..core.owned import check_out_name

    check_out_name(out)             # `--out .` has no name to put .partial after
    return Path(out).with_name(Path(out).name + ".partial")


# -- what must be the same to continue ---------------------------------------------------------

def fingerprint(loaded, dataset, **options) -> dict:
    """What must be the same for saved state to be continued: model, weights, tokens, options."""
    return {"checkpoint": loaded.path, "config_hash": loaded.config_hash,
            "weights": weights_identity(loaded),
            "tokens_sha256": dataset.digest(), "sequences": len(dataset.sequences),
            **{k: v for k, v in options.items()}}


def differences(saved, now: dict) -> str:
    """" (what differs: batch_size 4 then, 2 now; weights)": the fingerprint entries a saved state
    and this command disagree on, with the values where they are short; "" where none can be
    named (an unreadable saved fingerprint)."""
    if not isinstance(saved, dict):
        return ""
    named = []
    for key in sorted(set(saved) | set(now)):
        before, after = saved.get(key), now.get(key)
        if before == after:
            continue
        shown = f"{key} {before!r} then, {after!r} now"
        named.append(shown if len(shown) <= 80 and not isinstance(before, dict) else key)
    return f" (what differs: {'; '.join(named)})" if named else ""


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


# -- reducer state -------------------------------------------------------------------------------

def _all_reducers(cap) -> list:
    return flatten(cap.reducers())


def snapshot(cap) -> list[dict]:
    """Every reducer's state, on the CPU, in a fixed order."""
    return [{**{n: t.detach().cpu().clone() for n, t in r.state_tensors().items()},
             **{n: list(getattr(r, n)) for n in r.gathered}} for r in _all_reducers(cap)]


def restore(cap, state: list[dict], where: Path | str = "the saved partial state") -> None:
    """Load saved state into cap's reducers, after checking that every tensor fits."""
    reducers = _all_reducers(cap)
    misfit = f"{where} does not fit this model; {start_again()}"
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
            # Only a pass's state: in a sweep's folder the lengths done before are saved by design.
            refuse_waiting_run(self.folder, resume, pass_only=True)
        barrier()
        if resume and (self.folder / PROGRESS).exists() and self.state_file.exists():
            done = self._load(cap)
            if self.rank == 0:
                # Say where the pass picks up: a resumed run should not look like a fresh one.
                print(f"probe: resuming {self.folder}: {done} of {self.total_batches} batches were "
                      f"done, continuing with batch {done + 1}", file=sys.stderr)
            return done
        if resume and self.rank == 0 and holds_pass_state(self.folder):
            # progress.json without the state it describes (or the reverse): nothing to continue.
            missing = self.state_file.name if not self.state_file.exists() else PROGRESS
            print(f"probe: {self.folder} has no {missing}, so there is no saved state to continue; "
                  f"{flag('resume', True)} starts from the beginning", file=sys.stderr)
        # A sweep's folder has its own README (probe/api/sweep_saved.py), which says more.
        if self.rank == 0 and not (self.folder / "README.txt").exists():
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
            raise ProbeError(f"{self.state_file} is damaged ({_short(err)}); {start_again()}") from None
        if progress.get("fingerprint") != self.fingerprint:
            raise ProbeError(f"{self.folder} was made with another model, weights, data or options"
                             f"{differences(progress.get('fingerprint'), self.fingerprint)}; rerun the same "
                             f"command with {flag('resume', True)}, or {start_again()}")
        if not isinstance(state, dict) or state.get("fingerprint") != self.fingerprint:
            raise ProbeError(f"{self.state_file} was not saved by this run (another model, weights, "
                             f"data or options); {start_again()}")
        done, total, listed = state.get("batches_done"), self.total_batches, progress.get("batches_done")
        if type(done) is not int or not 0 <= done <= total:
            raise ProbeError(f"{self.state_file} says {done!r} batches are done but this data makes "
                             f"{total}; the saved state is damaged: {start_again()}")
        # progress.json is written after the state, so it never lists more batches than it.
        if self.rank == 0 and (type(listed) is not int or not 0 <= listed <= done):
            raise ProbeError(f"{self.folder / PROGRESS} says {listed!r} batches are done but the "
                             f"saved state holds {done}; the folder was edited: {start_again()}")
        if state.get("digest") != state_digest(done, state.get("reducers")):
            raise ProbeError(f"{self.state_file} does not match its own checksum: it was edited or is "
                             f"damaged; {start_again()}")
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
                             f"free space or choose {another_folder()}") from None

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
        raise ProbeError(f"{path} is damaged ({_short(err)}); {start_again()}") from None
    if not isinstance(progress, dict):
        raise ProbeError(f"{path} holds a JSON {type(progress).__name__}, not the object a run "
                         f"saves; {start_again()}")
    return progress


def _short(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return (text[0][:160] if text else type(err).__name__)
