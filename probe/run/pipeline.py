"""What every analysis does whatever the model source: the pass over the batches, the tables,
meta.json and summary.json.

    source.HFSource (Hugging Face: load, hooks)    \
                                                    >  pipeline.run_pass -> pipeline.assemble -> Analysis
    source.BridgeSource (TransformerLens bridge)   /

A source provides the events (probe/core/events.py) through a `Pass` (capture.Capture,
bridge.BridgeCapture) and a `forward(ids) -> logits`; the metrics (probe/metrics/) do the rest.
The batches come from batches.for_each_batch, the loop the interventions and the exact control
share.
"""
from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import platform
import sys
import warnings
from pathlib import Path

import pandas as pd
import torch

from .batches import for_each_batch
from ..data.sequences import Dataset, build_dataset
from ..core.errors import ProbeError, flag
from ..load.finite import describe, non_finite_weights
from ..load.fingerprint import embedding_fingerprint
from ..load.loader import DTYPES, LoadedModel
from ..metrics import DECLARATIONS, summary_order
from ..metrics.base import Done
from ..metrics.massive.reduce import token_text
from ..core.options import AnalysisOptions
from ..results.analysis import Analysis

MEASURED_AS_IS = "a model object is measured as it is: convert or move it yourself, or pass its checkpoint path"


# -- before the pass ----------------------------------------------------------------------------

def check_model_as_is(model, *, dtype: str | None, device: str | None, device_map) -> None:
    """One line when a dtype / device / device_map is asked of a model that is already built:
    probe does not convert or move a user's model behind their back, and must not record a
    dtype it did not measure in."""
    params = next(model.parameters())
    if device_map is not None:
        raise ProbeError(f"device_map={device_map!r} places a model while loading it; {MEASURED_AS_IS}")
    if dtype is not None:
        if dtype not in DTYPES:
            raise ProbeError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
        if DTYPES[dtype] != params.dtype:
            held = str(params.dtype).replace("torch.", "")
            raise ProbeError(f"dtype={dtype!r} but the model holds {held} weights; {MEASURED_AS_IS} "
                             f"(or pass dtype={held!r})")
    if device is not None:
        try:
            asked = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise ProbeError(f"unknown device {device!r} ({err})") from None
        where = params.device
        if asked.type != where.type or (asked.index is not None and asked.index != (where.index or 0)):
            raise ProbeError(f"device={device!r} but the model sits on {where}; {MEASURED_AS_IS} "
                             f"(or pass device={str(where)!r})")


def dataset_for(data, texts, tokenizer, config, o: AnalysisOptions) -> Dataset:
    """The sequences the options ask for, their token ids checked against the vocabulary."""
    # The data's warnings (a document truncated, a short text) wait for the vocabulary check:
    # data that is refused gets its one line, not remarks on data that will not be read.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        dataset = build_dataset(data, tokenizer, o, max_positions=max_positions(config, o), texts=texts)
    check_vocab(dataset, config)
    for w in said:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return dataset


def max_positions(config, o: AnalysisOptions) -> int | None:
    """The longest sequence the data may make: the config's positions, or none at all for a
    RoPE model under past_positions (rotary positions are computed, not looked up)."""
    from ..load import rope

    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if o.past_positions:
        if rope.rope_of(config) is None:
            raise ProbeError(f"{flag('past_positions')}: the model has no rotary position embedding (its "
                             f"positions are a table of {positions}); leave the option out")
        return None
    return positions


def check_vocab(dataset: Dataset, config) -> None:
    vocab = getattr(config, "vocab_size", None)
    top = max(int(s.max()) for s in dataset.sequences)
    if vocab is not None and top >= vocab:
        raise ProbeError(f"token id {top} is outside the model's vocabulary of {vocab}; "
                         "the data was tokenized for another model")


def activation_values(config, layout, dataset: Dataset) -> int | None:
    """The analysis's work in activation values: its tokens x the hidden size x the layers
    (what each site's events hold, summed over the pass); None where the config has no hidden
    size. metrics/kernels.py `sized_for` reads it."""
    hidden = getattr(config, "hidden_size", None)
    if not isinstance(hidden, int):
        return None
    return sum(len(s) for s in dataset.sequences) * hidden * len(layout.layers)


