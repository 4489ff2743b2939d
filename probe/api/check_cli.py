"""`probe check CHECKPOINT`: the gate checks of probe/api/check.py on a few random tokens, exit 0
when every check passes (or there is no gate to check), 1 when one fails."""
from __future__ import annotations

import sys

from ..core.errors import ProbeError


def cmd_check(args, command_line) -> int:
    """Exit 0 when every check passes (or there is no gate to check), 1 when one fails."""
    import pandas as pd

    from .check import COLUMNS, CheckReport, run_checks, summary_line
    from ..load.loader import config_and_layout_without_weights, load, warn_if_gate_declared_away
    from ..core.options import check_int
    from ..load.preflight import check_device

    check_int("seq_len", args.seq_len, 2)
    check_int("batch_size", args.batch_size, 1)

    check_device(args.device)
    # An ungated checkpoint has nothing to check: say so from its config, before the weights
    # load (a GGUF file would be dequantised in full first).
    found = config_and_layout_without_weights(args.checkpoint, args.gate)
    empty = found[1] if found is not None and args.gate is None else None
    positions = _positions(found[0]) if found is not None else None
    if positions and args.seq_len > positions:
        raise ProbeError(f"--seq-len {args.seq_len} exceeds the model's {positions} positions; lower --seq-len "
                         "(the checks need only a few tokens: the default is 16)")
    if empty is not None and not empty.gated:
        print(summary_line(CheckReport(pd.DataFrame(columns=COLUMNS), False, []), empty))
        return 0
    loaded = load(args.checkpoint, dtype=args.dtype, device=args.device, gate=args.gate)
    warn_if_gate_declared_away(loaded.model, loaded.layout, args.gate)
    report = run_checks(loaded, seq_len=args.seq_len, batch_size=args.batch_size, seed=args.seed)
    if len(report.frame):
        print(report.to_string())
    line = summary_line(report, loaded.layout)
    if report.passed:
        print(line)
        return 0
    print(f"probe: check failed: {line}", file=sys.stderr)
    return 1


def _positions(config) -> int | None:
    """The positions a model's config gives it (its text part's, for a multimodal config)."""
    from ..families.registry import text_config

    settings = text_config(config)
    return getattr(settings, "max_position_embeddings", None) or getattr(settings, "n_positions", None)
