"""Register probe's own model types with transformers' Auto classes once transformers is imported.

`import probe` must stay instant (no torch, no transformers: `probe --help` answers in 0.1 s), yet
after it `AutoModelForCausalLM.from_pretrained(DIR)` must read a folder `probe graft` wrote
(`model_type` grafted_llama). So: if transformers is already imported, register now; otherwise a
one-shot import hook registers right after transformers' own package has been imported.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

TARGET = "transformers"


def register_models() -> None:
    from . import grafted_llama

    grafted_llama.register()


class _AfterTransformers(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it wraps the loader of the `transformers` package so that probe's
    classes are registered as soon as that package has run, then removes itself."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)          # the finders after this one
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            register_models()

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    if TARGET in sys.modules:
        register_models()
    elif not any(isinstance(f, _AfterTransformers) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTransformers())
