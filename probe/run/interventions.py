"""Interventions: change one thing in the forward pass and measure what it costs in loss.

    frame = probe.run.interventions.run(loaded, dataset)        # model, intervention, layer, loss, ...

Every intervention is a set of forward hooks that exist only for its own pass over the data
and are removed in `finally`, whatever happens (`installed`). What each one does:

  mean_gate     every gate score of a layer replaced by that layer's mean gate score over the
                same data: the input-independent uniform-scaling control, run through the model
                instead of only read off a histogram (the paper's sparsity definition)
  gate_one      gate scores forced to 1: the layer's attention passes ungated
  gate_zero     gate scores forced to 0: the attention branch is removed, the residual stream
                and the MLP still run
  massive_zero  the massive activations of a layer's output (|h| >= massive_min_abs and
                >= massive_ratio x the median |h| of that layer, the criterion of Sun et al. 2024,
                "Massive Activations in Large Language Models") set to zero

Gate interventions write the gate *logits* where the declared `GateSpec` says they are, so the
model's own code applies the activation: a wrongly declared layout changes the wrong numbers,
which `probe check` detects. Each intervention runs once per layer (`layer` = its index) and
once in every layer at the same time (`layer` = -1). `delta_loss` is the change in held-out
next-token loss against the unmodified model on the same tokens, computed by the same code.

Under torchrun (a process group that is up) every process runs its share of the batches under
each intervention, as in the main pass, and the passes' loss sums and counts are merged
(distributed.py), so the table equals a one-process run; the frame's `attrs` say how many
passes ran and how many tokens each process evaluated in them.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn

from . import distributed
from ..core.errors import ProbeError, flag
# The hook plumbing and the gate logits live in hooks.py and gate_logits.py; check.py, control.py
# and analyze.py import these names from here.
from ..capture.gate_logits import gate_channels, gate_logit, set_gate_logits, validate_gate  # noqa: F401
from ..capture.hooks import first_output, installed, replace_first, using_probe_attention  # noqa: F401
from ..capture.logits import forward_for
# The names and their parsing (intervention_kinds.py, which options.py reads without torch).
from ..core.intervention_kinds import ALL_LAYERS, GATE_INTERVENTIONS, INTERVENTIONS, parse_kinds  # noqa: F401
from .batches import for_each_batch
from ..metrics.loss.reduce import LossStats
from ..metrics.reducers import I64, Reducer
from ..core.options import AnalysisOptions
from ..results.schema import OTHER_TABLES

COLUMNS = list(OTHER_TABLES["interventions"])     # interventions.csv, declared in probe/results/schema.py
NO_GATE = "not applicable: the model has no gate"
NOTHING_ZEROED = "no activation reached the threshold: nothing was zeroed, the loss is the unmodified one"
# Sun et al. 2024 call an activation massive when |h| > 100 and about 1000x the median |h|.
MASSIVE_MIN_ABS = 100.0
MASSIVE_RATIO = 1000.0


# -- massive activations ---------------------------------------------------------------------
@dataclass
class _PassState:
    valid: torch.Tensor | None = None      # (B, T) bool: real tokens of the current batch
    seq_index: torch.Tensor | None = None  # (B,) the batch's rows in the dataset


class PassStats(Reducer):
    """What one intervention pass measured on this process's batches; `merge_reducers` adds up
    every process's, so after the merge it describes the whole dataset.

    loss:   next-token loss sums (LossStats: float64 nll, int64 counts)
    zeroed: () int64, massive activations set to zero, on real tokens
    tokens: (world,) int64, real tokens each process ran through the model; a process fills only
            its own slot, so the SUM merge leaves every process's share in every process
    """
    summed = ("zeroed", "tokens")

    def __init__(self, rank: int = 0, world: int = 1, sequences: int | None = None):
        """sequences: the dataset's row count, so the loss's per-row sums have one shape in every
        process (they are merged with all_reduce, which needs equal shapes)."""
        self.rank, self.world = rank, world
        self.loss = LossStats(sequences=sequences)
        self.zeroed = torch.zeros((), dtype=I64)
        self.tokens = torch.zeros(world, dtype=I64)

    def merge(self, other: "PassStats") -> "PassStats":
        super().merge(other)
        self.loss.merge(other.loss)
        return self


def zero_massive(layout, thresholds: dict[int, float], state: _PassState, zeroed: dict[int, int]) -> list:
    """Hooks that zero |h| >= threshold in the given layers' outputs, counting real tokens only."""
    regs = []
    for p in layout.layers:
        if p.index not in thresholds:
            continue

        def hook(module, args, output, layer=p.index, t=thresholds[p.index]):
            h = first_output(output)
            hit = h.abs() >= t                                          # (B, T, C); NaN never hits
            valid = state.valid
            counted = hit if valid is None else hit & valid.to(h.device)[..., None]
            zeroed[layer] = zeroed.get(layer, 0) + int(counted.sum())
            return replace_first(output, h.masked_fill(hit, 0))
        regs.append((p.layer, "forward", hook))
    return regs


