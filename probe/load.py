"""Load a local Hugging Face checkpoint directory, offline, and describe it for probe.

Every way a checkpoint can be broken is checked here, before transformers sees it, so that
the user gets one line that says what is wrong instead of a traceback.
"""
from __future__ import annotations

import hashlib
import json
import warnings
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .adapters import ModelLayout, discover_layout, official_gate
from .adapters.families import registered
from .adapters.unregistered import ungated_note
from . import gguf
from .errors import ProbeError, first_line
from .gates import GateSpec

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    model: nn.Module
    layout: ModelLayout
    tokenizer: object | None
    path: str | None
    config_hash: str | None
    weights: dict | None = None      # how the weights were stored, when not plain (GGUF: gguf.GGUFInfo.meta)

    @property
    def config(self):
        return self.model.config

    @property
    def name(self) -> str | None:
        """The run's default name: the folder's, or the GGUF file's without its suffix."""
        if not self.path:
            return None
        path = Path(self.path)
        return path.stem if path.suffix.lower() == ".gguf" else path.name


def text_config(config):
    """Multimodal wrappers (Qwen3.5) keep the language model's settings in text_config."""
    return getattr(config, "text_config", None) or config


def config_hash(path: Path) -> str:
    return hashlib.sha256((path / "config.json").read_bytes()).hexdigest()[:16]


def check_checkpoint_dir(path: Path) -> dict:
    """Fail early, in one line, on a path that is not a usable checkpoint. Returns config.json."""
    if not path.exists():
        raise ProbeError(f"checkpoint {path} does not exist; pass a local checkpoint directory "
                         "(config.json + *.safetensors) or a .gguf file")
    if not path.is_dir():
        raise ProbeError(f"checkpoint {path} is a file; pass the directory that holds config.json, "
                         "or a .gguf file")
    config_file = path / "config.json"
    if not config_file.exists():
        raise ProbeError(f"{path} has no config.json; is it a Hugging Face checkpoint directory?")
    try:
        config = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ProbeError(f"{config_file} is not valid JSON ({err}); the checkpoint is corrupt") from None
    weights = sorted(path.glob("*.safetensors")) + sorted(path.glob("pytorch_model*.bin"))
    if not weights:
        raise ProbeError(f"{path} holds no weights (*.safetensors, pytorch_model.bin or one .gguf file)")
    for file in path.glob("*.safetensors"):
        check_safetensors(file)
    check_shard_index(path)
    return config


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


def check_safetensors(file: Path) -> None:
    """Read the header and check that every tensor's bytes are present (catches truncation)."""
    from safetensors import safe_open

    try:
        header_len = int.from_bytes(file.open("rb").read(8), "little")
        header = json.loads(file.open("rb").read(8 + header_len)[8:])
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        if file.stat().st_size < 8 + header_len + end:
            raise ValueError("file is shorter than its header says")
        with safe_open(str(file), framework="pt"):
            pass
    except Exception as err:  # any failure here means the file cannot be used
        raise ProbeError(f"{file} is truncated or corrupt ({err}); re-download or re-save it") from None


def has_tokenizer_files(path: Path) -> bool:
    return any((path / name).exists() for name in TOKENIZER_FILES)


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    if not has_tokenizer_files(path):
        return None
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as err:
        raise ProbeError(f"cannot load the tokenizer in {path} ({first_line(err)}); pass --tokenizer DIR") from None


def resolve_gate(config, model_type: str, gate: GateSpec | str | None) -> tuple[str, GateSpec | None]:
    """The family name and gate spec for a config; a user-declared gate wins. An architecture
    outside the registry is "unregistered" (describe decides from its layout)."""
    if isinstance(gate, str):
        gate = None if gate == "none" else GateSpec.parse(gate)
        return "declared", gate
    if gate is not None:
        return "declared", gate
    family = registered(model_type)
    if family is None:
        return UNREGISTERED, None
    return family.name, family.gate(config)


UNREGISTERED = "unregistered"


def describe(model: nn.Module, gate: GateSpec | str | None = None, *, user_declared: bool = False) -> ModelLayout:
    """Find the hookable parts of an already-built model."""
    config = text_config(model.config)
    model_type = getattr(model.config, "model_type", "?")
    if user_declared or gate is not None:
        family, spec = resolve_gate(config, model_type, gate if gate is not None else "none")
    else:
        family, spec = resolve_gate(config, model_type, None)
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head")
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd")
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer")
    layout = discover_layout(model, family=family, model_type=model_type, num_layers=layers,
                             num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, gate=spec)
    if family == UNREGISTERED:
        layout.note = ungated_note(model, model_type, [p.mixer for p in layout.layers if p.layer_type == "attention"],
                                   num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim)
        warnings.warn(layout.note)
    return layout


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


