"""One exception type for every mistake a user can make.

The CLI prints `probe: error: <message>` and exits with status 2; nothing else is shown,
so each message must say what is wrong and what to do about it.
"""


class ProbeError(Exception):
    """A user-facing error whose message is one actionable line."""
