"""GGUF files (llama.cpp's format): find, check and describe them for `load.load`.

transformers reads GGUF itself (`from_pretrained(folder, gguf_file=name)`): it builds the config
and the tokenizer from the file's metadata and dequantises every tensor to the dtype asked for.
What is checked here, before transformers sees the file, is what would otherwise surface as a
traceback: the `gguf` package missing, a truncated or corrupt file, an architecture transformers
cannot map to a model class.
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ProbeError, first_line

SUFFIX = ".gguf"
BLOCK_NAME = re.compile(r"(?:^|\.)blk\.(\d+)\.")        # llama.cpp's name of layer N's tensors
INSTALL = "pip install 'gated-probe[gguf]' (or pip install gguf)"


@dataclass(frozen=True)
class GGUFInfo:
    file: Path
    architecture: str            # general.architecture, llama.cpp's name ("llama", "gemma3")
    quantization: str            # the file type llama.cpp wrote ("Q4_K_M"), or the commonest tensor type
    tensor_types: dict           # {"Q4_K": 27, "F32": 109, ...}: one file mixes several
    header_sha256: str           # of the metadata and tensor index (the file's "config")

    def meta(self, dtype: str) -> dict:
        """What meta.json records about the weights."""
        return {"format": "gguf", "file": self.file.name, "architecture": self.architecture,
                "quantization": self.quantization, "tensor_types": dict(self.tensor_types),
                "dequantized": True, "dequantized_to": dtype}


def gguf_file(path: Path) -> Path | None:
    """The GGUF file `path` names: the file itself, or the one .gguf in a folder without
    safetensors / .bin weights. None when `path` is an ordinary checkpoint folder."""
    if path.is_file():
        return path if path.suffix.lower() == SUFFIX else None
    if not path.is_dir():
        return None
    found = sorted(p for p in path.iterdir() if p.suffix.lower() == SUFFIX and p.is_file())
    if not found or any(path.glob("*.safetensors")) or any(path.glob("pytorch_model*.bin")):
        return None
    if len(found) > 1:
        raise ProbeError(f"{path} holds {len(found)} .gguf files ({found[0].name}, {found[1].name}"
                         f"{', ...' if len(found) > 2 else ''}); pass the one to analyse as the checkpoint")
    return found[0]


def require_package() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ProbeError(f"reading a GGUF file needs the gguf package: {INSTALL}")


def read_info(file: Path) -> GGUFInfo:
    """Parse the header and tensor index; refuse a file whose tensors run past its end."""
    require_package()
    from gguf import GGUFReader, LlamaFileType

    try:
        reader = GGUFReader(str(file))
        tensors = list(reader.tensors)
        size = file.stat().st_size
        # The reader memory-maps lazily: a tensor that ends past the file is a truncated download.
        end = max((int(t.data_offset) + int(t.n_bytes) for t in tensors), default=0)
        if end > size:
            raise ValueError(f"its tensors need {end} bytes, the file has {size}")
        if not tensors:
            raise ValueError("it holds no tensors")
        architecture = _field(reader, "general.architecture")
        blocks = reader.fields.get(f"{architecture}.block_count")
        claimed = int(blocks.parts[blocks.data[0]][0]) if blocks is not None else None
    except ProbeError:
        raise
    except Exception as err:  # GGUFReader raises ValueError / IndexError / KeyError on bad bytes
        raise ProbeError(f"{file} is not a readable GGUF file ({first_line(err)}): truncated or "
                         "corrupt; download it again") from None
    from .checkpoint_files import check_layer_count

    check_layer_count(claimed, [t.name for t in tensors], BLOCK_NAME, f"{file} says {architecture}.block_count")
    kinds = Counter(t.tensor_type.name for t in tensors)
    file_type = reader.fields.get("general.file_type")
    try:
        quant = LlamaFileType(int(file_type.parts[file_type.data[0]][0])).name.replace("MOSTLY_", "").replace("ALL_", "")
    except (AttributeError, ValueError, IndexError, TypeError):
        quant = kinds.most_common(1)[0][0]
    with file.open("rb") as f:                      # metadata + tensor index, not the weights
        header = hashlib.sha256(f.read(int(reader.data_offset))).hexdigest()[:16]
    return GGUFInfo(file, architecture, quant, dict(kinds.most_common()), header)


def check_architecture(info: GGUFInfo) -> None:
    """transformers maps a fixed list of llama.cpp architectures to its model classes."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    # transformers renames a few (qwen2moe -> qwen2_moe) before looking them up; accept both.
    names = {info.architecture, info.architecture.replace("moe", "_moe"), info.architecture.replace("-", "_")}
    if not names & set(GGUF_SUPPORTED_ARCHITECTURES):
        raise ProbeError(f"{info.file} holds a {info.architecture!r} model, which transformers cannot read "
                         f"from GGUF (it reads {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}); "
                         "convert it to a safetensors checkpoint directory")


def _field(reader, key: str) -> str:
    field = reader.fields[key]
    return bytes(field.parts[field.data[0]]).decode()
