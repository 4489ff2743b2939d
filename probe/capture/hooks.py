"""Forward hooks that exist only for one block, and a model run on probe's attention back-end for
one block: whatever happens inside, every hook is removed and the back-end restored on exit.
Shared by the interventions, the exact control pass and `probe check`."""
from __future__ import annotations

from contextlib import contextmanager

from torch import nn

from . import attention


@contextmanager
def installed(registrations):
    """Register hooks for the duration of the block; every one is removed on exit.

    registrations: iterable of (module, kind, fn) with kind "forward", "pre" or "pre_kwargs".
    """
    handles = []
    try:
        for module, kind, fn in registrations:
            if kind == "forward":
                handles.append(module.register_forward_hook(fn))
            elif kind == "pre":
                handles.append(module.register_forward_pre_hook(fn))
            elif kind == "pre_kwargs":
                handles.append(module.register_forward_pre_hook(fn, with_kwargs=True))
            else:
                raise ValueError(f"unknown hook kind {kind!r}")
        yield
    finally:
        for handle in handles:
            handle.remove()


def using_probe_attention(model: nn.Module, observer=None):
    """Run the model on probe's attention back-end (optionally with an observer), then restore
    (the observer sees this model's attention calls only: attention.observing)."""
    return attention.observing(model, observer)


def first_output(output):
    return output[0] if isinstance(output, (tuple, list)) else output


def replace_first(output, value):
    if isinstance(output, tuple):
        return (value, *output[1:])
    if isinstance(output, list):
        return [value, *output[1:]]
    return value
