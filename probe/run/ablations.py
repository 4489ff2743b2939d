"""Sink ablations: what the loss does, position by position, when the sink is taken away.

    tables = probe.run.ablations.run(loaded, dataset, options, reference=capture)

Each ablation (probe/core/ablation_kinds.py) is one pass over the same held-out sequences:

  window / key0 / value0   key masks in probe's own attention back-end (capture/key_ablation.py),
                           in every full-attention layer or the ones `layers=` names
  first_*                  the input changed: first token removed (the sequence shifted), a BOS
                           prepended, the first token replaced by a named token
  massive_*                the massive activations of a layer's output (the threshold of
                           interventions.py, from the reference pass) set to zero or to their
                           mean over the data (per channel, locuslab's set_mean), in the first
                           layer that has any and in every layer

Every pass keeps the next-token loss per sequence and per target-position bucket ([1, 2), [2, 4),
...) on the original sequence's positions, so the unablated pass on the same tokens is the
reference (a removed first token leaves target 1 out of both). Δloss carries a paired bootstrap
interval over sequences (the same resampling weights for both: probe/intervals/paired_loss.py);
an interval that holds 0 reads "no measurable effect". F-Attn is measured again under each
ablation, from the back-end's lse, as the first-token metric does.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import torch

from . import distributed
from .batches import for_each_batch
from ..capture.hooks import first_output, installed, replace_first, using_probe_attention
from ..capture.logits import forward_for
from ..capture.key_ablation import ablating
from ..capture import attention
from ..core.ablation_kinds import ALL_LAYERS, Ablation, parse_plan
from ..core.errors import ProbeError, flag
from ..families.key_masks import KeyAblation
from ..intervals.paired_loss import bucket_edges, paired_deltas
from ..metrics.loss.reduce import next_token_nll
from .interventions import MASSIVE_MIN_ABS, MASSIVE_RATIO, massive_thresholds


class _FirstKey:
    """Observer: per attention layer, sum and count of P[t, 0] over queries t >= 1 that count;
    with `anatomy`, also the attention every key position receives (sink anatomy's kernel,
    metrics/anatomy/received.py), summed over layers, heads and queries."""

    def __init__(self, anatomy: bool):
        self.anatomy, self.valid = anatomy, None
        self.reset()

    def reset(self):
        self.sum, self.n, self.received = {}, {}, None

    def on_attention(self, module, query, key, out, lse, mask, scale, softcap=None, value=None):
        p0 = attention.first_key_probability(query, key, lse, mask, scale, softcap=softcap)   # (B, H, T)
        w = self.valid[:, None, 1:].to(p0.device)                                             # (B, 1, T-1)
        layer = module.layer_idx
        self.sum[layer] = self.sum.get(layer, 0.0) + float((p0[..., 1:].double() * w).sum())
        self.n[layer] = self.n.get(layer, 0) + int(w.sum()) * p0.shape[1]
        if self.anatomy:
            from ..metrics.anatomy.received import received_attention

            got = received_attention(query, key, lse, mask, scale, softcap=softcap,
                                     valid=self.valid.to(query.device)).total.sum((0, 1)).cpu()   # (S,)
            if self.received is None or len(self.received) < len(got):
                grown = torch.zeros(len(got), dtype=torch.float64)
                if self.received is not None:
                    grown[:len(self.received)] = self.received
                self.received = grown
            self.received[:len(got)] += got

    def f_attn(self) -> float:
        values = [self.sum[i] / self.n[i] for i in self.n if self.n[i]]
        return float(np.mean(values)) if values else math.nan

    def top_keys(self, k: int = 3) -> str:
        """'position:share ...' of the k key positions that receive the most attention, as shares
        of all attention of the pass (every layer, head and counted query); '' without anatomy."""
        if self.received is None or float(self.received.sum()) <= 0:
            return ""
        share = self.received / self.received.sum()
        top = torch.argsort(share, descending=True, stable=True)[:k]
        return " ".join(f"{int(i)}:{float(share[i]):.3f}" for i in top)


class _PositionLoss:
    """Per sequence and target-position bucket of the original sequence: nll sums and counts."""

    def __init__(self, sequences: int, T: int):
        self.edges = bucket_edges(T)                                        # (K + 1,)
        self.nll = np.zeros((sequences, len(self.edges) - 1))
        self.n = np.zeros((sequences, len(self.edges) - 1), dtype=np.int64)

    def update(self, logits, ids, valid, seq_index, offset: int) -> None:
        """logits (B, T, V), or LazyLogits (long sequences, large vocabularies: capture/logits.py);
        target t + 1 of the fed ids is the original's t + 1 + offset."""
        nll = next_token_nll(logits, ids).double().cpu()                              # (B, T-1)
        where = torch.arange(1, ids.shape[1]) + offset                                # original positions
        keep = valid[:, 1:].bool() & (where >= 1)[None] & torch.isfinite(nll)
        bucket = np.searchsorted(self.edges, where.clamp_min(1).numpy(), side="right") - 1
        for b, s in enumerate(seq_index.tolist()):
            k = keep[b].numpy()
            np.add.at(self.nll[s], bucket[k], nll[b].numpy()[k])
            np.add.at(self.n[s], bucket[k], 1)