# -- the analysis ----------------------------------------------------------------------------
def loss_pass(model: nn.Module, dataset, batch_size: int, state: _PassState | None = None) -> float:
    """Held-out next-token loss over the whole dataset (this process), batched as `probe.analyze` does."""
    return shard_pass(model, dataset, batch_size, state or _PassState(),
                      PassStats(sequences=len(dataset.sequences))).loss.loss()


def shard_pass(model: nn.Module, dataset, batch_size: int, state: _PassState, out: PassStats) -> PassStats:
    """Run this process's batches (every out.world-th from out.rank, as the main pass shards them)
    through the model with whatever hooks are installed, adding the loss and tokens into `out`
    (no bar of its own: run() shows one over the passes)."""
    dev = next(model.parameters()).device
    length = dataset.longest
    try:
        # Logits past LAZY_BYTES a block of rows at a time, as in the analysis pass (capture/logits.py)
        with torch.inference_mode(), forward_for(model, batch=batch_size, length=length) as forward:
            for ids, valid, _ in for_each_batch(dataset, batch_size, rank=out.rank, world=out.world, progress=False):
                state.valid = valid                                     # (B, T), for the hooks
                ids = ids.to(dev)
                logits = forward(ids)                                   # (B, T, V), maybe lazy
                out.loss.update(logits, ids, valid.to(dev))
                out.tokens[out.rank] += int(valid.sum())
    finally:
        state.valid = None
    return out


