"""Per-sequence values of the headline numbers (per_sequence.csv): what the bootstrap intervals
of probe/intervals/ resample, kept so that intervals can be recomputed without the model.

Every headline number of summary.json is a ratio of sums over tokens (F-Attn, mean gate, the
sparsity shares, loss) or a maximum over tokens (M-Act). So per sequence this keeps the sums
and the counts, never a per-sequence mean, and the per-sequence maximum: a resampled set of
sequences then gives the same statistic the pass gives on all of them (probe/intervals/stats.py).
State is O(sequences x layers x heads), never O(tokens).

    f_attn_sum (S, A, H)   sum over valid queries t >= 1 of P[t, 0]      <- attn.hook_first_key
    f_attn_n (S, A)        those queries; f_attn_uniform (S, A) sum of 1 / (t + 1) (or the window's)
    gate_sum, gate_n, gate_low (S, A, H)  gate scores, their count, those below LOW_GATE  <- attn.hook_gate
    sparsity_below (S, A, 2, K), sparsity_n (S, A, 2)  |x| below each headline threshold,
                           ungated (attn.hook_sdpa) and gated (attn.hook_z)
    m_act (S, L, 4)        max |h| per layer and site                      <- the four site events
    nll, nll_n (S,)        next-token loss (kept by metrics/loss/, which computes it anyway)
    document (S,)          the document each sequence comes from, only when one holds several
                           (sliding windows of a long document): the bootstrap resamples documents
    key0_score (S, A, H), key0_n (S, A), secondary_sinks (S, A)   with the `anatomy` option:
                           key 0's importance score and the secondary-sink cells (metrics/anatomy/
                           sequences.py keeps them)

S sequences (rows of the dataset), A attention layers, H heads, L layers, K thresholds.
The mean-gate control's per-sequence counts need its scale, known only after the pass: the exact
control's second pass (exact_control=True, run/control.py) counts them, as the `mean_gate` variant
of sparsity_below / sparsity_n; the one-pass control has none (no interval; reports say so).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from ...core.events import GATE, SITES
from ..bins import abs_row_max, batch_bins, row_scan
from ..reducers import F64, I64, Reducer, cut_bits, grown
from ..first_token import SINK_EPSILON
from ..sparsity import HEADLINE_THRESHOLDS
from ..sparsity.reduce import bin_cuts
from . import DECLARATION, LOW_GATE
from ..base import Metric
from ..first_token.reduce import first_key_weights

SPARSE_VARIANTS = ("ungated", "gated")


class SequenceStats(Reducer):
    """The per-sequence state of one pass. `sequences`: the dataset's row count when known (the
    state then has a fixed shape, as torchrun and --resume need); otherwise it grows with the
    largest sequence index seen."""

    maximum = ("m_act",)

    def __init__(self, attention_layers: int, layers: int, heads: int, gated: bool,
                 sequences: int | None = None, device="cpu"):
        S = sequences or 0
        A, H, K = attention_layers, heads, len(HEADLINE_THRESHOLDS)
        z = {"dtype": F64, "device": device}
        n = {"dtype": I64, "device": device}
        self.f_attn_sum, self.f_attn_n = torch.zeros(S, A, H, **z), torch.zeros(S, A, **n)
        self.f_attn_uniform = torch.zeros(S, A, **z)
        self.sparsity_below = torch.zeros(S, A, 2, K, **n)
        self.sparsity_n = torch.zeros(S, A, 2, **n)
        self.m_act = torch.full((S, layers, len(SITES)), -math.inf, **z)
        names = ["f_attn_sum", "f_attn_n", "f_attn_uniform", "sparsity_below", "sparsity_n"]
        if gated:
            self.gate_sum = torch.zeros(S, A, H, **z)
            self.gate_n, self.gate_low = torch.zeros(S, A, H, **n), torch.zeros(S, A, H, **n)
            names += ["gate_sum", "gate_n", "gate_low"]
        self.summed = tuple(names)

    @property
    def rows(self) -> int:
        return self.m_act.shape[0]

    def fit(self, seq_index: torch.Tensor) -> None:
        """Make room for the sequences of a batch (only when the row count was not given)."""
        need = int(seq_index.max()) + 1
        if need > self.rows:
            for name in self.summed:
                setattr(self, name, grown(getattr(self, name), need, 0))
            self.m_act = grown(self.m_act, need, -math.inf)


class PerSequence(Metric):
    declaration = DECLARATION

    def setup(self) -> None:
        layout = self.layout
        sequences = self.context.sequences
        self.column = {layer: i for i, layer in enumerate(layout.attention_layers)}
        # |x| is below a threshold when its bits are below the threshold's cut (LogHistogram's cuts).
        self.cuts = [cut_bits(t) for t in HEADLINE_THRESHOLDS]
        self.bin_cuts = bin_cuts(self.options.thresholds)           # what the sparsity metric bins with
        self.state = SequenceStats(len(self.column), len(layout.layers), layout.num_heads, layout.gated,
                                   sequences)
        self.fixed = sequences is not None
        self.update_ungated, self.update_gated = self._sparsity(0), self._sparsity(1)   # sdpa, z
        for s, site in enumerate(SITES):                            # update_attn_out, ... (declared events)
            setattr(self, f"update_{site}", self._massive(s))

    def reducers(self) -> list:
        return [self.state]

    def listens(self, event: str) -> bool:
        return event != GATE or self.layout.gated

    def _rows(self, b, device) -> torch.Tensor:
        """The batch's sequence indices (B,) on `device`, with room for them in the state."""
        s = self.state.follow(device)
        if not self.fixed:
            s.fit(b.seq_index)
        return b.seq_index.to(device)

    def update_first_key(self, layer, p0, b, uniform=None, finite=None) -> None:              # (B, H, T)
        if layer not in self.column:
            return
        seq, a = self._rows(b, p0.device), self.column[layer]
        p0, w, _ = first_key_weights(p0, None if b.all_valid else b.valid.to(p0.device), finite)
        T = p0.shape[-1]
        rest = (p0.double() * w[:, None, :])[:, :, 1:].sum(2)                      # (B, H)
        if uniform is None:
            u = (w[:, 1:] / torch.arange(2, T + 1, device=p0.device, dtype=F64)).sum(1)   # (B,)
        else:
            u = (w[:, 1:] * uniform[:, 1:].double()).sum(1)
        s = self.state
        s.f_attn_sum[:, a].index_add_(0, seq, rest)
        s.f_attn_n[:, a].index_add_(0, seq, w[:, 1:].sum(1).long())
        s.f_attn_uniform[:, a].index_add_(0, seq, u)

    def update_gate(self, layer, scores, b) -> None:                                       # (B, T, H, Dg)
        if layer not in self.column:
            return
        seq, a = self._rows(b, scores.device), self.column[layer]
        g = scores.float()
        finite = torch.isfinite(g)
        valid = b.valid.to(g.device)[:, :, None, None] & finite                        # (B, T, H, Dg)
        s = self.state
        # Sum over the gate's dimensions in float32 first: no float64 copy of an elementwise gate.
        per_pos = g.masked_fill(~valid, 0.0).sum(3).double()                           # (B, T, H)
        s.gate_sum[:, a].index_add_(0, seq, per_pos.sum(1))
        s.gate_n[:, a].index_add_(0, seq, valid.sum((1, 3)))
        s.gate_low[:, a].index_add_(0, seq, ((g < LOW_GATE) & valid).sum((1, 3)))

    def _sparsity(self, variant: int):
        def update(layer, x, b) -> None:                                # (B, T, H, D) or (B, T, H * D)
            if layer not in self.column:
                return
            seq, a = self._rows(b, x.device), self.column[layer]
            # The bins the sparsity histograms read (probe/metrics/bins.py), per row of the batch: the
            # counts of |x| below each cut are those of LogHistogram, exact (NaN, inf count nowhere).
            bins = batch_bins(x, b, self.bin_cuts)
            counts, finite = bins.below(self.cuts), bins.finite()                        # (B, K), (B,)
            s = self.state
            if bins.compiled and s.sparsity_n.device.type == "cpu":     # numpy: a fraction of torch's cost
                np.add.at(s.sparsity_below.numpy()[:, a, variant], seq.numpy(), counts.numpy())
                np.add.at(s.sparsity_n.numpy()[:, a, variant], seq.numpy(), finite.numpy())
                return
            s.sparsity_below[:, a, variant].index_add_(0, seq, counts)
            s.sparsity_n[:, a, variant].index_add_(0, seq, finite)
        return update

    def _massive(self, site: int):
        def update(layer, h, b) -> None:                                                # (B, T, C)
            if h.dim() != 3:
                return
            seq = self._rows(b, h.device)
            scan = row_scan(h, b)                              # float32 on the CPU: M-Act's compiled pass
            if scan is not None and not scan.nonfinite and self.state.m_act.device.type == "cpu":
                # Its row maxima, in numpy (finite at every valid position; padding left out).
                top = scan.row_max.numpy().astype(np.float64)                          # (B, T)
                if not b.all_valid:
                    top = np.where(b.valid.numpy(), top, -math.inf)
                np.maximum.at(self.state.m_act.numpy()[:, layer, site], seq.numpy(), top.max(1))
                return
            top = abs_row_max(h, b).double()                   # (B, T), shared with metrics/massive.py
            if not bool(torch.isfinite(top).all()):                      # NaN / inf: left out
                a = h.double().abs()
                top = a.masked_fill(~torch.isfinite(a), -math.inf).amax(2)
            top = top.masked_fill(~b.valid.to(h.device), -math.inf).amax(1)              # (B,)
            column = self.state.m_act[:, layer, site]
            self.state.m_act[:, layer, site] = column.scatter_reduce(0, seq, top, "amax")
        return update

    def frames(self, done) -> dict:
        anatomy = done.metrics.get("anatomy")
        return {"per_sequence": sequence_frame(done.name, self, done.metrics["loss"].stats, done.documents,
                                               getattr(anatomy, "sequences", None) if anatomy is not None
                                               and anatomy.enabled else None,
                                               getattr(done.control, "per_sequence", None))}

    def summarise(self, a, layers, done) -> dict:
        """The 95% intervals beside the numbers (probe/intervals/), from the table just built."""
        from ...intervals import SequenceValues, describe, summary_intervals

        values = done.derived_from("sequence_values", a.per_sequence, SequenceValues.from_frame)
        top = summary_intervals(values, done.resamples, SINK_EPSILON, layers) if values is not None else {}
        return {**{k: top.get(k) for k in self.SUMMARY_KEYS[:-1]}, "intervals": describe(values, done.resamples)}


