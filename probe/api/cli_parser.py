"""The command line's parser: argparse's mistakes as one line that names the nearest valid word."""
from __future__ import annotations

import argparse
import re

from ..core.errors import ProbeError


class OneLineParser(argparse.ArgumentParser):
    """argparse's mistakes as one `probe: error:` line (cli.main prints it), not a usage block;
    a mistyped command, choice or option names the nearest one there is."""

    def error(self, message):
        raise ProbeError(f"{message}{_nearest_choice(message)} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:   # argparse would blame the top-level parser: name the command's options instead
            where = self._commands().get(getattr(parsed, "command", None), self)
            raise ProbeError(f"unrecognized arguments: {' '.join(extras)}{_nearest_options(extras, where)} "
                             f"(see {where.prog} --help)")
        return parsed

    def _commands(self) -> dict[str, argparse.ArgumentParser]:
        return next((action.choices for action in self._actions
                     if isinstance(action, argparse._SubParsersAction)), {})


def _nearest(word: str, candidates) -> str | None:
    import difflib                        # only when there is a mistake to answer

    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def _nearest_choice(message: str) -> str:
    """"; did you mean 'prepend'?" for argparse's "invalid choice: 'prepnd' (choose from ...)"."""
    match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if match is None:
        return ""
    choices = re.findall(r"'([^']*)'", match[2]) or [c.strip() for c in match[2].split(",")]
    near = _nearest(match[1], choices)
    return f"; did you mean '{near}'?" if near else ""


def _nearest_options(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """"; did you mean --format?" for the mistyped options among `extras`."""
    options = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    near = [n for extra in extras if extra.startswith("--")
            if (n := _nearest(extra.split("=", 1)[0], options)) is not None]
    return f"; did you mean {' / '.join(dict.fromkeys(near))}?" if near else ""