def run(loaded, dataset, options: AnalysisOptions | None = None, *, name: str | None = None, kinds=None,
        per_layer: bool = True, all_layers: bool = True, massive_ratio: float = MASSIVE_RATIO,
        massive_min_abs: float = MASSIVE_MIN_ABS, reference=None, **overrides) -> pd.DataFrame:
    """Loss of the model under each intervention, against the unmodified model.

    loaded:    a `probe.load(...)` result (`LoadedModel`).
    dataset:   a `probe.data.sequences.Dataset` (held-out token sequences).
    options:   the AnalysisOptions (its batch_size, progress, name, interventions), with
               `overrides` of its fields (run(loaded, dataset, batch_size=2)), checked.
    kinds:     which interventions (default the options' interventions, else all); gate ones
               are skipped for ungated models.
    name:      the model column (default the options' name, else the checkpoint's, run_names.py).
    reference: a `Capture` already run over exactly this dataset, and under torchrun already merged
               over the processes (probe.analyze passes its own), so that the mean gates and the
               massive-activation thresholds are those of the whole dataset on every process;
               without one, a first pass (shared out and merged the same way) measures the loss,
               mean gates and activation medians.
    Returns a frame with columns model, intervention, layer (-1: every layer at once), loss,
    delta_loss, setting (forced gate score, or the massive-activation threshold) and zeroed
    (massive activations set to zero, counted on real tokens) and note (why an intervention did
    not apply: no gate, nothing reached the threshold; empty otherwise). Its `attrs` hold "passes" (passes
    over the data that ran) and "tokens_per_process" (real tokens each process evaluated in
    them; one entry per process of the group, summing to passes x dataset tokens).
    Under a process group every process must call this with the same arguments (collectives).
    """
    from ..capture.hf import Capture
    from .pipeline import run_pass
    from ..results.run_names import run_name

    o = AnalysisOptions.of(options, **overrides)
    batch_size, progress = o.batch_size, o.progress
    kinds = parse_kinds(o.interventions if kinds is None else kinds)
    model, layout = loaded.model, loaded.layout
    validate_gate(layout)
    name = run_name(name or o.name, loaded.path, type(model).__name__)
    rank, world = distributed.group()
    if reference is None:
        # The statistics the interventions need (mean gates, activation medians, the loss), not
        # sink anatomy; sequences: one shape of the per-sequence state in every process.
        reference = Capture(model, layout, o.replace(anatomy=False, token_series=0), sequences=len(dataset.sequences))
        length = dataset.longest
        with forward_for(model, batch=batch_size, length=length, quiet=reference.quiet) as forward:
            run_pass(reference, forward, dataset, o, dev=next(model.parameters()).device,
                     desc=f"reference pass {name}", rank=rank, world=world)
        distributed.merge_reducers(reference.reducers())    # global statistics; no-op in one process
    else:
        _check_reference(reference, dataset, batch_size)
    base = reference.loss.loss()
    rows = [dict(model=name, intervention="none", layer=ALL_LAYERS, loss=base, delta_loss=0.0,
                 setting=math.nan, zeroed=math.nan, note="")]
    gated_layers = [p.index for p in layout.layers if p.gate_module is not None]
    todo = []                                    # (kind, layer label, layers, scores, thresholds)
    for kind in kinds:
        if kind in GATE_INTERVENTIONS:
            for label, layers in _scopes(gated_layers, per_layer, all_layers):
                scores = {i: reference.gates[i].mean() if kind == "mean_gate"
                          else {"gate_one": 1.0, "gate_zero": 0.0}[kind] for i in layers}
                todo.append((kind, label, layers, scores, None))
        elif kind == "massive_zero":
            thresholds = massive_thresholds(reference, layout, massive_min_abs, massive_ratio)
            for label, layers in _scopes(list(thresholds), per_layer, all_layers):
                todo.append((kind, label, layers, None, {i: thresholds[i] for i in layers}))

    state = _PassState()
    # (kind, layers) -> this process's share of the pass; None: skipped, nothing would change.
    done: dict[tuple, PassStats | None] = {}
    bar = _bar(len(todo), name) if progress and rank == 0 else None
    with using_probe_attention(model):
        for kind, _, layers, scores, thresholds in todo:
            key = (kind, tuple(layers))
            if key not in done:               # a model with one gated layer: "all" = that layer
                done[key] = _one_pass(model, layout, dataset, batch_size, reference, state, layers,
                                      scores, thresholds, PassStats(rank, world, len(dataset.sequences)))
            if bar is not None:
                bar.update()
    if bar is not None:
        bar.close()
    # Every process ran the same passes in the same order (the skips depend on merged statistics
    # only), so one merge adds up all of them: two collectives, float64 and int64.
    ran = [s for s in done.values() if s is not None]
    distributed.merge_reducers(ran)

    for kind, label, layers, scores, thresholds in todo:
        stats = done[(kind, tuple(layers))]
        loss = base if stats is None else stats.loss.loss()
        if scores is not None:
            values = set(scores.values())
            setting = values.pop() if len(values) == 1 else math.nan
            zeroed = math.nan
        else:
            setting = thresholds[layers[0]] if len(layers) == 1 else math.nan
            zeroed = 0 if stats is None else int(stats.zeroed)
        note = NOTHING_ZEROED if scores is None and zeroed == 0 else ""
        rows.append(dict(model=name, intervention=kind, layer=label, loss=loss, delta_loss=loss - base,
                         setting=setting, zeroed=zeroed, note=note))
    rows += _not_applied(name, kinds, gated_layers, [r for r in rows if r["intervention"] == "massive_zero"],
                         f"max({massive_min_abs:g}, {massive_ratio:g} x its median |h|)")
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.attrs["passes"] = len(ran)
    frame.attrs["tokens_per_process"] = sum((s.tokens for s in ran), torch.zeros(world, dtype=I64)).tolist()
    return frame


def massive_thresholds(reference, layout, min_abs: float, ratio: float) -> dict[int, float]:
    """layer -> max(min_abs, ratio x the median |h| of its output) over the reference pass, for
    the layers whose median is finite (also the sink ablations' criterion, ablations.py)."""
    thresholds = {}
    for p in layout.layers:
        median = reference.massive[(p.index, "resid_post")].median_abs()
        if math.isfinite(median):
            thresholds[p.index] = max(min_abs, ratio * median)
    return thresholds