def data_token_ids(dataset) -> torch.Tensor:
    """(U,) int64: the distinct token ids of the data, sorted: the ids the token groups classify
    and the rows of the by-token tables (probe/metrics/token_index.py), the same in every
    torchrun process and on --resume."""
    return torch.cat(dataset.sequences).unique()


def token_group_table(layout, tokenizer, config, dataset, token_groups):
    """Token groups for gates_by_token_type, or None for an ungated model.

    Only the ids present in the data are classified; the vocabulary size falls back to
    the largest id seen when the config has none.
    """
    if not layout.gated:
        return None
    from ..data.token_types import TokenGroups

    present = data_token_ids(dataset)                                                # (U,)
    vocab = getattr(config, "vocab_size", None) or int(present.max()) + 1
    return TokenGroups.build(tokenizer, vocab, token_groups, ids=present.tolist())


# -- the pass -------------------------------------------------------------------------------------

def run_pass(cap, forward, dataset: Dataset, o: AnalysisOptions, *, dev, desc: str, rank: int = 0,
             world: int = 1, saver=None) -> None:
    """Every batch (this process's share under torchrun) through `forward(ids) -> logits`, with
    `cap` (a Pass that is also the context manager of its hooks) receiving the events.
    saver: resume.PassCheckpoint, or None; batches it has already counted are skipped."""
    with torch.inference_mode(), cap, saver or contextlib.nullcontext():
        done = saver.start(cap, o.resume) if saver else 0
        batches = for_each_batch(dataset, o.batch_size, rank=rank, world=world, skip=done,
                                 progress=o.progress, desc=desc, device=dev)
        for n, (ids, valid, seq_index) in enumerate(batches, start=done):
            with cap.batch(ids, valid, seq_index):
                # No attention_mask: padding sits on the right, so under causal attention no real
                # token sees it, and no T x T padding mask is ever built.
                cap.observe_logits(forward(ids))
            if saver:
                saver.after_batch(cap, n + 1)


# -- after the pass ------------------------------------------------------------------------------

# Where in a layer each metric meets its values, in the order of the forward pass.
SITE_ORDER = ("gate", "gdn", "head_norm", "attn_out", "resid_mid", "mlp_out", "resid_post")


def forward_order(key: str) -> tuple:
    """Sort key of a nonfinite_activations entry, "layer:site" (or "loss_pairs"): by layer,
    then by where the forward pass meets the site; entries without a layer last."""
    layer, _, site = key.partition(":")
    if not layer.isdigit():
        return (1, 0, 0, key)
    return (0, int(layer), SITE_ORDER.index(site) if site in SITE_ORDER else len(SITE_ORDER), site)


def nonfinite_warning(nonfinite: dict[str, int], bad_weights: list[tuple[str, int]] = ()) -> str:
    """One line: how many NaN/inf activation values, the first layer:site the forward pass meets
    (nonfinite sorted by forward_order), the loss's non-finite values apart (not activations),
    and, where the weights themselves hold NaN/inf (load.finite), that the checkpoint is damaged:
    the statistics then describe the finite part of a broken model, not the model."""
    sites = {key: n for key, n in nonfinite.items() if ":" in key}
    rest = {key: n for key, n in nonfinite.items() if ":" not in key}
    parts = []
    if sites:
        parts.append(f"{sum(sites.values())} NaN/Inf activation values were seen "
                     f"(first at layer:site {next(iter(sites))})")
    if rest:
        parts.append(f"{sum(rest.values())} token losses were not finite")
    line = "; ".join(parts) + "; statistics use finite values only"
    if bad_weights:
        line += (f". The weights are not finite ({describe(bad_weights)}): the checkpoint is damaged, and "
                 "these numbers describe what is left of it; fix or re-download it")
    return line


