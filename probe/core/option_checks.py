"""The checks of single option values that read a spec or a file through the module that owns it
(a gate spec, interventions, sink ablations, token groups, a tokenizer folder, RoPE scaling) or
that stand alone (a device map, a name, seconds, --resume): fn(name, value, options), raising a
ProbeError that names the option as the user spells it. probe/core/options.py attaches them to
its fields; the modules they read are imported when a value needs them, so that checking options
never imports torch."""
from __future__ import annotations

import math
import numbers
import re
from pathlib import Path

from .errors import ProbeError, flag


def check_text_field(name, value, options):
    if not isinstance(value, str) or not value:
        raise ProbeError(f"{flag(name)} must name a JSONL field (got {value!r})")


# What transformers takes as a device_map string: a placement strategy, or one device.
DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def check_device_map(name, value, options):
    if value is None:
        return
    one_device = isinstance(value, str) and re.fullmatch(r"(cpu|mps|meta|(cuda|xpu|npu|hpu)(:\d+)?)", value)
    if value not in DEVICE_MAP_STRATEGIES and not one_device:
        raise ProbeError(f"{flag(name, value)} is not a device map; use {', '.join(DEVICE_MAP_STRATEGIES)}, or one "
                         "device such as cuda:0")


def check_name(name, value, options):
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ProbeError(f"{flag(name)} must be a non-empty string, the model's name in tables and reports "
                         f"(got {value!r})")


def check_rope_scaling(name, value, options):
    if value is not None:
        from ..load.rope import parse

        parse(value)                 # checked now; load applies it (rope.apply)


def check_seconds(name, value, options):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0 or math.isnan(value):
        raise ProbeError(f"{flag(name)} must be 0 or more seconds (got {value!r})")


def check_resume(name, value, options):
    if value and options.partial is None:
        raise ProbeError(f"{flag('resume', True)} continues the state saved in {flag('partial', metavar='FOLDER')}; "
                         "pass the folder an interrupted run left")


def check_gate(name, value, options):
    if isinstance(value, str) and value != "none":
        from ..families.gates import GateSpec

        GateSpec.parse(value)


def check_interventions(name, value, options):
    if value is not None and value is not False:
        from .intervention_kinds import parse_kinds

        parse_kinds(value)


def check_ablate(name, value, options):
    if value is not None and value is not False:
        from .ablation_kinds import parse_plan

        parse_plan(value, options.seq_len, warn=False)


def check_token_groups(name, value, options):
    if value is not None:
        # Read and checked whatever the model: an ungated model does not use them, but a
        # malformed file is a mistake the user wants to hear about now.
        from ..data.token_types import read_groups

        read_groups(value)


def check_tokenizer(name, value, options):
    if isinstance(value, (str, Path)):
        from ..load.checkpoint_files import check_tokenizer_dir

        check_tokenizer_dir(value)
