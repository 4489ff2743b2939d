"""One exception type for every mistake a user can make, and how to name the option at fault.

The CLI prints `probe: error: <message>` and exits with status 2; nothing else is shown,
so each message must say what is wrong and what to do about it. The same checks run for the
Python API, where the user wrote `seq_len=64`, not `--seq-len 64`: messages name options with
`flag(...)`, which spells them the way the user did.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager


class ProbeError(Exception):
    """A user-facing error whose message is one actionable line."""


_ON_COMMAND_LINE = contextvars.ContextVar("probe_on_command_line", default=False)
# Python argument -> command-line option, where the two names differ.
CLI_NAMES = {"checkpoint_seconds": "save-every", "texts": "data", "progress": "quiet"}
_UNSET = object()


@contextmanager
def command_line():
    """Inside: messages name command-line options (`probe.api.cli.main` runs the commands in it)."""
    token = _ON_COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _ON_COMMAND_LINE.reset(token)


def on_command_line() -> bool:
    return _ON_COMMAND_LINE.get()


def flag(name: str, value=_UNSET, *, metavar: str | None = None) -> str:
    """The option `name` (a Python argument name) as the user spells it, with `value` if given:
    flag("on_long", "slide") is `--on-long slide` on the command line, `on_long='slide'` in Python;
    flag("force", True) is `--force` or `force=True`; flag("tokenizer", metavar="DIR") is
    `--tokenizer DIR` or `tokenizer=DIR`."""
    if on_command_line():
        option = "--" + CLI_NAMES.get(name, name).replace("_", "-")
        if metavar is not None:
            return f"{option} {metavar}"
        return option if value is _UNSET or value is True else f"{option} {value}"
    if metavar is not None:
        return f"{name}={metavar}"
    return f"{name}=" if value is _UNSET else f"{name}={value!r}"


def first_line(err: Exception) -> str:
    """A library's exception as one line of a ProbeError (their messages run over many)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# Characters that must not reach a terminal or a page as they are: C0 controls but tab and
# newline (ESC starts terminal escape sequences), DEL, C1 controls, the Unicode line and
# paragraph separators, and the bidirectional overrides and isolates (they reorder the text
# around them: "Trojan Source").
_UNSHOWN = {*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029,
            *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
_SHOWN = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _UNSHOWN}
_SHOWN.update({0x0D: "\\r", 0x00: "\\0"})


def printable(text) -> str:
    """`text` with every control, separator and bidi character written as an escape (ESC as
    \\x1b, a carriage return as \\r): what a name, path or token may show on a terminal or in
    a report. Plain text, tabs and newlines are unchanged."""
    return str(text).translate(_SHOWN)


def is_rust_panic(err: BaseException) -> bool:
    """A Rust library's panic (tokenizers, safetensors): pyo3's PanicException derives from
    BaseException, so `except Exception` never sees it."""
    return type(err).__name__ == "PanicException"


@contextmanager
def rust_panic_as_error(what: str, then: str):
    """Inside: a Rust panic is a ProbeError "<what> failed inside ... (<panic>); <then>", and the
    message and backtrace Rust writes to file descriptor 2 are dropped; anything else written
    there is passed on when the block ends."""
    import os
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    panicked = None
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException as err:
            if not is_rust_panic(err):
                raise
            panicked = err
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if panicked is None:
                captured.seek(0)
                text = captured.read()
                if text:
                    os.write(2, text)
    if panicked is not None:
        raise ProbeError(f"{what} failed inside its Rust code ({first_line(panicked)}); {then}")
