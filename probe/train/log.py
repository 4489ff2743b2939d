"""training.csv: its columns, the loss-spike rule and the held-out loss of the eval_loss column.

Loss spike (the `spike` column of training.csv): step s is a spike when its training loss
exceeds the mean of the previous SPIKE_WINDOW steps' training losses by more than SPIKE_K of
their standard deviations; it needs at least SPIKE_MIN_HISTORY previous steps. The rule reads
only the log, so a resumed run flags the same steps.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import torch

from ..core.atomic import write_text
from .config import SPIKE_K, SPIKE_MIN_HISTORY, SPIKE_WINDOW

LOG_COLUMNS = ("model", "step", "tokens", "lr", "train_loss", "eval_loss", "grad_norm", "spike")


@torch.no_grad()
def heldout_loss(model, rows: torch.Tensor, batch_size: int) -> float:
    """Mean next-token loss over every prediction of `rows` (N, T)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(rows), batch_size):
        ids = rows[start:start + batch_size]
        out = model(input_ids=ids, labels=ids, use_cache=False)
        n = ids.numel() - ids.shape[0]
        total += float(out.loss) * n
        count += n
    model.train(was_training)
    return total / count


def is_spike(loss: float, history: list[float]) -> bool:
    past = history[-SPIKE_WINDOW:]
    if len(past) < SPIKE_MIN_HISTORY or not math.isfinite(loss):
        return not math.isfinite(loss)
    return loss > statistics.fmean(past) + SPIKE_K * statistics.pstdev(past)


def write_log(rows: list[dict], path: Path) -> None:
    lines = [",".join(LOG_COLUMNS)]
    for r in rows:
        lines.append(",".join(_cell(r[c]) for c in LOG_COLUMNS))
    write_text(path, "\n".join(lines) + "\n")


def _cell(v) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return str(v)


def read_log(path: Path) -> list[dict]:
    import csv

    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append({"model": r["model"], "step": int(r["step"]), "tokens": int(r["tokens"]),
                         "lr": float(r["lr"]), "train_loss": float(r["train_loss"]),
                         "eval_loss": float(r["eval_loss"]) if r["eval_loss"] else math.nan,
                         "grad_norm": float(r["grad_norm"]), "spike": r["spike"] == "True"})
    return rows
