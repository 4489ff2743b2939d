"""The headline numbers as functions of resampling weights W (R, S), from one run's
per_sequence.csv: at W = ones (1, S) each equals the number summary.json gives (tested), at a
bootstrap W its resampled value.

Which statistic each interval is of:
- F-Attn per (layer, head) pools queries over sequences: (W @ sum) / (W @ count), a ratio of
  sums, not a mean of per-sequence means; per layer the mean over heads, then over layers.
- sink rate: the share of (layer, head) cells whose resampled F-Attn exceeds epsilon.
- mean gate: count-weighted over every gated layer, head, position (and dimension); the share of
  scores below LOW_GATE likewise; per layer the mean over heads of the per-head means.
- sparsity: per layer (W @ below) / (W @ n), then the mean over layers.
- loss: (W @ nll) / (W @ pairs).
- sink anatomy (--anatomy): key 0's importance score per layer the mean over the drawn
  sequences' cells and heads, then over layers; its sink rate the share of those cells above
  epsilon; secondary sinks the count over the drawn sequences.
- M-Act: per layer and site the largest per-sequence maximum among the sequences drawn; then the
  mean over layers of the layer output's. The bootstrap of a maximum is biased low: a resample
  can never exceed the largest value seen, so the interval's upper end is the point estimate
  whenever one sequence holds the maximum. It says how much the maximum rests on single
  sequences, not where the population's maximum lies.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .bootstrap import MIN_RESAMPLES, MIN_SEQUENCES, SEED, percentile_interval, resample_weights

SITES = ("attn_out", "resid_mid", "mlp_out", "resid_post")     # probe/results/schema.py SITES
RESIDUAL = "resid_post"
CHUNK = 1 << 24          # elements of the (R, S, ...) M-Act temporaries per step


@dataclass
class SequenceValues:
    """One run's per-sequence table as arrays; S sequences, A attention layers, H heads."""

    sequences: int
    attention_layers: list[int]
    layers: list[int]
    f_sum: np.ndarray                   # (S, A, H)
    f_n: np.ndarray                     # (S, A)
    f_uniform: np.ndarray               # (S, A)
    gate_sum: np.ndarray | None         # (S, A, H); None without a gate
    gate_n: np.ndarray | None
    gate_low: np.ndarray | None
    sparsity: dict                      # (variant, threshold) -> ((S, A) below, (S, A) n)
    m_max: np.ndarray                   # (S, L, 4): per-sequence max |h|, NaN where none
    nll: np.ndarray                     # (S,)
    nll_n: np.ndarray                   # (S,)
    documents: np.ndarray | None = None  # (S,) each sequence's document where one holds several
                                         # (sliding windows): the bootstrap draws documents
    key0_score: np.ndarray | None = None  # (S, A, H) key 0's importance score (with --anatomy)
    key0_n: np.ndarray | None = None      # (S, A) 1 where key 0 is a valid key of the sequence
    secondary: np.ndarray | None = None   # (S, A) secondary-sink cells per sequence and layer

    @classmethod
    def from_frame(cls, rows: pd.DataFrame) -> "SequenceValues | None":
        """The arrays of one model's rows of per_sequence.csv; None when it has none.

        The rows are split by quantity (and key, and threshold) through integer codes, as index
        arrays into the table's columns read once: pandas groupby and a sub-frame per quantity cost
        most of a short analysis's summary (5 of its 8 ms at T = 128)."""
        if rows is None or rows.empty:
            return None
        sequence = rows["sequence"].to_numpy(int)
        layer, head = rows["layer"].to_numpy(int), rows["head"].to_numpy(int)
        value = rows["value"].to_numpy(float)
        S = int(sequence.max()) + 1
        quantity, quantities = pd.factorize(rows["quantity"], sort=False)
        key, keys = pd.factorize(rows["key"], sort=False)
        by = {name: np.flatnonzero(quantity == code) for code, name in enumerate(quantities)}
        key_code = {name: code for code, name in enumerate(keys)}

        def rows_of(q, key_name=None):
            """Indices of quantity q's rows (with that key): None where q has no rows; empty
            where it has rows but none with the key (a grid of NaN)."""
            found = by.get(q)
            if found is None or key_name is None:
                return found
            return found[key[found] == key_code.get(key_name, -2)]

        def grid(at, layer_ids, heads=False):
            if at is None:
                return None
            H = int(head[at].max()) + 1 if heads else 1
            out = np.full((S, len(layer_ids), H), np.nan)
            out[sequence[at], _columns(layer[at], layer_ids), head[at] if heads else 0] = value[at]
            return out if heads else out[:, :, 0]

        def layers_of(q):
            return sorted(int(x) for x in np.unique(layer[by[q]])) if q in by else []

        def quantity_grid(q, layer_ids, heads=False, key_name=None):
            return grid(rows_of(q, key_name), layer_ids, heads)

        attention, layers = layers_of("f_attn_n"), layers_of("m_act")
        m_max = np.stack([quantity_grid("m_act", layers, key_name=s) if "m_act" in by else np.full((S, 0), np.nan)
                          for s in SITES], axis=2)
        sparsity = {}
        below = by.get("sparsity_below")
        if below is not None:
            # Each (variant, threshold) of the rows, in the order they first appear.
            threshold, thresholds = pd.factorize(rows["threshold"].to_numpy(float)[below], sort=False)
            pair = key[below] * max(len(thresholds), 1) + threshold
            codes, first = np.unique(pair, return_index=True)
            for code in codes[np.argsort(first)]:
                variant, t = keys[code // max(len(thresholds), 1)], thresholds[code % max(len(thresholds), 1)]
                sparsity[(variant, float(t))] = (grid(below[pair == code], attention),
                                                 quantity_grid("sparsity_n", attention, key_name=variant))
        loss = lambda q: grid(by[q], [-1])[:, 0] if q in by else np.zeros(S)         # noqa: E731
        return cls(S, attention, layers, quantity_grid("f_attn_sum", attention, heads=True),
                   quantity_grid("f_attn_n", attention), quantity_grid("f_attn_uniform", attention),
                   quantity_grid("gate_sum", attention, heads=True), quantity_grid("gate_n", attention, heads=True),
                   quantity_grid("gate_low", attention, heads=True),
                   sparsity, m_max, loss("nll"), loss("nll_n"),
                   grid(by["document"], [-1])[:, 0].astype(np.int64) if "document" in by else None,
                   quantity_grid("key0_score", attention, heads=True), quantity_grid("key0_n", attention),
                   quantity_grid("secondary_sinks", attention))

    @property
    def units(self) -> int:
        """What a resample draws: the documents when sequences are grouped, else the sequences."""
        return self.sequences if self.documents is None else len(np.unique(self.documents))

    def weights(self, resamples: int, seed: int = SEED) -> np.ndarray:
        """(resamples, S) bootstrap weights: a cluster bootstrap over documents (every window of a
        drawn document drawn with it) when sequences are grouped, else over sequences."""
        return resample_weights(self.sequences, resamples, seed, self.documents)

    # -- statistics of resampling weights W (R, S) ----------------------------------------------
    def f_attn_cells(self, W) -> np.ndarray:                                 # (R, A, H)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.einsum("rs,sah->rah", W, self.f_sum) / (W @ self.f_n)[:, :, None]

    def f_attn_layers(self, W) -> np.ndarray:                                # (R, A)
        return _nanmean(self.f_attn_cells(W), 2)

    def f_attn(self, W) -> np.ndarray:                                       # (R,)
        return _nanmean(self.f_attn_layers(W), 1)

    def f_attn_uniform(self, W) -> np.ndarray:                               # (R,)
        with np.errstate(invalid="ignore", divide="ignore"):
            return _nanmean((W @ self.f_uniform) / (W @ self.f_n), 1)

    def sink_rate(self, W, epsilon: float) -> np.ndarray:                    # (R,)
        cells = self.f_attn_cells(W)
        finite = np.isfinite(cells)
        with np.errstate(invalid="ignore", divide="ignore"):
            return ((cells > epsilon) & finite).sum((1, 2)) / finite.sum((1, 2))

    def mean_gate(self, W) -> np.ndarray | None:                             # (R,)
        if self.gate_sum is None:
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.einsum("rs,sah->r", W, self.gate_sum) / np.einsum("rs,sah->r", W, self.gate_n)

    def mean_gate_layers(self, W) -> np.ndarray | None:                      # (R, A)
        if self.gate_sum is None:
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            per_head = np.einsum("rs,sah->rah", W, self.gate_sum) / np.einsum("rs,sah->rah", W, self.gate_n)
        return _nanmean(per_head, 2)

    def low_gate_share(self, W) -> np.ndarray | None:                        # (R,)
        if self.gate_low is None:
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.einsum("rs,sah->r", W, self.gate_low) / np.einsum("rs,sah->r", W, self.gate_n)

    def sparsity_layers(self, W, variant: str, threshold: float) -> np.ndarray | None:    # (R, A)
        key = next((k for k in self.sparsity if k[0] == variant and np.isclose(k[1], threshold)), None)
        if key is None:
            return None
        below, n = self.sparsity[key]
        with np.errstate(invalid="ignore", divide="ignore"):
            return (W @ below) / (W @ n)

    def sparsity_mean(self, W, variant: str, threshold: float) -> np.ndarray | None:     # (R,)
        layers = self.sparsity_layers(W, variant, threshold)
        return None if layers is None else _nanmean(layers, 1)

    def loss(self, W) -> np.ndarray:                                          # (R,)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (W @ self.nll) / (W @ self.nll_n)

    def m_act_layers(self, W) -> np.ndarray:                                 # (R, L, 4)
        """The largest per-sequence maximum among the sequences each resample draws."""
        R, S = W.shape
        flat = self.m_max.reshape(S, -1)                                     # (S, L * 4)
        out = np.empty((R, flat.shape[1]))
        step = max(1, CHUNK // max(1, S * flat.shape[1]))
        filled = np.where(np.isnan(flat), -np.inf, flat)
        for start in range(0, R, step):
            drawn = W[start:start + step, :, None] > 0                      # (r, S, 1)
            out[start:start + step] = np.where(drawn, filled[None], -np.inf).max(1)
        out[np.isinf(out)] = np.nan
        return out.reshape(R, *self.m_max.shape[1:])

    def m_act(self, W) -> np.ndarray:                                        # (R,)
        return _nanmean(self.m_act_layers(W)[:, :, SITES.index(RESIDUAL)], 1)


    # -- sink anatomy (runs analysed with --anatomy) ---------------------------------------------
    def key0_score_layers(self, W) -> np.ndarray | None:                    # (R, A)
        """Key 0's importance score per layer: the mean over the drawn sequences' cells and the
        heads (received_by_position.csv's score at key 0, head -1)."""
        if self.key0_score is None:
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.einsum("rs,sah->ra", W, self.key0_score) / ((W @ self.key0_n) * self.key0_score.shape[2])

    def key0_score_mean(self, W) -> np.ndarray | None:                       # (R,)
        layers = self.key0_score_layers(W)
        return None if layers is None else _nanmean(layers, 1)

    def key0_sink_rate(self, W, epsilon: float) -> np.ndarray | None:        # (R,)
        """Gu et al.'s sink rate at key 0: the share of (sequence, layer, head) cells whose
        score exceeds epsilon, over the drawn sequences."""
        if self.key0_score is None:
            return None
        above = ((self.key0_score > epsilon) & (self.key0_n[:, :, None] > 0)).sum((1, 2))     # (S,)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (W @ above) / (W @ (self.key0_n.sum(1) * self.key0_score.shape[2]))

    def secondary_sinks(self, W) -> np.ndarray | None:                       # (R,)
        """Secondary-sink cells over the drawn sequences (as many as the run has): the total
        summary.json's anatomy.secondary_sinks counts."""
        return None if self.secondary is None else W @ self.secondary.sum(1)


def _nanmean(x: np.ndarray, axis: int) -> np.ndarray:
    """Mean of the finite values along axis (NaN where there are none), as summary.json's mean."""
    finite = np.isfinite(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(finite, x, 0.0).sum(axis) / finite.sum(axis)


def intervals_of(values: SequenceValues, statistic, resamples: int, seed: int = SEED):
    """(point, lo, hi) of statistic(W) -> (R, ...): the point at W = ones, the interval over
    `resamples` bootstrap resamples; lo / hi NaN without enough sequences or resamples."""
    point = statistic(np.ones((1, values.sequences)))
    if point is None:
        return None
    point = point[0]
    if resamples < MIN_RESAMPLES or values.units < MIN_SEQUENCES:
        nan = np.full(np.shape(point), np.nan)
        return point, nan, nan
    lo, hi = percentile_interval(statistic(values.weights(resamples, seed)))
    return point, lo, hi


def _columns(layers: np.ndarray, ids: list) -> np.ndarray:
    """The column of each row's layer among ids (sorted): a binary search, where a pandas map
    cost a third of reading the table."""
    ids = np.asarray(ids, dtype=np.int64)
    at = np.searchsorted(ids, layers)
    if len(layers) and (len(ids) == 0 or at.max() >= len(ids) or (ids[at] != layers).any()):
        raise ValueError("per_sequence rows name a layer that its quantity's layers do not hold")
    return at
