"""probe: mechanistic analysis of gated attention.

    import probe
    analysis = probe.analyze("path/to/checkpoint", "data.txt")
    analysis.summary["f_attn"], analysis.first_token, analysis.save("runs/model")
"""
__version__ = "0.1.0"

import importlib
import sys
import types

from .errors import ProbeError  # noqa: E402

# The public names, imported on first use: `import probe` (and so the `probe` command) does not
# load torch and transformers until something needs them, so a Ctrl-C in those first seconds
# reaches the command's own handler (one line, no traceback) and `probe --help` is quick.
_LAZY = {"GateSpec": "gates", "load": "load", "Analysis": "results", "Capture": "capture",
         "analyze": "analyze"}

__all__ = ["Analysis", "Capture", "GateSpec", "ProbeError", "analyze", "load", "__version__"]


class _Package(types.ModuleType):
    def __getattr__(self, name):
        if name in _LAZY:
            value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
            types.ModuleType.__setattr__(self, name, value)
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __setattr__(self, name, value):
        # Importing the submodule probe.analyze (or probe.load) would otherwise bind the module
        # over the function of the same name: probe.analyze is the function, as documented.
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        types.ModuleType.__setattr__(self, name, value)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_LAZY))


sys.modules[__name__].__class__ = _Package
