"""Where the three trained demo arms that ship with probe are (examples/checkpoints: none,
headwise, elementwise), wherever a notebook or script that uses them is opened from.

The arms, weights included (4.4 MB each, their SHA-256 in weights.sha256), live in the repository
beside the package: an editable install (`make`, `pip install -e .`) or a run from the source tree finds them next to the imported `probe`. A copy of
an example elsewhere therefore still finds them; `PROBE_CHECKPOINTS` points at another copy.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import ProbeError

ARMS = ("none", "headwise", "elementwise")
ENV = "PROBE_CHECKPOINTS"


def _holds_arms(folder: Path) -> bool:
    return all((folder / arm / "config.json").is_file() for arm in ARMS)


def _weights_missing(folder: Path) -> bool:
    # A clone without its large files (a sparse or filtered checkout) has configs but no weights.
    return any(not (folder / arm / "model.safetensors").is_file() for arm in ARMS)


def shipped_checkpoints() -> Path:
    """The folder that holds the shipped arms (each a checkpoint directory): $PROBE_CHECKPOINTS,
    else examples/checkpoints of the source tree the imported probe comes from, else
    examples/checkpoints or checkpoints under the current directory."""
    given = os.environ.get(ENV)
    if given:
        if not _holds_arms(Path(given)):
            raise ProbeError(f"{ENV}={given} does not hold the arms {', '.join(ARMS)} (each a folder "
                             "with config.json); point it at probe's examples/checkpoints")
        return Path(given)
    beside_package = Path(__file__).resolve().parents[2] / "examples" / "checkpoints"
    for folder in (beside_package, Path("examples/checkpoints"), Path("checkpoints")):
        if _holds_arms(folder):
            if _weights_missing(folder):
                raise ProbeError(f"the demo arms in {folder} have no model.safetensors; they are tracked in git: "
                                 f"restore them with git checkout -- {folder}")
            return folder
    raise ProbeError("the demo arms (examples/checkpoints) are not next to this probe install: "
                     "they ship in the repository, so install it from a clone (pip install -e .) or "
                     f"set {ENV} to a clone's examples/checkpoints")
