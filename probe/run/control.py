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
from ..metrics.reducers import LogHistogram
from ..api.options import AnalysisOptions


class ControlCounter:
    """Observer of probe's attention back-end: |O| per gated attention layer, at cuts t / m."""

    def __init__(self, layout, mean_gates: dict[int, float], thresholds, state):
        self.state = state                          # interventions._PassState: the batch's valid rows
        self.hists = {layer: LogHistogram(cuts=thresholds, scale=m) for layer, m in mean_gates.items()}
        self._mixer_layer = {id(p.mixer): p.index for p in layout.layers}

    @torch.no_grad()
    def on_attention(self, module, query, key, out, lse, mask, scale, softcap=None, value=None) -> None:
        """out: (B, H, T, D), the pre-gate attention output the main pass counted as `ungated`."""
        layer = self._mixer_layer.get(id(module), getattr(module, "layer_idx", None))
        if layer not in self.hists:
            return
        x = out.transpose(1, 2)                                          # (B, T, H, D)
        valid = self.state.valid
        if valid is not None and not bool(valid.all()):
            x = x[valid.to(x.device)]                                    # (N, H, D) real tokens
        self.hists[layer].follow(x.device).update(x)


class _Counted(Exception):
    """Raised after the last counted layer's attention: the rest of the forward is not needed."""


def count_control(loaded, dataset, cap, options: AnalysisOptions, *,
                  desc: str = "exact control") -> dict[int, LogHistogram]:
    """layer -> LogHistogram of |O| with scale the layer's mean gate (cuts: cap's thresholds).

    cap: the finished (and, under torchrun, merged) main pass over exactly this dataset;
    options: its AnalysisOptions (batch_size, progress; desc: the bar's label). Each forward stops once the last gated
    attention layer has run (no MLP after it, no logits)."""
    from .interventions import _PassState, installed, using_probe_attention

    rank, world = distributed.group()
    means = {layer: cap.gates[layer].mean() for layer in cap.sparsity if layer in cap.gates}
    means = {layer: m for layer, m in means.items() if m > 0}
    thresholds = next(iter(cap.sparsity.values())).thresholds if cap.sparsity else ()
    state = _PassState()
    counter = ControlCounter(cap.layout, means, thresholds, state)
    model = loaded.model
    last = max(means, default=None)

    def stop(module, args, output):
        raise _Counted

    mixers = [(p.mixer, "forward", stop) for p in cap.layout.layers if p.index == last]
    dev = next(model.parameters()).device
    batches = for_each_batch(dataset, options.batch_size, rank=rank, world=world, progress=options.progress,
                             desc=desc)
    with torch.inference_mode(), using_probe_attention(model, counter), installed(mixers):
        for ids, valid, _ in batches:
            state.valid = valid                                          # (B, T), for the counter
            try:
                model(input_ids=ids.to(dev), use_cache=False)
            except _Counted:
                pass
    hists = [counter.hists[layer] for layer in sorted(counter.hists)]
    distributed.merge_reducers(hists)                                    # no-op in one process
    return {layer: h.to("cpu") for layer, h in counter.hists.items()}
