"""`probe.analyze`: one streaming pass over the data, returning an `Analysis`."""
from __future__ import annotations

import contextlib
import datetime as _dt
import math
import platform
import sys
import warnings
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from .capture import SITES, Capture
from .data import Dataset, build_dataset, read_data
from .errors import ProbeError, flag
from .load import (DTYPES, LoadedModel, check_tokenizer_dir, describe, load, load_tokenizer, text_config,
                   warn_if_gate_declared_away)
from .options import AnalysisOptions
from .results import SINK_EPSILON, Analysis, build_summary


def analyze(model, data=None, *, texts: list[str] | None = None, options: AnalysisOptions | None = None,
            **overrides) -> Analysis:
    """Measure gates, first-token attention, massive activations, sparsity and loss.

    model: a checkpoint directory, a loaded Hugging Face causal LM, a `LoadedModel`, or a
           TransformerLens `TransformerBridge` (measured through its own hooks, see bridge.py).
    data:  a path (text, folder, JSONL, .npy/.pt token ids); token ids in memory (a torch tensor
           or numpy array: 1-D a stream cut into seq_len, 2-D (N, T) N sequences as given; a
           list of lists of ints: one sequence each); a list of strings; or pass `texts=[...]`.
    options: an `AnalysisOptions` (probe/options.py: every option, its default and its meaning);
           keyword arguments (seq_len=..., batch_size=..., ...) override its fields, checked.
    A model object (HF model, LoadedModel, bridge) is measured as it is: a dtype or device given
    for it must match it (check_model_as_is). Under torchrun the batches are shared out over the
    processes and the statistics merged (distributed.py); every process returns the same Analysis.
    With `partial`, the pass's state is saved into that folder every `checkpoint_seconds` so that
    an interrupted analysis continues with resume=True and gives the same numbers (resume.py).
    """
    from .bridge import analyze_bridge, is_bridge

    # Every option and the data are checked before the model is loaded or anything written.
    o = (AnalysisOptions() if options is None else options).replace(**overrides)
    data, texts = read_data(data, texts=texts, text_field=o.text_field), None
    if is_bridge(model):
        return analyze_bridge(model, data, options=o)      # honours or refuses every option
    torch.manual_seed(o.seed)
    from . import distributed

    dtype, device = o.dtype, o.device
    if not isinstance(model, (str, Path)):
        held = model.model if isinstance(model, LoadedModel) else model
        check_model_as_is(held, dtype=dtype, device=device, device_map=o.device_map)
        # What it holds, for the resume fingerprint too (a float32 partial run must not be
        # continued with the bfloat16 copy of the same model).
        params = next(held.parameters())
        device = device or str(params.device)
        dtype = dtype or str(params.dtype).replace("torch.", "")
    dtype, device = dtype or "float32", device or "cpu"
    rank, world, device = distributed.setup(device)
    if world > 1 and o.device_map:
        raise ProbeError(f"{flag('device_map')} shards one model over this process's GPUs; under "
                         f"torchrun each process holds a whole model: pass {flag('device', 'cuda')} instead")
    loaded = as_loaded(model, dtype=dtype, device=device, device_map=o.device_map, gate=o.gate,
                       tokenizer=o.tokenizer)
    model, layout = loaded.model, loaded.layout
    from .interventions import validate_gate

    validate_gate(layout)                      # a declared layout that cannot fit: one line, now
    warn_if_gate_declared_away(model, layout, o.gate)
    config = text_config(model.config)
    dataset = dataset_for(data, texts, loaded.tokenizer, config, o)
    name = o.name or loaded.name or type(model).__name__
    dev = next(model.parameters()).device

    groups = token_group_table(layout, loaded.tokenizer, config, dataset, o.token_groups)
    cap = Capture(model, layout, token_groups=groups, thresholds=o.thresholds)
    saver = None
    if o.partial is not None:
        from .resume import PassCheckpoint, fingerprint

        command = o.command or "probe analyze ..."
        saver = PassCheckpoint(o.partial, fingerprint(loaded, dataset, world=world, dtype=dtype,
                                                      gate=layout.gate_layout, **o.resume_fields()),
                               rank=rank, every_seconds=o.checkpoint_seconds,
                               resume_hint=command + ("" if "--resume" in command else " --resume"))
    pad_id = 0
    with torch.inference_mode(), cap, saver or contextlib.nullcontext():
        done = saver.start(cap, o.resume) if saver else 0
        bar = _progress(total=dataset.shard_tokens(o.batch_size, rank, world),
                        disable=not o.progress or rank != 0, desc=f"analyse {name}")
        for n, (ids, valid, seq_index) in enumerate(dataset.batches(o.batch_size, pad_id, rank=rank, world=world)):
            if n < done:                           # counted before an interruption (--resume)
                bar.update(int(valid.sum()))
                continue
            ids, valid = ids.to(dev), valid.to(dev)
            with cap.batch(ids, valid, seq_index.to(dev)):
                # No attention_mask: padding sits on the right, so under causal attention no real
                # token sees it, and no T x T padding mask is ever built.
                out = model(input_ids=ids, use_cache=False)
                cap.observe_logits(out.logits)
            bar.update(int(valid.sum()))
            if saver:
                saver.after_batch(cap, n + 1)
        bar.close()
    distributed.merge_reducers(cap.reducers())     # no-op in one process
    control = None
    if o.exact_control and layout.gated:
        from .control import count_control

        control = count_control(loaded, dataset, cap, batch_size=o.batch_size)
    cap.to("cpu")

    analysis = frames_from_capture(cap, name, loaded.tokenizer, o.thresholds, control=control)
    from .token_types import describe_groups, gate_frame

    analysis.gates_by_token_type = gate_frame(cap, name)
    analysis.attention_patterns = display_patterns(model, layout, dataset, name, o.display_len, dev)
    analysis.meta = build_meta(loaded, dataset, name, dev, o)
    analysis.meta["display_tokens"] = display_tokens(dataset, loaded.tokenizer, o.display_len)
    analysis.meta["windows"] = dataset.windows
    analysis.meta["processes"] = world
    analysis.meta["token_groups"] = describe_groups(o.token_groups)
    summarise_capture(analysis, cap, layout, dataset, control=control)
    if o.interventions:
        from . import interventions as _interventions

        analysis.interventions = _interventions.run(loaded, dataset, name=name, kinds=o.interventions,
                                                    batch_size=o.batch_size, reference=cap, progress=o.progress)
        analysis.meta["interventions"] = list(_interventions.parse_kinds(o.interventions))
        # Who evaluated what: under torchrun each process's share of the intervention passes.
        analysis.meta["intervention_passes"] = analysis.interventions.attrs["passes"]
        analysis.meta["intervention_tokens_per_process"] = analysis.interventions.attrs["tokens_per_process"]
    if saver:
        saver.finish()
    return analysis


