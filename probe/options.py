"""Every option of an analysis, checked before anything is loaded or written.

`probe.analyze` calls `check_analysis_options` first thing and the CLI calls it before it
touches the output directory, so a mistake in any option costs nothing and leaves nothing
behind (no half-made run, no `OUT.partial/` that blocks the corrected command). Messages name
the option as the user wrote it (errors.flag).
"""
from __future__ import annotations

import math
import numbers

from .errors import ProbeError, flag

BOS_POLICIES = ("auto", "prepend", "none")
ON_LONG = ("truncate", "slide", "error")


def check_int(name: str, value, minimum: int, *, optional: bool = False, why: str = "") -> None:
    """An integer >= minimum (None allowed when optional). bool is not an integer here."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ProbeError(f"{flag(name)} must be an integer of at least {minimum}{why} (got {value!r})")


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ProbeError(f"unknown {flag(name, value)}; use {', '.join(choices)}")


def check_data_options(*, seq_len, bos, on_long, max_length, stride, max_sequences) -> None:
    """The options that decide how data becomes sequences (build_dataset calls this too)."""
    check_choice("bos", bos, BOS_POLICIES)
    if on_long is not None:
        check_choice("on_long", on_long, ON_LONG)
    check_int("seq_len", seq_len, 2)
    check_int("max_length", max_length, 2, optional=True)
    check_int("stride", stride, 1, optional=True)
    check_int("max_sequences", max_sequences, 1, optional=True, why=" (leave it out to use every sequence)")


def check_thresholds(thresholds) -> tuple[float, ...]:
    """Sparsity thresholds: finite, positive numbers (a share below -1 or NaN means nothing)."""
    try:
        values = tuple(thresholds)
    except TypeError:
        raise ProbeError(f"{flag('thresholds')} must be a list of positive numbers (got {thresholds!r})") from None
    bad = [t for t in values if isinstance(t, bool) or not isinstance(t, numbers.Real)
           or not math.isfinite(t) or t <= 0]
    if bad or not values:
        raise ProbeError(f"{flag('thresholds')} must be finite numbers above 0 (the share of |O| below each); "
                         f"got {bad[0] if bad else 'none'}")
    return tuple(float(t) for t in values)


def check_analysis_options(*, seq_len, batch_size, bos, per_document, max_sequences, on_long,
                           max_length, stride, thresholds, display_len, checkpoint_seconds,
                           interventions, token_groups, gate, dtype, text_field, resume,
                           partial, seed) -> tuple[float, ...]:
    """Refuse any option that cannot work, in one line; returns the thresholds as floats."""
    check_data_options(seq_len=seq_len, bos=bos, on_long=on_long, max_length=max_length,
                       stride=stride, max_sequences=max_sequences)
    check_int("batch_size", batch_size, 1)
    check_int("display_len", display_len, 0)
    check_int("seed", seed, -2 ** 63)
    if not isinstance(text_field, str) or not text_field:
        raise ProbeError(f"{flag('text_field')} must name a JSONL field (got {text_field!r})")
    if isinstance(checkpoint_seconds, bool) or not isinstance(checkpoint_seconds, numbers.Real) \
            or not checkpoint_seconds >= 0 or math.isnan(checkpoint_seconds):
        raise ProbeError(f"{flag('checkpoint_seconds')} must be 0 or more seconds (got {checkpoint_seconds!r})")
    if resume and partial is None:
        raise ProbeError(f"{flag('resume', True)} continues the state saved in {flag('partial', metavar='FOLDER')}; "
                         "pass the folder an interrupted run left")
    if dtype is not None:
        from .load import DTYPES

        check_choice("dtype", dtype, tuple(DTYPES))
    if isinstance(gate, str) and gate != "none":
        from .gates import GateSpec

        GateSpec.parse(gate)
    if interventions is not None and interventions is not False:
        from .interventions import parse_kinds

        parse_kinds(interventions)
    if token_groups is not None:
        # Read and checked whatever the model: an ungated model does not use them, but a
        # malformed file is a mistake the user wants to hear about now.
        from .token_types import read_groups

        read_groups(token_groups)
    return check_thresholds(thresholds)
