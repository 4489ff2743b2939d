"""Load a local Hugging Face checkpoint directory, offline, and describe it for probe.

Every way a checkpoint can be broken is checked before transformers sees it (checkpoint_files),
so that the user gets one line that says what is wrong instead of a traceback. Which class
loads a checkpoint and how its layout reads are the family's (probe.families).
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import gguf, rope
from ..families.layout import ModelLayout
from ..families.registry import model_class
# describe, text_config and warn_if_gate_declared_away are imported from here by the rest of probe.
from ..families.describe import describe, warn_if_gate_declared_away  # noqa: F401
from ..families.registry import text_config
from .checkpoint_files import check_checkpoint_dir, check_loading_info, config_hash, shape_mismatch
# What a tokenizer folder must hold, checked before transformers reads it (the options check
# --tokenizer with it, so it sits where the checkpoint folder's own checks are).
from .checkpoint_files import TOKENIZER_FILES, check_tokenizer_dir, has_tokenizer_files  # noqa: F401
from ..core.errors import ProbeError, first_line, flag
from ..families.gates import GateSpec
from .preflight import check_device
from ..core.reprs import LoadedModelRepr
from ..core.options import DEVICE, DTYPE

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(repr=False)
class LoadedModel(LoadedModelRepr):                 # a one-screen repr (reprs.py)
    model: nn.Module
    layout: ModelLayout
    tokenizer: object | None
    path: str | None
    config_hash: str | None
    weights: dict | None = None      # how the weights were stored, when not plain (GGUF: gguf.GGUFInfo.meta)
    rope_scaling: dict | None = None  # the position scaling applied on load (rope.apply's record)

    @property
    def config(self):
        return self.model.config

    @property
    def name(self) -> str | None:
        """The run's default name: the folder's, or the GGUF file's without its suffix."""
        from .names import checkpoint_name

        return checkpoint_name(self.path)


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    if not has_tokenizer_files(path):
        return None
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as err:
        raise ProbeError(f"cannot load the tokenizer in {path} ({first_line(err)}); pass {flag('tokenizer', metavar='DIR')} "
                         "with a working one") from None


def _supports_sdpa(config) -> bool:
    from transformers import AutoModelForCausalLM

    try:
        cls = AutoModelForCausalLM._model_mapping[type(config)]
    except KeyError:
        return True
    return bool(getattr(cls, "_supports_sdpa", True))


@contextlib.contextmanager
def quiet_transformers():
    """transformers warns about every unused key in the official config, and draws progress
    bars of its own while loading; probe prints its own. Only while probe loads: the caller's
    verbosity and progress bars are restored after (a Python user's logging stays theirs)."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


@quiet_transformers()
def load(path: str | Path, *, dtype: str | None = None, device: str | None = None,
         device_map: str | None = None, gate: GateSpec | str | None = None,
         tokenizer: str | Path | None = None, rope_scaling=None) -> LoadedModel:
    """Load a checkpoint directory or a GGUF file for analysis (eval mode, no gradients needed).
    rope_scaling: a position scaling written into the config before the weights load (rope.py).
    dtype, device: None is the options' default (probe/core/options.py DTYPE, DEVICE)."""
    from transformers import AutoConfig

    path = Path(path)
    dtype, device = dtype or DTYPE, device or DEVICE
    if dtype not in DTYPES:
        raise ProbeError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    if not device_map:
        check_device(device)                   # before the weights (a GGUF file dequantises first)
    file = gguf.gguf_file(path)
    if file is not None:
        return load_gguf(file, dtype=dtype, device=device, device_map=device_map, gate=gate, tokenizer=tokenizer,
                         rope_scaling=rope_scaling)
    raw = check_checkpoint_dir(path)
    tokenizer_dir = check_tokenizer_dir(tokenizer)
    model_type = raw.get("model_type")
    if not model_type:
        raise ProbeError(f"{path}/config.json has no model_type; probe cannot tell the architecture")
    try:
        config = AutoConfig.from_pretrained(str(path))
    except Exception as err:
        raise ProbeError(f"transformers cannot read {path}/config.json ({first_line(err)})") from None
    scaled = rope.apply(text_config(config), rope_scaling, where=str(path)) if rope_scaling else None

    # The model class follows config.json (the family's adapter, e.g. the paper's official
    # checkpoints); a declared gate only changes how probe reads the gate.
    model = from_pretrained(path, config, dtype=dtype, device_map=device_map, cls=model_class(config))
    tok = load_tokenizer(tokenizer_dir or path)
    loaded = ready(model, path, config_hash(path), tok, device=device, device_map=device_map, gate=gate)
    loaded.rope_scaling = scaled
    return loaded


def load_gguf(file: Path, *, dtype: str, device: str, device_map: str | None,
              gate: GateSpec | str | None, tokenizer: str | Path | None, rope_scaling=None) -> LoadedModel:
    """A GGUF file through transformers' own GGUF support: config and tokenizer from the file's
    metadata, every tensor dequantised to `dtype` (probe measures the dequantised model)."""
    from transformers import AutoConfig

    info = gguf.read_info(file)
    gguf.check_architecture(info)
    folder, name = str(file.parent), file.name
    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
    except Exception as err:
        raise ProbeError(f"transformers cannot read the metadata of {file} ({first_line(err)})") from None
    scaled = rope.apply(text_config(config), rope_scaling, where=str(file)) if rope_scaling else None
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
                             f"pass {flag('tokenizer', metavar='DIR')}") from None
    loaded = ready(model, file, info.header_sha256, tok, device=device, device_map=device_map, gate=gate)
    loaded.weights = info.meta(dtype)
    loaded.rope_scaling = scaled
    return loaded


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


def from_pretrained(source: Path, config, *, dtype: str, device_map: str | None, cls=None,
                    gguf_file: str | None = None) -> nn.Module:
    """The model's weights, with every failure as one line. cls: the class that loads them
    (None: transformers' AutoModelForCausalLM)."""
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
    try:
        model, info = (cls or AutoModelForCausalLM).from_pretrained(
            folder, config=config, output_loading_info=True, **kwargs)
    except ProbeError:
        raise
    except Exception as err:
        # transformers' size-mismatch error points at a report it logs, which probe silences:
        # name the tensor and both shapes instead.
        mismatch = shape_mismatch(source, config, cls) if "size" in str(err) and not gguf_file else None
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


def layout_without_weights(path: str | Path, gate=None) -> ModelLayout | None:
    """The checkpoint's layout from an empty model built from its config on the meta device (no
    weights read, nothing dequantised), or None where that cannot be built; the real load then
    says what is wrong."""
    found = config_and_layout_without_weights(path, gate)
    return None if found is None else found[1]


def config_and_layout_without_weights(path: str | Path, gate=None):
    """(config, layout) of the checkpoint as layout_without_weights builds them, or None."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    file = gguf.gguf_file(path) if path.exists() else None
    try:
        with quiet_transformers():
            if file is not None:
                config = AutoConfig.from_pretrained(str(file.parent), gguf_file=file.name)
            elif (path / "config.json").is_file():
                config = AutoConfig.from_pretrained(str(path))
            else:
                return None
            cls = model_class(config)
            with torch.device("meta"):
                model = cls(config) if cls is not None else AutoModelForCausalLM.from_config(config)
            return config, describe(model, gate, user_declared=gate is not None)
    except Exception:       # a broken checkpoint: the real load refuses it in one line
        return None
