"""Interrupted runs: a pass stopped after a number of batches (as Ctrl-C would), and a run folder's tables read back."""
from __future__ import annotations

import pandas as pd
from probe.capture.hf import Capture


def _interrupt_after(monkeypatch, batches: int):
    """Raise KeyboardInterrupt when the (batches+1)-th forward pass starts, as Ctrl-C would."""
    calls = {"n": 0}
    real = Capture.batch

    def batch(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > batches:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Capture, "batch", batch)


def _tables(folder):
    return {p.name: pd.read_csv(p) for p in sorted(folder.glob("*.csv"))}
