"""What `probe.analyze` checks and restores around a caller's model object.

- Its arguments: a model that is neither a path nor a model, or a tokenizer that is neither a
  folder nor a tokenizer, is one ProbeError naming the argument (not an AttributeError from deep
  inside).
- One pass per model at a time: the capture hooks and the attention back-end are installed on
  the model itself, so two threads analysing the same model object would mix their batches (a
  shape error in a matmul, or silently wrong numbers); a second concurrent pass is refused.
- The caller's state as it was: the pass puts the model in eval mode and seeds torch's global
  RNG, and libraries change warnings filters while loading; every module's train/eval mode,
  the CPU and CUDA RNG states and the warnings filters are restored when the call returns.
"""
from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch

from ..core.errors import ProbeError

_busy: set[int] = set()                 # id() of the model objects a pass runs on now
_busy_lock = threading.Lock()


def check_model_argument(model) -> None:
    from torch import nn

    from ..load.loader import LoadedModel

    # A TransformerLens bridge is an nn.Module: whether the model is one is asked once per
    # analysis, where the source is chosen (probe/run/source.py source_for), not here.
    if isinstance(model, (str, Path, LoadedModel, nn.Module)):
        return
    raise ProbeError(f"model={_short(model)} is of type {type(model).__name__}; pass a checkpoint directory (a path), "
                     "a Hugging Face causal LM, a probe.load(...) result or a TransformerLens bridge")


def check_tokenizer_argument(tokenizer) -> None:
    if tokenizer is None or isinstance(tokenizer, (str, Path)):
        return
    if not callable(tokenizer) or not hasattr(tokenizer, "convert_ids_to_tokens"):
        raise ProbeError(f"tokenizer={_short(tokenizer)} is of type {type(tokenizer).__name__}, not a tokenizer; pass a "
                         "folder of tokenizer files or a Hugging Face tokenizer object")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:36] + "..."


def _module(model):
    """The nn.Module a pass installs its hooks on (None for a path: each call loads its own)."""
    from ..load.loader import LoadedModel

    if isinstance(model, LoadedModel):
        return model.model
    return model if isinstance(model, torch.nn.Module) else None


@contextmanager
def one_pass_at_a_time(model):
    module = _module(model)
    if module is None:
        yield
        return
    with _busy_lock:
        if id(module) in _busy:
            raise ProbeError("this model is being analysed by another call right now (another thread); "
                             "probe's hooks sit on the model, so one pass runs on it at a time: wait for "
                             "that call, or analyse a copy (copy.deepcopy(model))")
        _busy.add(id(module))
    try:
        yield
    finally:
        with _busy_lock:
            _busy.discard(id(module))


@contextmanager
def as_the_caller_left_it(model):
    """Restore the model's train/eval modes, torch's RNG states and the warnings filters."""
    module = _module(model)
    modes = [(m, m.training) for m in module.modules()] if module is not None else []
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=cuda), warnings.catch_warnings():
            yield
    finally:
        for m, training in modes:
            m.training = training
