"""A default corpus that exists wherever Python runs: docstrings of the standard library.

Used when no --data is given, so `probe analyze CHECKPOINT` works out of the box. The module
list and order are fixed, so the text is the same on every machine with the same Python.
"""
from __future__ import annotations

import importlib
import inspect

MODULES = ("json", "collections", "functools", "itertools", "pathlib", "textwrap", "argparse",
           "logging", "re", "string", "typing", "dataclasses", "contextlib", "statistics",
           "fractions", "decimal", "heapq", "bisect", "csv", "shutil")


def sample_texts(max_chars: int = 200_000) -> list[str]:
    """One document per module: its docstring and those of its public members, in name order."""
    docs, size = [], 0
    for name in MODULES:
        module = importlib.import_module(name)
        parts = [inspect.getdoc(module) or ""]
        for attr in sorted(dir(module)):
            if attr.startswith("_"):
                continue
            doc = inspect.getdoc(getattr(module, attr, None))
            if doc and doc not in parts:
                parts.append(doc)
        text = "\n\n".join(p for p in parts if p)
        docs.append(text)
        size += len(text)
        if size >= max_chars:
            break
    return docs
