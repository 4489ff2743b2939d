"""Python's cyclic garbage collector in a `probe` command that has its process to itself.

Importing torch and transformers leaves ~400k long-lived objects (modules, classes, functions,
sympy's tables). The collector walks every one of them on each full collection: about six times
while they import (~0.5 s on a 2-core machine) and once more as the interpreter exits (~0.9 s),
of a ~5 s README quickstart, and never finds garbage among them. So a command that loads a model
imports that stack first with the collector off and then freezes it (`gc.freeze`: later
collections skip the frozen objects), and the process freezes what is left before it exits.

Only for a process of its own (the `probe` script, `python -m probe`): in a notebook, a test or
examples/demo.py the caller's own objects would be frozen too, and a frozen reference cycle is
never freed.
"""
from __future__ import annotations

import gc
import importlib

# What a command imports anyway, imported up front: the model stack (torch, transformers and the
# gated families probe registers with it; pandas for the tables) for the commands that load a
# checkpoint, the report layer (matplotlib, seaborn) for those that write a report.
MODEL_STACK = ("probe.capture.bridge", "pandas")
MODEL_COMMANDS = ("analyze", "compare", "check", "train", "graft")
REPORT_STACK = ("probe.reports",)


def stack_of(args) -> tuple[str, ...]:
    """The modules the parsed command `args` will import: `--report` (analyze) or `--format`
    (compare, report; "" for none) asks for the report layer."""
    modules = MODEL_STACK if args.command in MODEL_COMMANDS else ()
    if getattr(args, "report", None) or getattr(args, "format", None):
        modules += REPORT_STACK
    return modules


def import_frozen(modules: tuple[str, ...]) -> None:
    """Import `modules` with the collector off, then freeze everything alive."""
    if not modules:
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        gc.collect(1)           # the imports' young cyclic garbage first: frozen, it would live on
        gc.freeze()
        if enabled:
            gc.enable()


def freeze_before_exit() -> None:
    """Spare the interpreter's last full collection: everything alive now dies with the process."""
    gc.freeze()
