"""One exception type for every mistake a user can make.

The CLI prints `probe: error: <message>` and exits with status 2; nothing else is shown,
so each message must say what is wrong and what to do about it.
"""


class ProbeError(Exception):
    """A user-facing error whose message is one actionable line."""


def first_line(err: Exception) -> str:
    """A library's exception as one line of a ProbeError (their messages run over many)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