def summarise_capture(analysis: Analysis, cap: Capture, layout, dataset: Dataset, control=None) -> None:
    """Non-finite counts and how the sparsity shares were counted into meta (with a warning
    for non-finite values), then summary.json's numbers.

    Shared by the Hugging Face path and the TransformerLens path (bridge.py)."""
    analysis.meta["sparsity_exact"], analysis.meta["sparsity_error_bound"] = sparsity_exact(cap, control)
    analysis.meta["sparsity_control"] = "second pass" if control is not None else "one pass"
    nonfinite = {f"{l}:{s}": int(r.nonfinite) for (l, s), r in cap.massive.items() if int(r.nonfinite)}
    nonfinite.update({f"{l}:gate": int(r.nonfinite.sum()) for l, r in cap.gates.items() if int(r.nonfinite.sum())})
    if int(cap.loss.nonfinite):
        nonfinite["loss_pairs"] = int(cap.loss.nonfinite)
    analysis.meta["nonfinite_activations"] = nonfinite
    if nonfinite:
        warnings.warn(f"{sum(nonfinite.values())} NaN/Inf activation values were seen "
                      f"(first at layer:site {next(iter(nonfinite))}); statistics use finite values only")
    # Queries left out of F-Attn because their attention output row (or P[t, 0]) was not finite.
    dropped = {str(l): int(r.nonfinite) for l, r in cap.first_token.items() if int(r.nonfinite)}
    analysis.meta["f_attn_dropped_queries"] = dropped
    if dropped:
        warnings.warn(f"F-Attn left out {sum(dropped.values())} queries whose attention output was not "
                      f"finite (by layer: {', '.join(f'{l}: {n}' for l, n in dropped.items())}); "
                      "meta.json f_attn_dropped_queries")
    # The mean over attention layers, as the summary's F-Attn: windowed layers have their own.
    references = [s.uniform_reference() for s in cap.first_token.values()]
    uniform = sum(references) / len(references) if references else None
    analysis.meta["layer_types"] = [p.layer_type for p in layout.layers]
    analysis.summary = build_summary(
        analysis, layer_types=analysis.meta["layer_types"], gated=layout.gated,
        gate_layout=layout.gate_layout, num_heads=layout.num_heads, f_attn_uniform=uniform,
        loss=cap.loss.loss(), tokens=dataset.tokens, sequences=len(dataset.sequences))


