"""Load a local Hugging Face checkpoint directory, offline, and describe it for probe.

Every way a checkpoint can be broken is checked here, before transformers sees it, so that
the user gets one line that says what is wrong instead of a traceback.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import warnings
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import gguf
from .adapters import ModelLayout, discover_layout, official_gate
from .adapters.families import registered
from .adapters.unregistered import ungated_note
from .errors import ProbeError, first_line, flag
from .gates import GateSpec
from .reprs import LoadedModelRepr

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(repr=False)
class LoadedModel(LoadedModelRepr):                 # a one-screen repr (reprs.py)
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


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    if not has_tokenizer_files(path):
        return None
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as err:
        raise ProbeError(f"cannot load the tokenizer in {path} ({first_line(err)}); pass {flag('tokenizer', metavar='DIR')} "
                         "with a working one") from None


def shape_mismatch(path: Path, config, official: bool) -> str | None:
    """The first tensor whose shape in the files differs from the one config.json implies, in
    words; None when none differs (the failure was something else)."""
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            if official:
                from .models.official_qwen3 import OfficialGatedQwen3ForCausalLM

                model = OfficialGatedQwen3ForCausalLM(config)
            else:
                model = AutoModelForCausalLM.from_config(config)
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
    tokenizer_dir = check_tokenizer_dir(tokenizer)
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
    tok = load_tokenizer(tokenizer_dir or path)
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
    with no_gguf_progress_bar():
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


@contextlib.contextmanager
def no_gguf_progress_bar():
    """transformers draws a tqdm bar of its own while it dequantises GGUF tensors, one that
    disable_progress_bar() does not reach (and --quiet should): switch it off while loading."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        gguf_utils = None
    original = getattr(gguf_utils, "tqdm", None)
    if original is None:
        yield
        return
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


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
        # transformers' size-mismatch error points at a report it logs, which probe silences:
        # name the tensor and both shapes instead.
        mismatch = shape_mismatch(source, config, official) if "size" in str(err) and not gguf_file else None
        raise ProbeError(mismatch or f"cannot load the weights in {source}: {first_line(err)}") from None
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


def warn_if_gate_declared_away(model: nn.Module, layout: ModelLayout, gate) -> None:
    """--gate none (gate="none") on a checkpoint whose layout shows a gate: warn, since its gate
    scores, the mean-gate control and the gate interventions then go unmeasured. A gate shows
    through the registry (the architecture has one) or a q_proj wider than its heads (the
    gated layouts put the gate logits there: 2 x heads x head_dim, or heads more)."""
    if not (isinstance(gate, str) and gate.strip() == "none"):
        return
    from .adapters.families import BY_MODEL_TYPE

    family = BY_MODEL_TYPE.get(layout.model_type)
    spec = family.gate(text_config(model.config)) if family is not None else None
    if spec is not None:
        why = f"its architecture ({layout.model_type}) has a {spec.granularity} gate in {spec.module}"
    else:
        q = layout.num_heads * layout.head_dim
        widths = sorted({getattr(getattr(p.mixer, "q_proj", None), "out_features", q) for p in layout.layers
                         if p.layer_type == "attention"} & {2 * q, q + layout.num_heads})
        if not widths:
            return
        why = (f"q_proj gives {widths[0]} outputs for {layout.num_heads} heads of {layout.head_dim} "
               "(a gate in q_proj adds the extra ones)")
    warnings.warn(f"--gate none (gate='none') but this checkpoint shows a gate: {why}; gate scores, "
                  "the mean-gate control and gate interventions are not measured. Leave the option "
                  "out to measure the gate, or declare it with --gate MODULE:LAYOUT:GRANULARITY")