def assemble(cap, loaded: LoadedModel, dataset: Dataset, name: str, dev, o: AnalysisOptions, *,
             patterns: pd.DataFrame, control=None, world: int = 1) -> Analysis:
    """The Analysis of a finished pass (reducers on the CPU): every metric's tables, meta.json
    (provenance, then each metric's keys) and summary.json."""
    done = Done(name, loaded.tokenizer, cap.metrics, control, resamples=o.resamples, documents=dataset.documents)
    frames = cap.tables(name, loaded.tokenizer, control, dataset.documents)
    analysis = Analysis(meta={"name": name}, summary={}, attention_patterns=patterns, **frames)
    analysis.token_series = token_series(cap, done)
    analysis.meta = build_meta(loaded, dataset, name, dev, o)
    analysis.meta["display_tokens"] = [token_text(loaded.tokenizer, int(t))
                                       for t in dataset.sequences[0][:o.display_len]]
    analysis.meta["windows"] = dataset.windows
    analysis.meta["processes"] = world
    from ..data.token_types import describe_groups

    analysis.meta["token_groups"] = describe_groups(o.token_groups)
    nonfinite = {}
    for metric in cap.metrics.values():
        nonfinite.update(metric.nonfinite())
    nonfinite = dict(sorted(nonfinite.items(), key=lambda item: forward_order(item[0])))
    analysis.meta["nonfinite_activations"] = nonfinite
    if nonfinite:            # the weights are read only then: a NaN activation may come from them
        warnings.warn(nonfinite_warning(nonfinite, non_finite_weights(loaded.model)))
    for metric in cap.metrics.values():
        analysis.meta.update(metric.meta(done))
    analysis.meta["layer_types"] = [p.layer_type for p in cap.layout.layers]
    analysis.summary = build_summary(analysis, cap, done, dataset)
    warn_without_intervals(analysis.summary.get("intervals") or {})
    return analysis


def warn_without_intervals(how: dict) -> None:
    """Intervals were asked for (resamples > 0) but the data holds too few sequences (documents,
    under sliding windows) to resample: say so, or a one-sequence run's numbers read as sure."""
    from ..intervals import MIN_SEQUENCES

    units = how.get("documents", how.get("sequences"))
    if how.get("resamples") and units is not None and units < MIN_SEQUENCES:
        what = "documents" if "documents" in how else "sequences"
        warnings.warn(f"{units} {what[:-1] if units == 1 else what}: the summary has no 95% intervals (the bootstrap "
                      f"needs {MIN_SEQUENCES} {what} or more); give more data or raise "
                      f"{flag('max_sequences')} to have them")


def token_series(cap, done: Done):
    """The per-token series of the pass (probe/metrics/token_series/), quantised as the run
    directory keeps them, or None when none were taken."""
    from ..metrics.token_series import SERIES
    from ..results.token_series import TokenSeries

    captured = cap.metrics["token_series"].captured(done)
    return None if captured is None else TokenSeries.from_capture(captured, SERIES)


def build_summary(a: Analysis, cap, done: Done, dataset: Dataset) -> dict:
    """summary.json: the run's shape, each metric's keys (in the declarations' summary_order),
    the counts and per-layer detail: each layer's entry holds every declaration's layer_keys,
    empty until its metric fills them, then the per-head values (docs/run-directory.md)."""
    layout = cap.layout
    layer_types = [p.layer_type for p in layout.layers]
    layers = [{"layer": layer, "layer_type": kind,
               **{key: copy.deepcopy(empty) for d in sorted(DECLARATIONS, key=lambda d: d.layer_order)
                  for key, empty in d.layer_keys.items()},
               "heads": []} for layer, kind in enumerate(layer_types)]
    summary = {"model": a.meta.get("name"), "gated": layout.gated, "gate_layout": layout.gate_layout,
               "num_layers": len(layer_types), "num_heads": layout.num_heads,
               "attention_layers": [i for i, t in enumerate(layer_types) if t == "attention"]}
    # first_token writes each layer's heads before gates fills in their mean gate.
    parts = {m.name: m.summarise(a, layers, done) for m in cap.metrics.values()}
    for declaration in summary_order():
        summary.update(parts[declaration.name])
    summary.update(tokens=dataset.tokens, sequences=len(dataset.sequences), layers=layers)
    return summary