@dataclasses.dataclass
class Prepared:
    """What `prepare` settled before the analysis pass: every check that can fail has run."""
    loaded: object
    dataset: object
    options: object
    layers: list[int]                       # the layers key masks apply to
    todo: list[tuple[Ablation, object, int]]   # (ablation, the dataset its pass reads, target offset)


def prepare(loaded, dataset, options) -> Prepared:
    """Check the --ablate spec against this model and data (layers, tokens, BOS) in one line each,
    before the analysis pass runs."""
    if distributed.group()[1] > 1:
        raise ProbeError(f"{flag('ablate')} runs in one process; run it without torchrun")
    plan = parse_plan(options.ablate, options.seq_len)
    layers = _mask_layers(loaded.model.config, loaded.layout, plan.layers, dataset.longest)
    todo = [(a, *_inputs(a, dataset, loaded.tokenizer)) for a in plan.ablations]
    return Prepared(loaded, dataset, options, layers, todo)


def preflight(path, options) -> None:
    """The checks of `prepare` that the checkpoint's config and tokenizer files answer, before any
    weight is read (a GGUF file is dequantised in full first): the layers the masks may take
    (a sliding-window layer already hides key 0), the replacement token, a BOS to prepend.
    Anything else (a model object, a hub id, a folder the config cannot be built from) waits for
    `prepare`, after loading, which repeats every check on the real model and data."""
    from pathlib import Path

    from ..load.loader import config_and_layout_without_weights, load_tokenizer

    if not isinstance(path, (str, Path)) or not Path(path).exists():
        return
    found = config_and_layout_without_weights(path, options.gate)
    if found is None:
        return
    config, layout = found
    plan = parse_plan(options.ablate, options.seq_len, warn=False)
    _mask_layers(config, layout, plan.layers, max(_lengths(options.seq_len)))
    firsts = [a for a in plan.ablations if a.kind in ("first_replace", "first_bos")]
    if not firsts:
        return
    folder = options.tokenizer or (Path(path) if Path(path).is_dir() else Path(path).parent)
    tokenizer = load_tokenizer(Path(folder))
    if tokenizer is None:
        return                          # a GGUF file's own tokenizer: checked after loading
    for ab in firsts:
        if ab.kind == "first_replace":
            replacement_id(ab.token, tokenizer)
        elif getattr(tokenizer, "bos_token_id", None) is None:
            raise ProbeError(f"{flag('ablate')}: first=bos needs a BOS token and the tokenizer has none")


def _lengths(seq_len) -> list[int]:
    """seq_len as the options hold it: one length, or the lengths of a sweep."""
    return [int(n) for n in seq_len] if isinstance(seq_len, (list, tuple)) else [int(seq_len)]


