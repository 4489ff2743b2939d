"""A checkpoint's name and a run's name, from a path alone (no model library): the loader names
a LoadedModel with it, the sources, the interventions, a context sweep and the command line's run
folders name their runs with it (through probe/results/run_names.py, which re-exports both)."""
from __future__ import annotations

from pathlib import Path


def checkpoint_name(path) -> str | None:
    """A checkpoint's name: its folder's, or a GGUF file's without the suffix (None: no path)."""
    if not path:
        return None
    path = Path(str(path))
    return (path.stem if path.suffix.lower() == ".gguf" else path.name) or None


def run_name(given: str | None, path, fallback: str) -> str:
    """The name of a run: `given` (the name option), else the checkpoint's (checkpoint_name of
    `path`: a folder, a GGUF file, a hub id), else `fallback` (the model's class name)."""
    return given or checkpoint_name(path) or fallback
