"""The one line a command prints for a user's mistake (probe's CLI run in-process)."""
from __future__ import annotations

from probe.api.cli import main


def _error(capsys, argv) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("probe: error: ") and "\n" not in err and "Traceback" not in err
    return err
