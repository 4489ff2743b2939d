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
import os
import sys
import types

__version__ = "0.1.0"

from .core.errors import ProbeError  # noqa: E402  (no dependencies)
from .families.autoregister import install as _install_model_types  # noqa: E402  (no dependencies)

# transformers reads probe's own model types (probe graft's grafted_llama) once it is imported.
_install_model_types()

# The report layer is probe.reports, kept in the repository's top-level folder reports/: an
# install maps it (pyproject's package-dir), a source checkout run with no install (cwd on
# sys.path: the examples, the tests) has no probe/reports/. Then this finder hands Python that
# folder for the one name probe.reports (its submodules are found through its __path__), first
# on sys.meta_path, so that a checkout's probe never takes another checkout's report layer.
_CHECKOUT_REPORTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reports")


class _CheckoutReports:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "probe.reports":
            return None
        import importlib.util      # here, not at import probe: it costs `probe --help` ~10 ms

        return importlib.util.spec_from_file_location(
            name, os.path.join(_CHECKOUT_REPORTS, "__init__.py"), submodule_search_locations=[_CHECKOUT_REPORTS])


if (not os.path.isdir(os.path.join(os.path.dirname(__file__), "reports"))
        and os.path.isfile(os.path.join(_CHECKOUT_REPORTS, "__init__.py"))):
    sys.meta_path.insert(0, _CheckoutReports)

_LAZY = {"GateSpec": "families.gates", "load": "load.loader", "Analysis": "results.analysis", "Capture": "capture.hf",
         "analyze": "api.analyze", "AnalysisOptions": "core.options", "summary_frame": "results.run_names",
         "shipped_checkpoints": "api.shipped"}

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
        # Less the modules this file imports for itself (os, sys, ...): they are not probe's names.
        own = {name for name, value in vars(self).items()
               if isinstance(value, types.ModuleType) and not value.__name__.startswith(__name__ + ".")}
        return sorted((set(super().__dir__()) | set(_LAZY)) - own)


sys.modules[__name__].__class__ = _Package