def dataset_for(data, texts, tokenizer, config, o: AnalysisOptions) -> Dataset:
    """The sequences the options ask for (both paths), their token ids checked against the vocabulary."""
    dataset = build_dataset(data, tokenizer, seq_len=o.seq_len, bos=o.bos, per_document=o.per_document,
                            max_sequences=o.max_sequences, on_long=o.on_long, text_field=o.text_field,
                            max_positions=getattr(config, "max_position_embeddings", None)
                            or getattr(config, "n_positions", None), texts=texts,
                            max_length=o.max_length, stride=o.stride)
    check_vocab(dataset, config)
    return dataset


def as_loaded(model, *, dtype, device, device_map, gate, tokenizer) -> LoadedModel:
    """tokenizer: None (the checkpoint's own), a folder, or a tokenizer object; a folder is
    loaded for a model object too (never stored as if it were a tokenizer)."""
    if isinstance(model, (str, Path)):
        loaded = load(model, dtype=dtype, device=device, device_map=device_map, gate=gate,
                      tokenizer=tokenizer if isinstance(tokenizer, (str, Path)) else None)
        if tokenizer is not None and not isinstance(tokenizer, (str, Path)):
            loaded.tokenizer = tokenizer
        return loaded
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(check_tokenizer_dir(tokenizer))
    if isinstance(model, LoadedModel):
        if tokenizer is None:
            return model
        return LoadedModel(model.model, model.layout, tokenizer, model.path, model.config_hash)
    if isinstance(model, nn.Module) and hasattr(model, "config"):
        model.eval()
        return LoadedModel(model, describe(model, gate, user_declared=gate is not None),
                           tokenizer, getattr(model.config, "_name_or_path", None) or None, None)
    raise ProbeError(f"cannot analyse a {type(model).__name__}; pass a checkpoint directory or a "
                     "Hugging Face causal LM")


def token_group_table(layout, tokenizer, config, dataset, token_groups):
    """Token groups for gates_by_token_type (both paths), or None for an ungated model.

    Only the ids present in the data are classified; the vocabulary size falls back to
    the largest id seen when the config has none.
    """
    if not layout.gated:
        return None
    from .token_types import TokenGroups

    present = torch.cat(dataset.sequences).unique()                                  # (U,)
    vocab = getattr(config, "vocab_size", None) or int(present.max()) + 1
    return TokenGroups.build(tokenizer, vocab, token_groups, ids=present.tolist())


