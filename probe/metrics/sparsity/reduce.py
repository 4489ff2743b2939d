"""Sparsity of the attention output: the share of |x| below each threshold, ungated (the
pre-gate output O), under the uniform mean-gate control (O x the layer's mean gate) and gated
(what o_proj receives): sparsity.csv, and the shares at 1e-2 and 1e-3 in summary.json.

Reads attn.hook_sdpa (O, (B, T, H, D)) and attn.hook_z (the o_proj input); the control's
scale comes from the gates metric once the pass is over (control.py counts it exactly).
"""
from __future__ import annotations

from ..bins import batch_bins
from ..reducers import LogHistogram, Reducer, cut_bits
from . import DECLARATION, HEADLINE_THRESHOLDS, VARIANTS
from ..base import Metric, table

VARIANT_ORDER = {v: i for i, v in enumerate(VARIANTS)}


class SparsityStats(Reducer):
    """|attention output| of one layer before and after the gate, as log histograms with
    exact counts below each threshold (`cuts`).

    The uniform-scaling control counts |O| * m < t, with m the layer's mean gate over the same
    data, known only after the whole pass. Which values sit below t / m depends on m down to the
    last bit (for any two float32 values a < b there are m and t with a < t / m <= b), so no
    bounded one-pass state answers it exactly for every m. What is exact in one pass: bfloat16
    outputs, which the ungated histogram holds value by value, and every share on a bin edge.
    Otherwise the control is read from the ungated histogram at t / m, interpolated inside the
    one bin (0.39-0.78% wide) that holds t / m, and marked so; `control.py` (exact_control=True) counts it
    exactly in a second pass with m known, into `control`.
    """

    def __init__(self, device="cpu", *, thresholds):
        self.thresholds = tuple(float(t) for t in thresholds)
        self.ungated = LogHistogram(device, cuts=self.thresholds)
        self.gated = LogHistogram(device, cuts=self.thresholds)

    def merge(self, other: "SparsityStats") -> "SparsityStats":
        self.ungated.merge(other.ungated)
        self.gated.merge(other.gated)
        return self

    def shares(self, mean_gate: float | None, control: LogHistogram | None = None
               ) -> dict[str, dict[float, tuple[float, bool]]]:
        """variant -> threshold -> (share below it, whether it is an exact count).

        control: the second pass's histogram of |O| with scale mean_gate (control.py), if any."""
        out = {"ungated": {t: self.ungated.share_below(t) for t in self.thresholds},
               "gated": {t: self.gated.share_below(t) for t in self.thresholds}}
        if control is not None:                 # counted at the cuts t / m, m its own scale
            out["mean_gate"] = {t: control.share_below(t) for t in self.thresholds}
        elif mean_gate is not None and mean_gate > 0:
            out["mean_gate"] = {t: self.ungated.share_below(t, mean_gate) for t in self.thresholds}
        return out

    def fractions(self, mean_gate: float | None, control: LogHistogram | None = None
                  ) -> dict[str, dict[float, float]]:
        """variant -> threshold -> share below it (see `shares`)."""
        return {v: {t: share for t, (share, _) in by_t.items()}
                for v, by_t in self.shares(mean_gate, control).items()}


def bin_cuts(thresholds) -> tuple[int, ...]:
    """The cut bits that the readers of an attention output's bins ask for: these histograms'
    thresholds and the per-sequence counts' (HEADLINE_THRESHOLDS), counted in the binning pass
    whichever of the two metrics bins first (bins.batch_bins)."""
    return tuple(sorted({cut_bits(t) for t in (*thresholds, *HEADLINE_THRESHOLDS)}))


class Sparsity(Metric):
    declaration = DECLARATION

    def setup(self) -> None:
        layout, options = self.layout, self.options
        thresholds = options.thresholds
        self.cuts = bin_cuts(thresholds)
        self.stats = {i: SparsityStats(thresholds=thresholds) for i in layout.attention_layers}
        self.update_ungated = self._updater("ungated")          # attn.hook_sdpa
        self.update_gated = self._updater("gated")              # attn.hook_z

    def _updater(self, variant: str):
        def update(layer, x, b) -> None:
            if layer in self.stats:
                # |x| from the bits, binned once for this and the per-sequence counts
                getattr(self.stats[layer].follow(x.device), variant).add(batch_bins(x, b, self.cuts))
        return update

    def _shares(self, done):
        """layer -> its mean gate (None without a gate), variant -> threshold -> (share, exact).
        Read once for the tables and the meta alike (kept while the counts and the control stay
        what they were)."""
        gates = done.metrics["gates"]
        seen = self.__dict__.setdefault("_read", {})
        for layer, stats in self.stats.items():
            mean_gate = gates.mean_of(layer)
            control = (done.control or {}).get(layer)
            key = (layer, mean_gate, stats.ungated.total, stats.gated.total)
            if key not in seen or seen[key][0] is not control:
                seen[key] = (control, stats.shares(mean_gate, control))
            yield layer, stats, mean_gate, seen[key][1]

    def frames(self, done) -> dict:
        rows = {c: [] for c in ("model", "layer", "variant", "threshold", "value")}
        # Rows by layer, variant in VARIANTS order, threshold.
        for layer, _, _, shares in sorted(self._shares(done), key=lambda entry: entry[0]):
            for variant in sorted(shares, key=VARIANT_ORDER.__getitem__):
                by_t = sorted(shares[variant].items())
                rows["layer"] += [layer] * len(by_t)
                rows["variant"] += [variant] * len(by_t)
                rows["threshold"] += [t for t, _ in by_t]
                rows["value"] += [v for _, (v, _) in by_t]
        rows["model"] = [done.name] * len(rows["layer"])
        return {"sparsity": table(rows)}

    def summarise(self, a, layers, done) -> dict:
        # The table read once: per layer its variants and the first value at each threshold.
        sp, first = a.sparsity, {}
        if len(sp):
            for key in zip(sp.layer.tolist(), sp.variant.tolist(), sp.threshold.tolist(), sp.value.tolist()):
                first.setdefault(key[:3], key[3])
        variants: dict[int, set] = {}
        for layer, variant, _ in first:
            variants.setdefault(layer, set()).add(variant)
        for entry in layers:
            if entry["layer_type"] != "attention":
                continue
            layer = entry["layer"]
            for variant in sorted(variants.get(layer, ())):           # groupby's order
                entry["sparsity"][variant] = {f"{t:g}": float(first[(layer, variant, t)])
                                              for t in HEADLINE_THRESHOLDS if (layer, variant, t) in first}
        return {}

    def meta(self, done) -> dict:
        """Per variant whether every share is an exact count, and the largest error the others
        can have: the share of values inside the one histogram bin that was interpolated."""
        exact: dict[str, bool] = {}
        bound = 0.0
        for _, stats, mean_gate, shares in self._shares(done):
            for variant, by_t in shares.items():
                exact[variant] = exact.get(variant, True) and all(e for _, e in by_t.values())
                inexact = [t for t, (_, e) in by_t.items() if not e]     # only the one-pass control
                bound = max([bound] + [stats.ungated.bin_share(t, mean_gate) for t in inexact])
        return {"sparsity_exact": exact, "sparsity_error_bound": bound,
                "sparsity_control": "second pass" if done.control is not None else "one pass"}