def _not_applied(name: str, kinds, gated_layers: list[int], massive_rows: list[dict], criterion: str) -> list[dict]:
    """Say (a warning, and a row of interventions.csv) what was asked and could not apply: gate
    interventions on a model without a gate, massive_zero where nothing reached its threshold."""
    rows = []
    blank = dict(model=name, layer=ALL_LAYERS, loss=math.nan, delta_loss=math.nan, setting=math.nan,
                 zeroed=math.nan)
    skipped = [k for k in kinds if k in GATE_INTERVENTIONS and not gated_layers]
    if skipped:
        warnings.warn(f"{flag('interventions', ','.join(skipped))}: {NO_GATE}; interventions.csv marks them")
        rows += [dict(blank, intervention=k, note=NO_GATE) for k in skipped]
    if "massive_zero" in kinds:
        if not massive_rows:
            rows.append(dict(blank, intervention="massive_zero", note="not applicable: no finite layer output"))
        nothing = [r["layer"] for r in massive_rows if r["note"] == NOTHING_ZEROED and r["layer"] != ALL_LAYERS]
        if massive_rows and all(r["note"] == NOTHING_ZEROED for r in massive_rows):
            warnings.warn(f"{flag('interventions', 'massive_zero')}: {NOTHING_ZEROED} (no layer output reached "
                          f"{criterion})")
        elif nothing:
            warnings.warn(f"{flag('interventions', 'massive_zero')} zeroed nothing in layer(s) "
                          f"{', '.join(map(str, nothing))}; interventions.csv marks them")
    return rows


def _check_reference(reference, dataset, batch_size: int) -> None:
    """Refuse a reference Capture that did not see this whole dataset, such as one process's
    share under torchrun that was never merged: its mean gates, thresholds and loss would be
    that share's, and every intervention would be measured against them."""
    # LossStats scores the pair (t, t + 1) when position t + 1 is real: count those, no model.
    expected = sum(int(valid[:, 1:].sum()) for _, valid, _ in dataset.batches(batch_size, 0))
    seen = int(reference.loss.count) + int(reference.loss.nonfinite)
    # Every process decides together: one that refused alone would leave the others waiting in
    # the merge collectives for ever (a share can equal the whole dataset on rank 0).
    wrong = torch.tensor([int(seen != expected)], dtype=I64)
    if distributed.group()[1] > 1:
        import torch.distributed as dist

        dist.all_reduce(wrong, op=dist.ReduceOp.MAX)
    if int(wrong):
        where = (f"scored {seen} next-token pairs, this dataset has {expected}" if seen != expected
                 else "did not see this whole dataset in another process")
        raise ProbeError(f"the reference Capture {where}: run it over exactly this dataset (under "
                         "torchrun, merge it first with probe.run.distributed.merge_reducers(capture.reducers()))")


def _scopes(layers: list[int], per_layer: bool, all_layers: bool) -> list[tuple[int, list[int]]]:
    """(label, layers) for each pass: one per layer, then every layer at once (label -1)."""
    scopes = [(i, [i]) for i in layers] if per_layer else []
    if all_layers and layers:
        scopes.append((ALL_LAYERS, list(layers)))
    return scopes


def _one_pass(model, layout, dataset, batch_size, reference, state, layers, scores, thresholds,
              out: PassStats) -> PassStats | None:
    """This process's share of one intervention pass, or None when it cannot change anything."""
    if scores is not None:
        regs = set_gate_logits(layout, {i: gate_logit(layout.gate.activation, s) for i, s in scores.items()})
        with installed(regs):
            return shard_pass(model, dataset, batch_size, state, out)
    if all(reference.massive[(i, "resid_post")].max_abs() < thresholds[i] for i in layers):
        # The layers upstream of the first touched one are unmodified, so every touched layer
        # sees the reference pass's activations: none reaches its threshold, nothing changes.
        # (max_abs is the merged maximum, so every process skips the same passes.)
        return None
    zeroed: dict[int, int] = {}
    with installed(zero_massive(layout, thresholds, state, zeroed)):
        shard_pass(model, dataset, batch_size, state, out)
    out.zeroed += sum(zeroed.values())
    return out


def _bar(total: int, name: str):
    from ..core.progress import bar

    return bar(total=total, desc=f"interventions {name}")
