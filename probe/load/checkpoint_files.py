"""What a checkpoint folder must hold, checked before transformers sees it.

Every way the files on disk can be broken (missing, truncated, corrupt, quantized, an
incomplete shard set, weights that config.json does not describe) is one line that says what is
wrong, instead of a traceback or a model with freshly initialised weights.
"""
from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path

import torch

from ..core.errors import ProbeError, first_line, flag
from .checkpoint_path import check_exists

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def config_hash(path: Path) -> str:
    return hashlib.sha256((path / "config.json").read_bytes()).hexdigest()[:16]


def check_checkpoint_dir(path: Path) -> dict:
    """Fail early, in one line, on a path that is not a usable checkpoint. Returns config.json."""
    check_exists(path)
    if not path.is_dir():
        raise ProbeError(f"checkpoint {path} is a file; pass the directory that holds config.json, "
                         "or a .gguf file")
    config_file = path / "config.json"
    if not config_file.exists():
        raise ProbeError(f"{path} has no config.json; is it a Hugging Face checkpoint directory?")
    try:
        config = json.loads(config_file.read_text())
    except OSError as err:
        raise ProbeError(f"cannot read {config_file} ({err.strerror or err}); check its permissions") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ProbeError(f"{config_file} is not valid JSON ({err}); the checkpoint is corrupt") from None
    if not isinstance(config, dict):
        raise ProbeError(f"{config_file} holds a JSON {type(config).__name__}, not an object of settings; "
                         "the checkpoint is corrupt: re-download it")
    weights = sorted(path.glob("*.safetensors")) + sorted(path.glob("pytorch_model*.bin"))
    if not weights:
        raise ProbeError(f"{path} holds no weights (*.safetensors, pytorch_model.bin or one .gguf file)")
    names = []
    for file in path.glob("*.safetensors"):
        check_safetensors(file)
        names += [k for k in safetensors_header(file)[0] if k != "__metadata__"]
    check_shard_index(path)
    if names:
        settings = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
        check_layer_count(settings.get("num_hidden_layers"), names, LAYER_NAME,
                          f"{config_file} says num_hidden_layers")
    return config


LAYER_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def check_layer_count(claimed, names, pattern: re.Pattern, says: str) -> None:
    """A layer count the weights do not hold is refused before a model is built for it (a
    config.json claiming 100,000 layers beside the weights of 4 would build 100,000 first).
    `names`: the weights' tensor names; `pattern` finds a layer index in one."""
    found = {int(m.group(1)) for m in map(pattern.search, names) if m}
    if not found or isinstance(claimed, bool) or not isinstance(claimed, int):
        return
    if claimed > max(found) + 1:
        raise ProbeError(f"{says} {claimed}, but the weights hold {max(found) + 1} layers (0 to {max(found)}); "
                         "the checkpoint's settings do not describe its weights: fix them or re-download it")


def check_shard_index(path: Path) -> None:
    """A sharded checkpoint names its shards in an index: all of them must be there."""
    for index in path.glob("*.index.json"):
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, AttributeError) as err:
            raise ProbeError(f"{index} is not a valid shard index ({err}); re-download it") from None
        missing = sorted(name for name in shards if not (path / name).exists())
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise ProbeError(f"{path} is missing {missing[0]}{more}, listed in {index.name}; "
                             "the download is incomplete: re-download the checkpoint")


# Weights probe measures; an integer or bool tensor named *.weight would be cast to float by
# transformers and measured as if it were the model (M-Act of 1e11 from int32 codes). Buffers
# such as GPT-2's bool `attn.bias` mask are not weights and may be integer.
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}


