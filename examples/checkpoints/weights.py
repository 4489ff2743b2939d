"""Put the three demo arms' weights (model.safetensors) in place; they are not kept in git.

Each arm's weights are named by their SHA-256 in weights.sha256 beside this script. For every
arm whose model.safetensors is missing (or differs), the file is copied from the cache
(`$PROBE_ARMS_CACHE`, default ~/.cache/probe-arms, one <sha256>.safetensors per arm); when the
cache lacks it, the arms are trained again with the recipe that made them (about 20 minutes on
2 cores, once) and the result is cached. Retrained weights need not have the recorded bits (a
retrain here with torch 2.13.0 did not: README.md): they are used with a warning, since the
demo's numbers in the docs were made with the recorded ones.

    python examples/checkpoints/weights.py          # make demo and make test run it first
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The command that made the shipped arms (README.md here: recipe F, seed 0).
RECIPE = ["train", "--arm", "all", "--tokens", "3M", "--seed", "0", "--threads", "1", "--quiet"]


def cache_dir() -> Path:
    return Path(os.environ.get("PROBE_ARMS_CACHE", Path.home() / ".cache" / "probe-arms"))


def recorded() -> dict[str, str]:
    """arm folder -> SHA-256 of its model.safetensors, from weights.sha256."""
    out = {}
    for line in (HERE / "weights.sha256").read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            out[name.split("/")[0]] = digest
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _place(source: Path, target: Path) -> None:
    tmp = target.with_suffix(".tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)                       # atomic: never half a weights file


def ensure() -> None:
    wanted = recorded()
    missing = {arm: d for arm, d in wanted.items()
               if not (HERE / arm / "model.safetensors").is_file() or sha256(HERE / arm / "model.safetensors") != d}
    cache = cache_dir()
    for arm, digest in list(missing.items()):
        cached = cache / f"{digest}.safetensors"
        if cached.is_file() and sha256(cached) == digest:
            _place(cached, HERE / arm / "model.safetensors")
            del missing[arm]
    if not missing:
        return
    out = cache / "trained"
    print(f"weights: {', '.join(missing)} not in {cache}; training the demo arms once (about 20 minutes "
          "on 2 cores)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "probe", *RECIPE, "--out", str(out), "--force"], check=True)
    for arm, digest in missing.items():
        trained = out / arm / "model.safetensors"
        got = sha256(trained)
        if got != digest:
            print(f"weights: warning: {arm} trained to other bits than the recorded ones; the docs' demo "
                  "numbers were made with the recorded weights", file=sys.stderr)
        shutil.copyfile(trained, cache / f"{got}.safetensors")
        _place(trained, HERE / arm / "model.safetensors")


if __name__ == "__main__":
    ensure()
