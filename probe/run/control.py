"""The mean-gate control counted exactly, in a second pass over the data (exact_control=True).

The uniform-scaling control counts |O| * m < t, with m a layer's mean gate over the whole
dataset. One pass cannot count it exactly with bounded memory: which float32 values lie below
t / m depends on every bit of m (metrics/sparsity/ SparsityStats), and m is known only when the pass is
over. With m known, counting is cheap and exact: this pass runs the same batches through the
model again (as far as the last gated attention layer) and counts each layer's pre-gate
attention output O into a LogHistogram whose cuts are the thresholds at scale m (an exact count
of the bit patterns below each t / m).
Under torchrun each process runs its share of the batches and the counts are summed, as in the
main pass. Nothing but the attention output is read.
"""
from __future__ import annotations

import torch

from . import distributed
from .batches import for_each_batch
from ..metrics.reducers import I64, LogHistogram, Reducer, cut_bits
from ..core.options import AnalysisOptions

FINITE_BITS = 0x7F800000        # float32 bit patterns from here on are inf and NaN


class ExactControl(dict):
    """layer -> LogHistogram of |O| at scale m (what sparsity.csv's control rows read), and
    `per_sequence`: the same counts per sequence at the headline thresholds (ControlSequences),
    which per_sequence.csv keeps for the control's intervals."""

    per_sequence: "ControlSequences | None" = None


class ControlSequences(Reducer):
    """Per sequence and gated attention layer: elements of O with |O| * m below each headline
    threshold (below (S, A, K)) and the finite ones (n (S, A)), m the layer's mean gate. Exact
    as LogHistogram's cuts: a float32 |O| counts iff its bits are below cut_bits(t, m)."""

    summed = ("below", "n")

    def __init__(self, layers: list[int], mean_gates: dict[int, float], thresholds, sequences: int):
        self.layers, self.thresholds = list(layers), tuple(float(t) for t in thresholds)
        self.column = {layer: a for a, layer in enumerate(self.layers)}
        self.cuts = {layer: torch.tensor([cut_bits(t, mean_gates[layer]) for t in self.thresholds])
                     for layer in mean_gates}
        self.below = torch.zeros(sequences, len(self.layers), len(self.thresholds), dtype=I64)
        self.n = torch.zeros(sequences, len(self.layers), dtype=I64)

    def update(self, layer: int, x: torch.Tensor, valid: torch.Tensor | None, seq_index: torch.Tensor) -> None:
        """x (B, T, H, D) the pre-gate output; valid (B, T) or None; seq_index (B,)."""
        a = x.detach().float().abs()
        if valid is not None:
            a = a.masked_fill(~valid.to(a.device)[:, :, None, None], float("nan"))   # counted nowhere
        bits = a.reshape(a.shape[0], -1).view(torch.int32)                           # (B, N)
        cuts = self.cuts[layer].to(bits.device, torch.int32)
        below = torch.stack([(bits < c).sum(1) for c in cuts], 1)                   # (B, K)
        seq, col = seq_index.to(self.below.device), self.column[layer]
        self.below[:, col].index_add_(0, seq, below.to(self.below.device))
        self.n[:, col].index_add_(0, seq, (bits < FINITE_BITS).sum(1).to(self.n.device))


class ControlCounter:
    """Observer of probe's attention back-end: |O| per gated attention layer, at cuts t / m."""

    def __init__(self, layout, mean_gates: dict[int, float], thresholds, state, sequences=None):
        self.state = state                          # interventions._PassState: the batch's valid rows
        self.hists = {layer: LogHistogram(cuts=thresholds, scale=m) for layer, m in mean_gates.items()}
        self._mixer_layer = {id(p.mixer): p.index for p in layout.layers}
        self.sequences = sequences                  # ControlSequences, or None

    @torch.no_grad()
    def on_attention(self, module, query, key, out, lse, mask, scale, softcap=None, value=None) -> None:
        """out: (B, H, T, D), the pre-gate attention output the main pass counted as `ungated`."""
        layer = self._mixer_layer.get(id(module), getattr(module, "layer_idx", None))
        if layer not in self.hists:
            return
        x = out.transpose(1, 2)                                          # (B, T, H, D)
        valid = self.state.valid
        if self.sequences is not None:
            self.sequences.update(layer, x, valid, self.state.seq_index)
        if valid is not None and not bool(valid.all()):
            x = x[valid.to(x.device)]                                    # (N, H, D) real tokens
        self.hists[layer].follow(x.device).update(x)


class _Counted(Exception):
    """Raised after the last counted layer's attention: the rest of the forward is not needed."""


def count_control(loaded, dataset, cap, options: AnalysisOptions, *,
                  desc: str = "exact control") -> ExactControl:
    """layer -> LogHistogram of |O| with scale the layer's mean gate (cuts: cap's thresholds),
    with the per-sequence counts at the headline thresholds beside them (ExactControl).

    cap: the finished (and, under torchrun, merged) main pass over exactly this dataset;
    options: its AnalysisOptions (batch_size, progress; desc: the bar's label). Each forward stops once the last gated
    attention layer has run (no MLP after it, no logits)."""
    from .interventions import _PassState, installed, using_probe_attention

    rank, world = distributed.group()
    means = {layer: cap.gates[layer].mean() for layer in cap.sparsity if layer in cap.gates}
    means = {layer: m for layer, m in means.items() if m > 0}
    thresholds = next(iter(cap.sparsity.values())).thresholds if cap.sparsity else ()
    from ..metrics.sparsity import HEADLINE_THRESHOLDS

    state = _PassState()
    per_sequence = ControlSequences(cap.layout.attention_layers, means, HEADLINE_THRESHOLDS, len(dataset.sequences))
    counter = ControlCounter(cap.layout, means, thresholds, state, per_sequence)
    model = loaded.model
    last = max(means, default=None)

    def stop(module, args, output):
        raise _Counted

    mixers = [(p.mixer, "forward", stop) for p in cap.layout.layers if p.index == last]
    dev = next(model.parameters()).device
    batches = for_each_batch(dataset, options.batch_size, rank=rank, world=world, progress=options.progress,
                             desc=desc)
    with torch.inference_mode(), using_probe_attention(model, counter), installed(mixers):
        for ids, valid, seq_index in batches:
            state.valid, state.seq_index = valid, seq_index              # (B, T), (B,): for the counter
            try:
                model(input_ids=ids.to(dev), use_cache=False)
            except _Counted:
                pass
    hists = [counter.hists[layer] for layer in sorted(counter.hists)]
    distributed.merge_reducers([*hists, per_sequence])                   # no-op in one process
    control = ExactControl({layer: h.to("cpu") for layer, h in counter.hists.items()})
    control.per_sequence = per_sequence.to("cpu")
    return control
