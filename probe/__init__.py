"""probe: mechanistic analysis of gated attention.

    import probe
    analysis = probe.analyze("path/to/checkpoint", "data.txt")
    analysis.summary["f_attn"], analysis.first_token, analysis.save("runs/model")

The public names are imported on first use (PEP 562), so that `probe --help` and `probe
--version` answer without importing torch or transformers (0.1 s instead of 4.5 s).

They are also what makes a Ctrl-C in those first seconds reach the command's own handler (one
line, no traceback).
"""
import importlib
import sys
import types

__version__ = "0.1.0"

from .errors import ProbeError  # noqa: E402  (no dependencies)
from .autoregister import install as _install_model_types  # noqa: E402  (no dependencies)

# transformers reads probe's own model types (probe graft's grafted_llama) once it is imported.
_install_model_types()

_LAZY = {"GateSpec": "gates", "load": "load", "Analysis": "results", "Capture": "capture",
         "analyze": "analyze", "AnalysisOptions": "options", "summary_frame": "run_names",
         "shipped_checkpoints": "shipped"}

__all__ = ["Analysis", "AnalysisOptions", "Capture", "GateSpec", "ProbeError", "analyze", "load",
           "shipped_checkpoints", "summary_frame", "__version__"]


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
