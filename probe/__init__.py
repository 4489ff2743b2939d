"""probe: mechanistic analysis of gated attention.

    import probe
    analysis = probe.analyze("path/to/checkpoint", "data.txt")
    analysis.summary["f_attn"], analysis.first_token, analysis.save("runs/model")

The public names are imported on first use (PEP 562), so that `probe --help` and `probe
--version` answer without importing torch or transformers (0.1 s instead of 4.5 s).
"""
import sys
import types
from importlib import import_module

__version__ = "0.1.0"

from .errors import ProbeError  # noqa: E402  (no dependencies)

# name -> the module that defines it
_LAZY = {"GateSpec": ".gates", "load": ".load", "Analysis": ".results", "Capture": ".capture",
         "analyze": ".analyze"}

__all__ = ["Analysis", "Capture", "GateSpec", "ProbeError", "analyze", "load", "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value                   # once imported, a plain attribute
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """Importing the submodules probe.load and probe.analyze binds them as attributes of the
    package; `probe.load` and `probe.analyze` stay the functions of the same names, as they
    were when this file imported them eagerly."""

    def __setattr__(self, name, value):
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