def build_meta(loaded: LoadedModel, dataset: Dataset, name, dev, options: AnalysisOptions) -> dict:
    import transformers

    from .. import __version__

    model, layout = loaded.model, loaded.layout
    archs = getattr(model.config, "architectures", None) or [type(model).__name__]
    return {
        "name": name,
        "checkpoint": loaded.path,
        "config_hash": loaded.config_hash,
        "weights": loaded.weights,             # GGUF: file, quantisation, dequantised to what
        "architecture": archs[0],
        "model_class": type(model).__name__,
        "model_type": layout.model_type,
        "family": layout.family,
        "layout_note": layout.note or None,    # an unregistered decoder analysed as ungated says so
        "gate_layout": layout.gate_layout,
        "gate": None if layout.gate is None else vars(layout.gate).copy(),
        "num_layers": len(layout.layers),
        "num_heads": layout.num_heads,
        "num_kv_heads": layout.num_kv_heads,
        "head_dim": layout.head_dim,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "device": str(dev),
        "data": dataset.source,
        "data_files": dataset.files,           # [{"file", "documents"}]; None for data in memory
        "tokens": dataset.tokens,
        "tokens_sha256": dataset.digest(),     # runs with equal digests saw the same token ids
        "sequences": len(dataset.sequences),
        # What was used: --max-length or the model's positions may lower --seq-len.
        "longest_sequence": max((len(x) for x in dataset.sequences), default=0),
        "bos_policy": dataset.bos_policy,
        "bos_token_id": dataset.bos_token_id,
        "position0": dataset.position0,
        "data_notes": dataset.notes,
        # Which weights these are (a graft's record names its base's) and where they come from
        # (graft / train_recipe): what a matched pair in a report needs.
        "embedding_fingerprint": embedding_fingerprint(model),
        **origin(loaded.path, model),
        **options.meta_fields(),               # seq_len, thresholds, seed, command
        # Only when asked for (runs without them read as before): the position scaling applied
        # on load (rope.apply's record) and whether a RoPE model ran past its positions.
        **({"rope_scaling": loaded.rope_scaling} if loaded.rope_scaling else {}),
        **({"past_positions": True} if options.past_positions else {}),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"probe": __version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "python": sys.version.split()[0],
                     "platform": platform.platform()},
    }


def origin(path, model=None) -> dict:
    """Where a checkpoint comes from, when probe made it: `graft` (probe graft's record in its
    config.json: base, base_digest, gate, init) and `train_recipe` (probe train's settings from
    train_config.json, without the output folder). Reports pair a gated model with its own
    baseline from these (reports/claims/pairs.py)."""
    import json

    folder = checkpoint_of(path)
    out = {}
    if folder is None:
        # A model in memory (a graft being trained, probe.analyze(model)): its config carries
        # the graft's record as config.json did.
        graft = getattr(getattr(model, "config", None), "graft", None)
        return {"graft": graft} if isinstance(graft, dict) else out
    try:
        graft = json.loads((folder / "config.json").read_text()).get("graft")
        if isinstance(graft, dict):
            out["graft"] = graft
        if (folder / "train_config.json").is_file():
            recipe = json.loads((folder / "train_config.json").read_text()).get("recipe")
            if isinstance(recipe, dict):
                out["train_recipe"] = {k: v for k, v in recipe.items() if k not in ("out", "name")}
    except (OSError, ValueError):
        pass                                   # not probe's: no origin recorded
    return out


def pattern_frame(name: str, maps: list[tuple[int, torch.Tensor]]) -> pd.DataFrame:
    """attention_patterns.csv of (layer, (T, T) head-averaged attention) pairs: one row per
    query >= key, by layer, query, key (no Python loop over the T (T + 1) / 2 cells)."""
    if not maps:
        return pd.DataFrame()
    parts = []
    for layer, mean in maps:
        q, k = torch.tril_indices(mean.shape[0], mean.shape[1])           # row-major: by query, then key
        parts.append((torch.full_like(q, layer), q, k, mean.float().cpu()[q, k].double()))
    layer, q, k, value = (torch.cat(c).numpy() for c in zip(*parts))
    return pd.DataFrame({"model": name, "layer": layer, "query": q, "key": k, "value": value})


def checkpoint_of(path) -> Path | None:
    return Path(str(path)) if path and (Path(str(path)) / "config.json").exists() else None