MEASURED_AS_IS = "a model object is measured as it is: convert or move it yourself, or pass its checkpoint path"


def check_model_as_is(model: nn.Module, *, dtype: str | None, device: str | None, device_map) -> None:
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


def check_vocab(dataset: Dataset, config) -> None:
    vocab = getattr(config, "vocab_size", None)
    top = max(int(s.max()) for s in dataset.sequences)
    if vocab is not None and top >= vocab:
        raise ProbeError(f"token id {top} is outside the model's vocabulary of {vocab}; "
                         "the data was tokenized for another model")


def _progress(**kwargs):
    from tqdm.auto import tqdm

    return tqdm(unit="tok", unit_scale=True, leave=False, **kwargs)


def sparsity_exact(cap: Capture, control=None) -> tuple[dict[str, bool], float]:
    """(variant -> whether every share of sparsity.csv in that variant is an exact count, the
    largest error the others can have: the share of values inside the one histogram bin that
    was interpolated, 0 when every share is exact)."""
    exact: dict[str, bool] = {}
    bound = 0.0
    for layer, stats in cap.sparsity.items():
        mean_gate = cap.gates[layer].mean() if layer in cap.gates else None
        for variant, shares in stats.shares(mean_gate, (control or {}).get(layer)).items():
            exact[variant] = exact.get(variant, True) and all(e for _, e in shares.values())
            inexact = [t for t, (_, e) in shares.items() if not e]     # only the one-pass control
            bound = max([bound] + [stats.ungated.bin_share(t, mean_gate) for t in inexact])
    return exact, bound


def frames_from_capture(cap: Capture, name: str, tokenizer, thresholds=None, control=None) -> Analysis:
    """The tidy tables of a finished pass. thresholds: the sparsity thresholds the capture was
    built with (its shares are counted there, during the pass). control: layer -> the exact
    mean-gate control's histogram (control.py), if it ran."""
    layout = cap.layout
    counted = {stats.thresholds for stats in cap.sparsity.values()}
    if thresholds is not None and counted and counted != {tuple(float(t) for t in thresholds)}:
        raise ValueError(f"the capture counted sparsity at {sorted(counted)[0]}, not at {tuple(thresholds)}: "
                         "build it with Capture(..., thresholds=...)")
    gates, hist = [], []
    for layer, stats in cap.gates.items():
        gates += [{"model": name, "layer": layer, **row} for row in stats.rows()]
        edges = torch.linspace(0, 1, stats.BINS + 1).tolist()
        for head, counts in enumerate(stats.hist.tolist()):
            hist += [{"model": name, "layer": layer, "head": head, "bin_lo": edges[b],
                      "bin_hi": edges[b + 1], "count": c} for b, c in enumerate(counts)]

    first, buckets = [], []
    for p in layout.layers:
        stats = cap.first_token.get(p.index)
        for head in range(layout.num_heads):
            for metric in ("f_attn", "f_attn_paper", "n_queries"):
                if stats is None:
                    value = math.nan
                else:
                    value = {"f_attn": lambda: float(stats.f_attn()[head]),
                             "f_attn_paper": lambda: float(stats.f_attn_paper()[head]),
                             "n_queries": lambda: int(stats.n_rest)}[metric]()
                first.append({"model": name, "layer": p.index, "head": head, "layer_type": p.layer_type,
                              "metric": metric, "value": value})
        if stats is not None:
            buckets += [{"model": name, "layer": p.index, **row} for row in stats.bucket_rows()]

    massive, top = [], []
    for (layer, site), stats in cap.massive.items():
        if int(stats.count) == 0:
            continue
        for metric, value in (("max_abs", stats.max_abs()), ("median_abs", stats.median_abs()),
                              ("count", int(stats.count)), ("nonfinite", int(stats.nonfinite))):
            massive.append({"model": name, "layer": layer, "site": site, "metric": metric, "value": value})
        for rank, (absval, value, seq, pos, dim, tok) in enumerate(stats.top):
            top.append({"model": name, "layer": layer, "site": site, "rank": rank + 1, "value": value,
                        "abs_value": absval, "sequence": seq, "position": pos, "dim": dim,
                        "token_id": tok, "token": token_text(tokenizer, tok)})
    site_order = {s: i for i, s in enumerate(SITES)}
    massive.sort(key=lambda r: (r["layer"], site_order[r["site"]]))
    top.sort(key=lambda r: (r["layer"], site_order[r["site"]], r["rank"]))

    sparsity = []
    for layer, stats in cap.sparsity.items():
        mean_gate = cap.gates[layer].mean() if layer in cap.gates else None
        for variant, shares in stats.fractions(mean_gate, (control or {}).get(layer)).items():
            sparsity += [{"model": name, "layer": layer, "variant": variant, "threshold": t, "value": v}
                         for t, v in shares.items()]
    order = {"ungated": 0, "mean_gate": 1, "gated": 2}
    sparsity.sort(key=lambda r: (r["layer"], order[r["variant"]], r["threshold"]))

    return Analysis(meta={"name": name}, summary={}, gates=pd.DataFrame(gates), gate_hist=pd.DataFrame(hist),
                    first_token=pd.DataFrame(first), first_token_buckets=pd.DataFrame(buckets),
                    massive=pd.DataFrame(massive), massive_top=pd.DataFrame(top),
                    sparsity=pd.DataFrame(sparsity))