def sequence_frame(name: str, metric: PerSequence, loss, documents=None, anatomy=None,
                   control=None) -> pd.DataFrame:
    """per_sequence.csv: one row per sequence and number (declared in per_sequence/__init__.py);
    documents: per sequence its document, written (quantity `document`) when a document holds
    several sequences (sliding windows), so that the bootstrap draws them together; anatomy: the
    sink anatomy's SequenceAnatomy (metrics/anatomy/sequences.py) when the option is on; control:
    the exact mean-gate control's ControlSequences (run/control.py), written as the `mean_gate`
    variant of sparsity_below / sparsity_n for its gated layers."""
    s, layout = metric.state.to("cpu"), metric.layout
    S = s.rows if metric.fixed else max(s.rows, loss.seq_nll.shape[0])
    layers = list(metric.column)
    columns: dict[str, list] = {c: [] for c in ("sequence", "layer", "head", "quantity", "key", "threshold", "value")}

    def add(quantity, values, layer_ids=None, heads=False, key="", threshold=math.nan):
        """values: (S,), (S, layers) or (S, layers, heads); its rows, sequence-major, as arrays
        (one DataFrame is made from all of them at the end)."""
        v = values.double()
        if v.shape[0] < S:
            v = grown(v, S, 0)
        if v.dim() == 1:
            v = v[:, None]
        lid = [-1] if layer_ids is None else layer_ids
        if v.dim() == 2:
            v = v[:, :, None]
        H = v.shape[2]
        n = S * len(lid) * H
        columns["sequence"].append(np.repeat(np.arange(S), len(lid) * H))
        columns["layer"].append(np.tile(np.repeat(np.asarray(lid, dtype=np.int64), H), S))
        columns["head"].append(np.tile(np.arange(H), S * len(lid)) if heads else np.full(n, -1))
        columns["quantity"].append(np.full(n, quantity, dtype=object))
        columns["key"].append(np.full(n, key, dtype=object))
        columns["threshold"].append(np.full(n, threshold, dtype=np.float64))
        columns["value"].append(v.reshape(-1).numpy())

    add("f_attn_sum", s.f_attn_sum, layers, heads=True)
    add("f_attn_n", s.f_attn_n, layers)
    add("f_attn_uniform", s.f_attn_uniform, layers)
    if layout.gated:
        add("gate_sum", s.gate_sum, layers, heads=True)
        add("gate_n", s.gate_n, layers, heads=True)
        add("gate_low", s.gate_low, layers, heads=True, threshold=LOW_GATE)
    for v, variant in enumerate(SPARSE_VARIANTS):
        for k, t in enumerate(HEADLINE_THRESHOLDS):
            add("sparsity_below", s.sparsity_below[:, :, v, k], layers, key=variant, threshold=t)
        add("sparsity_n", s.sparsity_n[:, :, v], layers, key=variant)
    if control is not None:
        ids = [layer for layer in control.layers if layer in control.cuts]
        at = [control.column[layer] for layer in ids]
        for k, t in enumerate(control.thresholds):
            add("sparsity_below", control.below[:, at, k], ids, key="mean_gate", threshold=t)
        add("sparsity_n", control.n[:, at], ids, key="mean_gate")
    all_layers = [p.index for p in layout.layers]
    m = s.m_act.masked_fill(torch.isinf(s.m_act), math.nan)        # no finite value: NaN
    for k, site in enumerate(SITES):
        add("m_act", m[:, :, k], all_layers, key=site)
    if anatomy is not None:
        an = anatomy.to("cpu")
        add("key0_score", an.key0_score, layers, heads=True)
        add("key0_n", an.key0_n, layers)
        add("secondary_sinks", an.secondary, layers)
    add("nll", loss.seq_nll, None)
    add("nll_n", loss.seq_count, None)
    if documents:
        add("document", torch.tensor(documents[:S], dtype=F64), None)
    frame = pd.DataFrame({c: np.concatenate(parts) for c, parts in columns.items()})
    frame.insert(0, "model", name)
    return frame[list(DECLARATION.tables["per_sequence"])]
