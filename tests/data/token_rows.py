"""Token-id rows: random (n, t) token ids as a user's data."""
from __future__ import annotations

import numpy as np


def _rows(n=3, t=10, seed=0):
    return np.random.default_rng(seed).integers(3, 200, size=(n, t))
