"""Whether a checkpoint path names anything on disk, checked without torch or transformers, so
that a mistyped path is answered at once and not after the model stack has imported (seconds).
probe/load/checkpoint_files.py checks what an existing path holds."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import ProbeError

# What a local file's name ends with; a Hub model's name may hold dots ("Qwen3-0.6B", "Llama-3.1-8B").
FILE_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth", ".json", ".txt", ".npy", ".jsonl")


def looks_like_hub_id(path: Path) -> bool:
    """"org/model" as the Hub spells ids: two parts, relative, not ending like a file (.gguf)."""
    text = str(path)
    return (len(path.parts) == 2 and not path.is_absolute() and not text.startswith(".")
            and path.suffix.lower() not in FILE_SUFFIXES
            and all(part.replace("-", "").replace("_", "").replace(".", "").isalnum() for part in path.parts))


def check_exists(path: Path) -> None:
    """One line for a checkpoint path that does not exist (a Hub id gets a word on downloading)."""
    if path.exists():
        return
    hub = (f"; probe never downloads: to analyse the Hub model {path} fetch it first (e.g. "
           f"`hf download {path} --local-dir {path.name}`) and pass that folder"
           if looks_like_hub_id(path) else "")
    raise ProbeError(f"checkpoint {path} does not exist; pass a local checkpoint directory "
                     f"(config.json + *.safetensors) or a .gguf file{hub}")