def _supports_sdpa(config) -> bool:
    from transformers import AutoModelForCausalLM

    try:
        cls = AutoModelForCausalLM._model_mapping[type(config)]
    except KeyError:
        return True
    return bool(getattr(cls, "_supports_sdpa", True))


def load(path: str | Path, *, dtype: str = "float32", device: str = "cpu",
         device_map: str | None = None, gate: GateSpec | str | None = None,
         tokenizer: str | Path | None = None) -> LoadedModel:
    """Load a checkpoint directory or a GGUF file for analysis (eval mode, no gradients needed)."""
    from transformers import AutoConfig

    path = Path(path)
    if dtype not in DTYPES:
        raise ProbeError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    file = gguf.gguf_file(path)
    if file is not None:
        return load_gguf(file, dtype=dtype, device=device, device_map=device_map, gate=gate, tokenizer=tokenizer)
    raw = check_checkpoint_dir(path)
    model_type = raw.get("model_type")
    if not model_type:
        raise ProbeError(f"{path}/config.json has no model_type; probe cannot tell the architecture")
    try:
        config = AutoConfig.from_pretrained(str(path))
    except Exception as err:
        raise ProbeError(f"transformers cannot read {path}/config.json ({first_line(err)})") from None

    # The model class follows config.json; a declared gate only changes how probe reads the gate.
    # So is a qwen3 config with use_qk_norm false: stock Qwen3 would ignore the flag and
    # normalise q and k with freshly initialised weights.
    official = model_type == "qwen3" and (official_gate(config) is not None
                                          or not getattr(config, "use_qk_norm", True))
    model = from_pretrained(path, config, dtype=dtype, device_map=device_map, official=official)
    tok = load_tokenizer(Path(tokenizer) if tokenizer else path)
    return ready(model, path, config_hash(path), tok, device=device, device_map=device_map, gate=gate)


def load_gguf(file: Path, *, dtype: str, device: str, device_map: str | None,
              gate: GateSpec | str | None, tokenizer: str | Path | None) -> LoadedModel:
    """A GGUF file through transformers' own GGUF support: config and tokenizer from the file's
    metadata, every tensor dequantised to `dtype` (probe measures the dequantised model)."""
    from transformers import AutoConfig

    info = gguf.read_info(file)
    gguf.check_architecture(info)
    folder, name = str(file.parent), file.name
    quiet_transformers()
    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
    except Exception as err:
        raise ProbeError(f"transformers cannot read the metadata of {file} ({first_line(err)})") from None
    model = from_pretrained(file, config, dtype=dtype, device_map=device_map, gguf_file=name)
    if tokenizer:
        tok = load_tokenizer(Path(tokenizer))
    else:
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        except Exception as err:
            raise ProbeError(f"cannot read the tokenizer in {file} ({first_line(err)}); "
                             "pass --tokenizer DIR") from None
    loaded = ready(model, file, info.header_sha256, tok, device=device, device_map=device_map, gate=gate)
    loaded.weights = info.meta(dtype)
    return loaded


def quiet_transformers() -> None:
    """transformers warns about every unused key in the official config, and draws progress
    bars of its own while loading; probe prints its own."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def from_pretrained(source: Path, config, *, dtype: str, device_map: str | None, official: bool = False,
                    gguf_file: str | None = None) -> nn.Module:
    """The model's weights, with every failure as one line."""
    from transformers import AutoModelForCausalLM

    # The model's own attention outside probe's passes: SDPA, or eager for the families that
    # transformers has no SDPA path for (Gemma 2: logit soft-capping). probe's passes switch to
    # its own back-end either way.
    kwargs = dict(dtype=DTYPES[dtype], attn_implementation="sdpa" if _supports_sdpa(config) else "eager")
    if device_map:
        kwargs["device_map"] = device_map
    folder = str(source.parent if gguf_file else source)
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    quiet_transformers()
    try:
        if official:
            from .models.official_qwen3 import OfficialGatedQwen3ForCausalLM

            model, info = OfficialGatedQwen3ForCausalLM.from_pretrained(
                folder, config=config, output_loading_info=True, **kwargs)
        else:
            model, info = AutoModelForCausalLM.from_pretrained(
                folder, config=config, output_loading_info=True, **kwargs)
    except ProbeError:
        raise
    except Exception as err:
        raise ProbeError(f"cannot load the weights in {source}: {first_line(err)}") from None
    check_loading_info(source, info)
    return model


def ready(model: nn.Module, path: Path, digest: str, tok, *, device: str, device_map: str | None,
          gate: GateSpec | str | None) -> LoadedModel:
    """On its device, in eval mode, described."""
    if not device_map:
        try:
            model.to(device)
        except (RuntimeError, AssertionError) as err:
            raise ProbeError(f"cannot move the model to {device!r} ({err})") from None
    model.eval()
    layout = describe(model, gate, user_declared=gate is not None)
    return LoadedModel(model, layout, tok, str(path), digest)
