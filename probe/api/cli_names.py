"""Naming and printing helpers of the `probe` command line: the run folder names of the checkpoints
(`--name` checked, or the folder names made unique), the warning for a checkpoint given twice,
and the summary table a command prints."""
from __future__ import annotations

import sys
from pathlib import Path

from ..core import errors
from ..core.errors import ProbeError


def _run_name(checkpoint: str) -> str:
    """runs/<folder> for a checkpoint folder, runs/<stem> for a model.gguf file (run_names.py)."""
    from ..results.run_names import checkpoint_name  # not at import: `probe --help` reads none of it

    return checkpoint_name(checkpoint) or ""


def compare_names(checkpoints, given) -> list[str]:
    """--name NAME ... (one per checkpoint), else the folder names made unique."""
    if not given:
        return unique_names(checkpoints)
    if len(given) != len(checkpoints):
        raise ProbeError(f"--name gives {len(given)} names for {len(checkpoints)} checkpoints; "
                         "give one per checkpoint, in the same order")
    bad = [n for n in given if not n or n in (".", "..") or "/" in n or "\\" in n]
    if bad or len(set(given)) != len(given):
        raise ProbeError(f"--name {' '.join(given)}: the names must be distinct and usable as folder "
                         "names (no '/')")
    return list(given)


def warn_repeated(checkpoints) -> None:
    """One line per checkpoint named more than once: its runs hold the same numbers."""
    seen: dict[Path, list[str]] = {}
    for ckpt in checkpoints:
        seen.setdefault(Path(ckpt).resolve(), []).append(ckpt)
    for given in seen.values():
        if len(given) > 1:
            print(f"probe: warning: {given[0]} is given {len(given)} times; each is analysed on the "
                  "same data, so their runs hold the same numbers", file=sys.stderr)


def unique_names(checkpoints) -> list[str]:
    names = []
    for ckpt in checkpoints:
        base = _run_name(ckpt) or "model"
        name, n = base, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


def print_summary(analyses) -> None:
    import textwrap

    import pandas as pd

    # A baseline's mean gate is None: numeric columns print it as "-", not "None".
    frame = pd.concat([a.summary_frame() for a in analyses]).apply(pd.to_numeric, errors="coerce")
    frame.index = [errors.printable(name) for name in frame.index]     # a name's ESC never reaches the terminal
    # Real models' M-Act runs to tens of thousands: whole numbers there, not 1.446e+04.
    with pd.option_context("display.float_format", lambda v: f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}",
                           "display.width", 120):
        print(frame.to_string(na_rep="-"))
    eps = {a.summary.get("sink_epsilon") for a in analyses} - {None}
    eps_text = f"{eps.pop():g}" if len(eps) == 1 else "ε"
    # The columns are summary.json's keys; one line says what each is and in what unit.
    print(textwrap.fill(
        f"mean_gate: mean gate score; f_attn: attention on the first token, queries t>=1 (f_attn_paper: "
        f"t=0 too; f_attn_uniform: uniform attention's); sink_rate: share of heads with F-Attn > "
        f"{eps_text}; m_act: mean over layers of the largest |layer output|; loss: held-out next-token "
        "loss, nats per token", width=100, initial_indent="  ", subsequent_indent="  "))


def different_tokens(analyses, names) -> str:
    """Why the compared models did not see the same token ids, and what gives them the same: a
    BOS prepended for some only (--bos auto follows each tokenizer: token ids given as data are
    then not enough), else their tokenizers."""
    with_bos = [n for a, n in zip(analyses, names) if a.meta.get("bos_token_id") is not None]
    if with_bos and len(with_bos) < len(names):
        without = [n for n in names if n not in with_bos]
        return (f"the models did not see the same token ids: a BOS token was prepended for "
                f"{', '.join(with_bos)} and not for {', '.join(without)} (--bos auto follows each "
                "tokenizer), so per-token comparisons do not apply; pass --bos none, or --bos prepend "
                "where every tokenizer has a BOS token")
    return ("the models did not see the same token ids (their tokenizers differ), so per-token "
            "comparisons do not apply; pass token ids (.npy / .pt) to compare on identical input")
