"""Resumable analysis passes: reducer state saved between batches, continued with --resume.

An interrupted `probe analyze --out RUN` (Ctrl-C, kill, a crash) leaves `RUN.partial/`: a
README saying how to continue, `progress.json` (batches done, and a fingerprint of the model,
tokens and options) and `state-rank{r}.pt` (every reducer's state after the last saved batch).
State is saved only between batches, when every reducer has seen whole batches; the pass then
continues with the next batch, so a resumed run adds the same numbers in the same order as an
uninterrupted one and gives identical tables.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import torch

from .atomic import write_text
from .errors import ProbeError


def partial_dir(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".partial")


def fingerprint(loaded, dataset, **options) -> dict:
    """What must be the same for saved state to be continued: model, tokens, options."""
    return {"checkpoint": loaded.path, "config_hash": loaded.config_hash,
            "tokens_sha256": dataset.digest(), "sequences": len(dataset.sequences),
            **{k: v for k, v in options.items()}}


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


def restore(cap, state: list[dict]) -> None:
    reducers = _all_reducers(cap)
    if len(reducers) != len(state):
        raise ProbeError("the saved partial state does not fit this model; start again with --force")
    for r, saved in zip(reducers, state):
        device = r.device
        for name, value in saved.items():
            setattr(r, name, value.to(device) if isinstance(value, torch.Tensor) else list(value))


class PassCheckpoint:
    """Saves reducer state into a partial run folder every `every_seconds` (0: every batch)."""

    def __init__(self, folder: Path, fingerprint: dict, *, rank: int = 0, every_seconds: float = 30.0,
                 resume_hint: str = ""):
        self.folder, self.fingerprint, self.rank = Path(folder), fingerprint, rank
        self.every_seconds = every_seconds
        self.resume_hint = resume_hint
        self._last = time.monotonic()

    @property
    def state_file(self) -> Path:
        return self.folder / f"state-rank{self.rank}.pt"

    def start(self, cap, resume: bool) -> int:
        """Prepare the folder; with resume, load saved state into cap. Returns batches done."""
        from .distributed import barrier

        progress = self.folder / "progress.json"
        # Under torchrun only rank 0 looks, and every rank waits for it: otherwise rank 1 would
        # find the folder that rank 0 has just made and refuse.
        if self.rank == 0 and self.folder.exists() and not resume:
            raise ProbeError(f"an interrupted run is waiting in {self.folder}; pass --resume to continue "
                             "it or --force to start again")
        barrier()
        if resume and progress.exists() and self.state_file.exists():
            saved = json.loads(progress.read_text())
            if saved.get("fingerprint") != json.loads(json.dumps(self.fingerprint, default=str)):
                raise ProbeError(f"{self.folder} was made with another model, data or options; "
                                 "rerun the same command with --resume, or pass --force to start again")
            state = torch.load(self.state_file, weights_only=False)
            restore(cap, state["reducers"])
            return int(state["batches_done"])
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.rank == 0:
            write_text(self.folder / "README.txt",
                       "This analysis was interrupted before it finished; nothing here is a result.\n"
                       f"Continue it with the same command plus --resume:\n  {self.resume_hint}\n")
        return 0

    def after_batch(self, cap, batches_done: int, *, force: bool = False) -> None:
        if not force and time.monotonic() - self._last < self.every_seconds:
            return
        tmp = self.state_file.with_suffix(".tmp")
        torch.save({"batches_done": batches_done, "reducers": snapshot(cap)}, tmp)
        os.replace(tmp, self.state_file)
        if self.rank == 0:
            write_text(self.folder / "progress.json",
                       json.dumps({"batches_done": batches_done, "fingerprint": self.fingerprint},
                                  indent=2, default=str) + "\n")
        self._last = time.monotonic()

    def finish(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