def run(prepared: Prepared, *, name: str, reference) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(ablations.csv, ablation_positions.csv, ablation_sequences.csv) frames. reference: the analysis pass's Capture
    (its massive-activation statistics give the thresholds)."""
    loaded, dataset, options, layers, todo = (prepared.loaded, prepared.dataset, prepared.options,
                                              prepared.layers, prepared.todo)
    model, layout = loaded.model, loaded.layout
    T = dataset.longest + 1         # + 1: a prepended BOS
    S = len(dataset.sequences)
    dev = next(model.parameters()).device
    thresholds = massive_thresholds(reference, layout, MASSIVE_MIN_ABS, MASSIVE_RATIO)
    # Passes: the unablated one, one per ablation, and one measuring the massive activations'
    # means, shared by the massive_mean ablations (a skipped ablation advances the bar as well).
    means_pass = any(ab.kind == "massive_mean" for ab, _, _ in todo)
    bar = _bar(len(todo) + 1 + means_pass, name) if options.progress else None
    channel_means: dict = {}          # layer -> (C,) mean of its massive values (measured once)
    # Past LAZY_BYTES of logits (Gemma's 262,144-token vocabulary at 8,192 tokens: 8.6 GB, and as
    # much again for a log-sum-exp over them) the head runs a block of rows at a time, as in the
    # analysis pass: every ablation pass stays within the pass's memory.
    with using_probe_attention(model, observer := _FirstKey(options.anatomy)), \
            forward_for(model, batch=options.batch_size, length=T) as forward:
        def one(data, offset, regs=(), masks=None):
            observer.reset()
            loss = _PositionLoss(S, T)
            with installed(regs), ablating(masks or {}), torch.inference_mode():
                for ids, valid, seq_index in for_each_batch(data, options.batch_size, rank=0, world=1,
                                                            progress=False):
                    observer.valid = valid
                    logits = forward(ids.to(dev))                                     # (B, T, V), maybe lazy
                    loss.update(logits, ids, valid, seq_index, offset)
            if bar is not None:
                bar.update()
            return loss, observer.f_attn(), observer.top_keys()

        base, base_f, base_top = one(dataset, 0)
        rows, positions, sequences = [], [], []
        for ab, data, offset in todo:
            note, scope = "", layers
            if ab.masks:
                key = KeyAblation(window=ab.window, sinks=ab.sinks, hide_first=ab.kind == "key0_mask",
                                  zero_first_value=ab.kind == "key0_value")
                got = one(data, offset, masks={layout.layers[i].mixer: key for i in layers})
            elif ab.kind.startswith("massive"):
                scope, regs, note = _massive(ab, layout, thresholds, reference, lambda r: one(dataset, 0, r),
                                             channel_means)
                got = None if regs is None else one(dataset, 0, regs)
                if regs is None and bar is not None:
                    bar.update()
            else:
                got = one(data, offset)
            label = ALL_LAYERS if scope is None or len(scope) != 1 or ab.kind.startswith("massive") and ab.scope == "all" \
                else scope[0]
            r, p, q = _rows(name, ab, label, base, (base_f, base_top), got, options.resamples, dataset.documents,
                            note)
            rows.append(r)
            positions += p
            sequences += q
    if bar is not None:
        bar.close()
    from ..results.schema import OTHER_TABLES

    return tuple(pd.DataFrame(got, columns=list(OTHER_TABLES[table])) for got, table in
                 ((rows, "ablations"), (positions, "ablation_positions"), (sequences, "ablation_sequences")))


def _rows(name, ab: Ablation, layer, base: _PositionLoss, base_attention: tuple, got, resamples, documents, note):
    base_f, base_top = base_attention
    common = dict(model=name, ablation=ab.label, kind=ab.kind, window=ab.window if ab.window else math.nan,
                  sinks=ab.sinks if ab.kind == "window" else math.nan, layer=layer, base_f_attn=base_f,
                  base_top_keys=base_top)
    if got is None:
        return dict(common, tokens=0, loss=math.nan, base_loss=math.nan, delta_loss=math.nan, delta_lo=math.nan,
                    delta_hi=math.nan, effect="not run", f_attn=math.nan, top_keys="", note=note), [], []
    loss, f, top = got
    mask = loss.n > 0                                                       # (S, K) the same tokens
    if not np.array_equal(base.n[mask], loss.n[mask]):
        raise RuntimeError(f"ablation {ab.label}: token counts differ from the unablated pass")
    d = paired_deltas(loss.nll * mask, base.nll * mask, loss.n, resamples, documents)
    overall = d[-1]
    row = dict(common, tokens=int(loss.n.sum()), **overall, effect=_effect(overall), f_attn=f, top_keys=top,
               note=note)
    edges = loss.edges
    pos = [dict(model=name, ablation=ab.label, bucket_lo=int(edges[k]), bucket_hi=int(edges[k + 1]),
                tokens=int(loss.n[:, k].sum()), **d[k]) for k in range(len(edges) - 1) if loss.n[:, k].sum()]
    # Per sequence, over the tokens both passes counted: what a comparison between models pairs.
    seqs = [dict(model=name, ablation=ab.label, sequence=s, tokens=int(loss.n[s].sum()),
                 nll=float((loss.nll[s] * mask[s]).sum()), base_nll=float((base.nll[s] * mask[s]).sum()))
            for s in range(loss.n.shape[0]) if loss.n[s].sum()]
    return row, pos, seqs


def _effect(d: dict) -> str:
    """The direction only where the paired interval excludes 0."""
    lo, hi = d["delta_lo"], d["delta_hi"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no interval"
    return "loss rises" if lo > 0 else "loss falls" if hi < 0 else "no measurable effect"


def _mask_layers(config, layout, wanted, T: int) -> list[int]:
    """The layers key masks apply to: full-attention layers (a sliding-window layer already hides
    key 0 from queries past its window, so masking it is no ablation)."""
    attn = [p.index for p in layout.layers if p.layer_type == "attention"]
    types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)

    def sliding(i):
        if not window or window >= T:
            return False
        return types[i] != "full_attention" if types else bool(getattr(config, "use_sliding_window", True))
    full = [i for i in attn if not sliding(i)]
    if wanted is not None:
        bad = [i for i in wanted if i not in attn]
        if bad:
            raise ProbeError(f"{flag('ablate')}: layers={bad[0]} is not an attention layer (those: "
                             f"{', '.join(map(str, attn))})")
        slid = [i for i in wanted if i not in full]
        if slid:
            raise ProbeError(f"{flag('ablate')}: layer {slid[0]} is a sliding-window layer (window {window}): it "
                             "already hides key 0 from later queries; name full-attention layers only")
        return list(wanted)
    if not full:
        raise ProbeError(f"{flag('ablate')}: the model has no full-attention layer to ablate")
    return full


def _inputs(ab: Ablation, dataset, tokenizer):
    """(the dataset the pass reads, the offset of its targets from the original positions)."""
    if not ab.kind.startswith("first"):
        return dataset, 0
    if dataset.context:
        raise ProbeError(f"{flag('ablate')}: first-token ablations need whole sequences, not sliding "
                         f"windows of long documents ({flag('on_long', 'slide')})")
    seqs = dataset.sequences
    if ab.kind == "first_remove":
        if min(len(s) for s in seqs) < 3:
            raise ProbeError(f"{flag('ablate')}: first=remove needs sequences of at least 3 tokens")
        return dataclasses.replace(dataset, sequences=[s[1:] for s in seqs]), 1
    if ab.kind == "first_bos":
        bos = getattr(tokenizer, "bos_token_id", None)
        if bos is None:
            raise ProbeError(f"{flag('ablate')}: first=bos needs a BOS token and the tokenizer has none")
        if all(int(s[0]) == bos for s in seqs):
            raise ProbeError(f"{flag('ablate')}: first=bos: every sequence already starts with BOS; analyse "
                             f"with {flag('bos', 'none')} to measure what prepending it does")
        return dataclasses.replace(dataset, sequences=[torch.cat([s.new_tensor([bos]), s]) for s in seqs]), -1
    token = replacement_id(ab.token, tokenizer)
    return dataclasses.replace(dataset, sequences=[torch.cat([s.new_tensor([token]), s[1:]]) for s in seqs]), 0


def replacement_id(token: str, tokenizer) -> int:
    """The id of first=replace:TOKEN: id:N, or text the tokenizer encodes as exactly one token."""
    if token.startswith("id:"):
        try:
            value = int(token[3:])
        except ValueError:
            raise ProbeError(f"{flag('ablate')}: replace:{token} is not id:<integer>") from None
        if tokenizer is not None and not 0 <= value < len(tokenizer):
            raise ProbeError(f"{flag('ablate')}: token id {value} is outside the vocabulary (0 .. {len(tokenizer) - 1})")
        return value
    if tokenizer is None:
        raise ProbeError(f"{flag('ablate')}: replace:{token!r} needs a tokenizer; give an id:N instead")
    ids = tokenizer.encode(token, add_special_tokens=False)
    if len(ids) != 1:
        raise ProbeError(f"{flag('ablate')}: the replacement {token!r} is {len(ids)} tokens for this tokenizer; "
                         "name one token (or id:N)")
    return int(ids[0])


def _massive(ab: Ablation, layout, thresholds: dict, reference, measure, channel_means: dict):
    """(layers, hooks or None when nothing reaches a threshold, note). channel_means: the means
    measured so far, layer -> (C,); the first massive_mean ablation measures them for every layer
    with a massive activation, in one pass (the pass only reads the outputs, so each layer's
    means are the same whichever layers are measured with it), and the others reuse them."""
    hit = [i for i in sorted(thresholds) if reference.massive[(i, "resid_post")].max_abs() >= thresholds[i]]
    if not hit:
        return list(thresholds), None, "no activation reached the threshold: nothing to ablate"
    layers = hit[:1] if ab.scope == "first" else hit
    means = None
    if ab.kind == "massive_mean":
        if not set(layers) <= channel_means.keys():
            channel_means.update(_means(layout, {i: thresholds[i] for i in hit}, measure))
        means = {i: channel_means[i] for i in layers}
    return layers, _set_massive(layout, {i: thresholds[i] for i in layers}, means), \
        f"layers {','.join(map(str, layers))}"


def _set_massive(layout, thresholds: dict, means: dict | None) -> list:
    """Hooks that set |h| >= threshold in the layers' outputs to 0, or to the channel's mean."""
    regs = []
    for p in layout.layers:
        if p.index in thresholds:
            def hook(module, args, output, i=p.index):
                h = first_output(output)                                    # (B, T, C)
                hit = h.abs() >= thresholds[i]
                fill = 0.0 if means is None else means[i].to(h.device, h.dtype).expand_as(h)
                return replace_first(output, h.masked_fill(hit, 0.0) if means is None else torch.where(hit, fill, h))
            regs.append((p.layer, "forward", hook))
    return regs


def _means(layout, thresholds: dict, measure) -> dict:
    """Per layer, (C,) the mean of each channel's massive values over the data (one pass)."""
    sums, counts = {}, {}

    def keep(module, args, output, i):
        h = first_output(output).double()                                   # (B, T, C)
        hit = h.abs() >= thresholds[i]
        sums[i] = sums.get(i, 0) + (h * hit).sum((0, 1))
        counts[i] = counts.get(i, 0) + hit.sum((0, 1))
    regs = [(p.layer, "forward", lambda m, a, o, i=p.index: keep(m, a, o, i))
            for p in layout.layers if p.index in thresholds]
    measure(regs)
    return {i: (sums[i] / counts[i].clamp_min(1)).float() for i in sums}


def _bar(total: int, name: str):
    from ..core.progress import bar

    return bar(total=total, desc=f"ablations {name}")
