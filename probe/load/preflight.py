"""Checks that need only the command line, run before any weights load: a GGUF file is
dequantised in full before the model exists (32 s for a 135M model), so a device the machine
lacks should not wait for that. (probe.load.loader.layout_without_weights answers from the config
alone what `probe check` needs to know first: whether there is a gate.)
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..core.errors import ProbeError, flag


def check_device(device: str | None) -> None:
    """Refuse a device torch cannot use here, in one line (before the model loads)."""
    if not device or device == "cpu":
        return
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError):
        # torch's own message lists its twenty device types, most of which no user means.
        raise ProbeError(f"{flag('device', device)} is not a device torch knows; use cpu, cuda, cuda:1, "
                         "mps, ...") from None
    if where.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise ProbeError(f"{flag('device', device)}: torch ({torch.__version__}, {build}) finds no "
                             f"CUDA device on this machine; pass {flag('device', 'cpu')}")
        if where.index is not None and where.index >= torch.cuda.device_count():
            raise ProbeError(f"{flag('device', device)}: this machine has {torch.cuda.device_count()} "
                             f"CUDA device(s), numbered from 0")
    elif where.type == "meta":
        # Shapes without values: nothing can be measured (the pass would fail deep in torch).
        raise ProbeError(f"{flag('device', device)} holds no values to measure; pass "
                         f"{flag('device', 'cpu')} or cuda")
    elif where.type == "mps" and not torch.backends.mps.is_available():
        raise ProbeError(f"{flag('device', device)}: torch finds no MPS device on this machine; "
                         f"pass {flag('device', 'cpu')}")


def check_checkpoint(path) -> None:
    """The checks the load makes before it reads any weight (config.json, the weight files'
    headers and layer count; a GGUF file's header and architecture), for a command that loads
    several checkpoints one after another: probe compare names a broken second checkpoint
    before it analyses the first."""
    from . import gguf
    from .checkpoint_files import check_checkpoint_dir

    path = Path(path)
    file = gguf.gguf_file(path)
    if file is not None:
        gguf.check_architecture(gguf.read_info(file))
    else:
        check_checkpoint_dir(path)