def safetensors_header(file: Path) -> tuple[dict, int]:
    """The JSON header of a safetensors file (tensor name -> dtype, shape, data_offsets) and
    its length in bytes."""
    try:
        with file.open("rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            raw = f.read(min(header_len, file.stat().st_size))
    except OSError as err:
        raise ProbeError(f"cannot read {file} ({err.strerror or err}); check its permissions") from None
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        return header, header_len
    except Exception as err:
        raise ProbeError(f"{file} is truncated or corrupt ({err}); re-download or re-save it") from None


def check_safetensors(file: Path) -> None:
    """Read the header and check that every tensor's bytes are present (catches truncation)
    and that the weights are floating point."""
    from safetensors import safe_open

    header, header_len = safetensors_header(file)
    try:
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        end = max((v["data_offsets"][1] for v in tensors.values()), default=0)
        if file.stat().st_size < 8 + header_len + end:
            raise ValueError("file is shorter than its header says")
        with safe_open(str(file), framework="pt"):
            pass
    except Exception as err:  # any failure here means the file cannot be used
        raise ProbeError(f"{file} is truncated or corrupt ({err}); re-download or re-save it") from None
    for name, info in tensors.items():
        if name.endswith(".weight") and info.get("dtype") not in FLOAT_DTYPES:
            raise ProbeError(f"{file.name} stores {name} as {info.get('dtype')}, not floating point; probe "
                             "measures float weights (float32, bfloat16, float16): the checkpoint is "
                             "quantized or was saved wrongly")


def check_loading_info(path: Path, info: dict) -> None:
    """Weights the model needs but the checkpoint lacks would be freshly initialised, and every
    number measured on them meaningless: refuse. Weights the model does not use are dropped by
    transformers: say so, since they may be a gate or a norm that config.json does not declare."""
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ProbeError(f"{path} lacks weights the model needs ({missing[0]}{more}): config.json and the "
                         "weights do not match; re-download the checkpoint or fix config.json")
    unexpected = sorted(info.get("unexpected_keys") or ())
    if unexpected:
        more = f" and {len(unexpected) - 1} more" if len(unexpected) > 1 else ""
        warnings.warn(f"{path} holds weights this architecture does not use ({unexpected[0]}{more}); "
                      "they are ignored: check that config.json describes the checkpoint")


def shape_mismatch(path: Path, config, cls=None) -> str | None:
    """The first tensor whose shape in the files differs from the one config.json implies, in
    words; None when none differs (the failure was something else). cls: the class that loads
    the config (None: transformers' own)."""
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = cls(config) if cls is not None else AutoModelForCausalLM.from_config(config)
    except Exception as err:
        return f"{path}/config.json does not describe a model transformers can build ({first_line(err)})"
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    prefix = getattr(model, "base_model_prefix", "")
    for file in sorted(path.glob("*.safetensors")):
        header, _ = safetensors_header(file)
        for name, info in header.items():
            if name == "__metadata__":
                continue
            want = expected.get(name, expected.get(f"{prefix}.{name}"))
            got = tuple(info.get("shape", ()))
            if want is not None and got != want:
                return (f"{file.name} holds {name} with shape {list(got)}, but {path}/config.json implies "
                        f"{list(want)}: config.json does not describe these weights; fix its sizes "
                        "(hidden, heads, head_dim, vocab, gate flags) or re-download the checkpoint")
    return None


def has_tokenizer_files(path: Path) -> bool:
    return any((path / name).exists() for name in TOKENIZER_FILES)


def check_tokenizer_dir(tokenizer) -> Path | None:
    """A tokenizer folder the user named must hold a tokenizer: never fall back silently."""
    if tokenizer is None:
        return None
    folder = Path(tokenizer)
    if not folder.is_dir():
        state = "is a file" if folder.exists() else "does not exist"
        raise ProbeError(f"{flag('tokenizer', str(folder))} {state}; pass the folder that holds the tokenizer "
                         f"files ({', '.join(TOKENIZER_FILES)})")
    if not has_tokenizer_files(folder):
        raise ProbeError(f"{flag('tokenizer', str(folder))} holds no tokenizer files (one of "
                         f"{', '.join(TOKENIZER_FILES)}); pass the folder that holds them")
    return folder
