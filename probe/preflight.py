"""Checks that need only the command line and the checkpoint's config, run before any weights
load: a GGUF file is dequantised in full before the model exists (32 s for a 135M model), so a
device the machine lacks, or a `probe check` with no gate to check, should not wait for that.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .errors import ProbeError, first_line, flag


def check_device(device: str | None) -> None:
    """Refuse a device torch cannot use here, in one line (before the model loads)."""
    if not device or device == "cpu":
        return
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ProbeError(f"{flag('device', device)} is not a device torch knows ({first_line(err)}); "
                         "use cpu, cuda, cuda:1, mps, ...") from None
    if where.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise ProbeError(f"{flag('device', device)}: torch ({torch.__version__}, {build}) finds no "
                             f"CUDA device on this machine; pass {flag('device', 'cpu')}")
        if where.index is not None and where.index >= torch.cuda.device_count():
            raise ProbeError(f"{flag('device', device)}: this machine has {torch.cuda.device_count()} "
                             f"CUDA device(s), numbered from 0")
    elif where.type == "mps" and not torch.backends.mps.is_available():
        raise ProbeError(f"{flag('device', device)}: torch finds no MPS device on this machine; "
                         f"pass {flag('device', 'cpu')}")


def layout_without_weights(path: str | Path, gate=None):
    """The checkpoint's layout from an empty model built from its config on the meta device (no
    weights read, nothing dequantised), or None where that cannot be built; the real load then
    says what is wrong."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from . import gguf
    from .adapters import describe, model_class
    from .load import quiet_transformers

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
            return describe(model, gate, user_declared=gate is not None)
    except Exception:       # a broken checkpoint: the real load refuses it in one line
        return None
