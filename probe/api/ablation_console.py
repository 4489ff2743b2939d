"""The sink ablations as the console prints them: per run one line per ablation, Δloss with its
paired 95% interval, what it means, and F-Attn under the ablation (ablations.csv; `probe analyze
--ablate`, `probe compare --ablate`); and, where a gated and an ungated run read the same token
ids, the difference of their Δloss with its paired interval (laid out here; report_args.print_between
prints it for `probe compare` and `probe report`)."""
from __future__ import annotations

import math

import pandas as pd

from ..core.errors import printable


def ablation_lines(frame: pd.DataFrame) -> list[str]:
    """The table's lines; none for a run without ablations."""
    if frame is None or frame.empty:
        return []
    width = max(26, *(len(a) for a in frame.ablation))
    anatomy = bool(frame.top_keys.fillna("").str.len().any())
    keys = f"  {'top keys (position:share)':<27}" if anatomy else ""
    lines = [f"{'sink ablation':<{width}}{'loss':>8}{'Δloss':>9}  {'95% interval':<19}{'F-Attn':>7}{keys}  effect",
             f"{'none (the model as it is)':<{width}}{frame.base_loss.iloc[0]:>8.4f}{'':>9}  {'':<19}"
             f"{frame.base_f_attn.iloc[0]:>7.3f}" + (f"  {frame.base_top_keys.iloc[0]:<27}" if anatomy else "")]
    for r in frame.itertuples():
        if not math.isfinite(r.loss):
            lines.append(f"{r.ablation:<{width}}{'-':>8}{'-':>9}  {'':<19}{'-':>7}{'':<{len(keys)}}  {r.note}")
            continue
        interval = (f"[{r.delta_lo:+.4f}, {r.delta_hi:+.4f}]" if math.isfinite(r.delta_lo) else "-")
        top = f"  {r.top_keys:<27}" if anatomy else ""
        # A row scored on other targets (first token removed: targets 2 onward) has its own base:
        # its Δ does not read off the "none" row, so the row names the loss it is taken against.
        own = (f" (Δ against {r.base_loss:.4f}, the model on the same targets)"
               if abs(r.base_loss - frame.base_loss.iloc[0]) >= 5e-5 else "")
        lines.append(f"{r.ablation:<{width}}{r.loss:>8.4f}{r.delta_loss:>+9.4f}  {interval:<19}{r.f_attn:>7.3f}{top}  "
                     f"{r.effect}{own}")
    return lines


def print_ablations(analyses) -> None:
    for a in analyses:
        lines = ablation_lines(a.ablations)
        if lines:
            print(f"\n{a.meta.get('name', '')}: loss under sink ablations, against the model on the same tokens")
            print("\n".join(lines))


def between_lines(frame: pd.DataFrame) -> list[str]:
    """The gated − ungated table (probe.reports.ablation_pairs.between_models), one block per
    pair of runs: each model's Δloss, the difference, its paired 95% interval and the reading
    (a direction only where the interval excludes 0); none for an empty frame."""
    if frame is None or frame.empty:
        return []
    lines = []
    for (ungated, gated), rows in frame.groupby(["ungated", "gated"], sort=False):
        width = max(26, *(len(a) for a in rows.ablation))
        intervals = [f"[{r.lo:+.4f}, {r.hi:+.4f}]" if math.isfinite(r.lo) else "-" for r in rows.itertuples()]
        room = max(19, *map(len, intervals)) + 2
        sequences = sorted(set(rows.sequences))
        over = f"{sequences[0]}" if len(sequences) == 1 else f"{sequences[0]}-{sequences[-1]}"
        lines += ["", f"{printable(gated)} against {printable(ungated)}, the same {over} sequences: the change of "
                  "loss under each sink ablation, gated − ungated, with its paired 95% interval",
                  f"{'sink ablation':<{width}}{'Δ ungated':>10}{'Δ gated':>10}{'gated − ungated':>17}  "
                  f"{'95% interval':<{room}}reading"]
        for r, interval in zip(rows.itertuples(), intervals):
            lines.append(f"{r.ablation:<{width}}{r.delta_ungated:>+10.4f}{r.delta_gated:>+10.4f}"
                         f"{r.difference:>+17.4f}  {interval:<{room}}{r.reading}")
    return lines

