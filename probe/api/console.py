"""What the command line changes for the length of one command, and restores: how warnings
print, transformers' verbosity, and Ctrl-C handling (probe.api.cli.main runs each command inside)."""
from __future__ import annotations

import contextlib
import os
import sys
import warnings

from ..core.errors import printable


def watch_interrupts() -> "InterruptWatch":
    global _WATCH
    _WATCH = InterruptWatch()
    return _WATCH


_WATCH = None    # the watch of the command that runs now (watch_interrupts)


@contextlib.contextmanager
def scoped():
    """For one command, and restored after it (main may run inside a notebook or a test):
    transformers' own warnings and log lines would add lines to probe's one-line messages, so
    they are off, and a warning prints as one `probe: warning: ...` line."""
    env = os.environ.get("TRANSFORMERS_VERBOSITY")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")     # read when transformers is first imported
    verbosity = _hf_logging().get_verbosity() if "transformers" in sys.modules else None
    if verbosity is not None:
        _hf_logging().set_verbosity_error()
    formatwarning = warnings.formatwarning
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.filterwarnings("ignore", module=r"(transformers|huggingface_hub|tokenizers)(\.|$)")
            warnings.formatwarning = lambda msg, *a, **k: f"probe: warning: {printable(msg)}\n"
            yield
    finally:
        warnings.formatwarning = formatwarning
        if env is None:
            os.environ.pop("TRANSFORMERS_VERBOSITY", None)
        else:
            os.environ["TRANSFORMERS_VERBOSITY"] = env
        if "transformers" in sys.modules:       # imported before or during the command
            hf = _hf_logging()
            hf.set_verbosity(verbosity if verbosity is not None else hf._get_default_logging_level())


def _hf_logging():
    from transformers.utils import logging as hf_logging

    return hf_logging


def raise_if_interrupted() -> None:
    """A library that catches everything (a bare `except:` around an optional import) can
    swallow the KeyboardInterrupt of a Ctrl-C: the command then stops here, before it writes."""
    if _WATCH is not None and _WATCH.seen:
        raise KeyboardInterrupt


class InterruptWatch:
    """Notes that SIGINT arrived (then raises KeyboardInterrupt as Python does), so that main
    knows an error that follows it comes from the interrupt. Only in the main thread, and only
    over Python's own handler."""

    def __init__(self):
        self.seen = False
        self._previous = None
        self._unraisable = None
        self._held = 0              # > 0: inside held(), the interrupt waits for its end
        self._pending = False       # an interrupt arrived inside held(), not raised yet

    def _handler(self, signum, frame):
        self.seen = True
        if self._held:
            self._pending = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def held(self):
        """A Ctrl-C while the body runs is noted and raised when it ends, not inside it: torch's
        import runs C++ initialisers that call back into Python (torch.distributed's c10d init
        imports modules through pybind11), and a KeyboardInterrupt raised in such a callback
        ends the process in std::terminate with a C++ message instead of one line."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        if self._pending and not self._held:
            self._pending = False
            raise KeyboardInterrupt

    def __enter__(self):
        import signal

        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            try:
                self._previous = signal.signal(signal.SIGINT, self._handler)
            except ValueError:                   # not the main thread
                self._previous = None
        if self._previous is not None:
            # A Ctrl-C that lands in a callback Python cannot raise from (an import lock's
            # weakref callback) is printed as "Exception ignored in ..." with a traceback:
            # keep it quiet; _raise_if_interrupted stops the command at the next safe point.
            self._unraisable = sys.unraisablehook
            sys.unraisablehook = self._quiet_interrupt
        return self

    def _quiet_interrupt(self, unraisable):
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):
            self._unraisable(unraisable)

    def __exit__(self, *exc):
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            sys.unraisablehook = self._unraisable
        return False