def token_text(tokenizer, token_id: int) -> str:
    if tokenizer is None:
        return str(token_id)
    try:
        return tokenizer.decode([token_id])
    except Exception:
        return str(token_id)


def display_tokens(dataset: Dataset, tokenizer, n: int) -> list[str]:
    return [token_text(tokenizer, int(t)) for t in dataset.sequences[0][:n]]


def display_patterns(model, layout, dataset: Dataset, name: str, n: int, dev) -> pd.DataFrame:
    """Head-averaged full attention of one short prompt: the only T x T the tool forms (T <= n)."""
    if n <= 0:
        return pd.DataFrame()
    ids = dataset.sequences[0][:n][None].to(dev)
    previous = model.config._attn_implementation
    try:
        model.set_attn_implementation("eager")
        with torch.inference_mode():
            out = model(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
    maps = [a for a in (out.attentions or ()) if a is not None]
    layers = layout.attention_layers
    if len(maps) != len(layers):       # some models return one entry per layer, None for linear ones
        maps = [out.attentions[i] for i in layers]
    rows = []
    for layer, att in zip(layers, maps):
        mean = att[0].float().mean(0)                      # (T, T), averaged over heads
        T = mean.shape[0]
        for q in range(T):
            rows += [{"model": name, "layer": layer, "query": q, "key": k, "value": float(mean[q, k])}
                     for k in range(q + 1)]
    return pd.DataFrame(rows)


def build_meta(loaded: LoadedModel, dataset: Dataset, name, dev, options: AnalysisOptions) -> dict:
    import transformers

    from . import __version__

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
        "tokens": dataset.tokens,
        "tokens_sha256": dataset.digest(),     # runs with equal digests saw the same token ids
        "sequences": len(dataset.sequences),
        # What was used: --max-length or the model's positions may lower --seq-len.
        "longest_sequence": max((len(x) for x in dataset.sequences), default=0),
        "bos_policy": dataset.bos_policy,
        "bos_token_id": dataset.bos_token_id,
        "position0": dataset.position0,
        "data_notes": dataset.notes,
        **options.meta_fields(),               # seq_len, thresholds, seed, command
        "sink_epsilon": SINK_EPSILON,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"probe": __version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "python": sys.version.split()[0],
                     "platform": platform.platform()},
    }
