"""`probe.analyze`: one streaming pass over the data, returning an `Analysis`.

The Hugging Face path: load (or take) the model, run the pass with capture.Capture's hooks,
then what pipeline.py does for every source. A TransformerLens bridge goes to bridge.py.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from .capture import Capture
from .data import Dataset, read_data
from .errors import ProbeError, flag
from .load import LoadedModel, check_tokenizer_dir, describe, load, load_tokenizer, text_config, warn_if_gate_declared_away
from .options import AnalysisOptions
from .pipeline import (assemble, check_model_as_is, dataset_for, head_averaged_rows, run_pass,
                       token_group_table)
from .results import Analysis


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

    The caller's model object is left as it was found: every module's train/eval mode, torch's
    global RNG states and the warnings filters are restored on return (the pass itself runs in
    eval mode, seeded with `seed`). One pass runs on a model object at a time: a second call on
    the same model from another thread, while the first runs, is refused (guards.py).
    """
    from .guards import as_the_caller_left_it, check_model_argument, check_tokenizer_argument, one_pass_at_a_time

    check_model_argument(model)
    check_tokenizer_argument(overrides.get("tokenizer", getattr(options, "tokenizer", None)))
    with one_pass_at_a_time(model), as_the_caller_left_it(model):
        return _analyze(model, data, texts=texts, options=options, **overrides)


def _analyze(model, data=None, *, texts=None, options=None, **overrides) -> Analysis:
    from .bridge import analyze_bridge, is_bridge

    # Every option and the data are checked before the model is loaded or anything written.
    o = AnalysisOptions.of(options, **overrides)
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
    from . import memory_checks

    if isinstance(model, (str, Path)):
        memory_checks.before_loading(model, o, dtype)      # a length that cannot fit: one line, now
    elif o.rope_scaling is not None and not _scaled_as_asked(model, o.rope_scaling):
        raise ProbeError(f"{flag('rope_scaling')} is applied while loading; pass the checkpoint path, not a "
                         "model object")
    loaded = as_loaded(model, dtype=dtype, device=device, device_map=o.device_map, gate=o.gate,
                       tokenizer=o.tokenizer, rope_scaling=o.rope_scaling)
    model, layout = loaded.model, loaded.layout
    from .interventions import validate_gate

    validate_gate(layout)                      # a declared layout that cannot fit: one line, now
    warn_if_gate_declared_away(model, layout, o.gate)
    config = text_config(model.config)
    dataset = dataset_for(data, texts, loaded.tokenizer, config, o)
    name = o.name or loaded.name or type(model).__name__
    dev = next(model.parameters()).device

    groups = token_group_table(layout, loaded.tokenizer, config, dataset, o.token_groups)
    cap = Capture(model, layout, token_groups=groups, thresholds=o.thresholds, anatomy=o.anatomy,
                  vocab_size=vocab_size(config, dataset) if o.anatomy else None,
                  sequences=len(dataset.sequences), loss_by_position=o.loss_by_position)
    saver = None
    if o.partial is not None:
        from .resume import PassCheckpoint, fingerprint

        command = o.command or "probe analyze ..."
        saver = PassCheckpoint(o.partial, fingerprint(loaded, dataset, world=world, dtype=dtype,
                                                      gate=layout.gate_layout, **o.resume_fields()),
                               rank=rank, every_seconds=o.checkpoint_seconds,
                               resume_hint=command + ("" if "--resume" in command else " --resume"))
    batch, length = memory_checks.before_pass(loaded, dataset, o)
    from .logits import forward_for

    with forward_for(model, batch=batch, length=length) as forward:
        run_pass(cap, forward, dataset, o, dev=dev, desc=f"analyse {name}", rank=rank, world=world, saver=saver)
    distributed.merge_reducers(cap.reducers())     # no-op in one process
    control = None
    if o.exact_control and layout.gated:
        from .control import count_control

        control = count_control(loaded, dataset, cap, batch_size=o.batch_size)
    cap.to("cpu")

    analysis = assemble(cap, loaded, dataset, name, dev, o, control=control, world=world,
                        patterns=display_patterns(model, layout, dataset, name, o.display_len, dev))
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


def _scaled_as_asked(model, spec) -> bool:
    """A LoadedModel that load() already scaled with this spec (a sweep's model)."""
    from .rope import parse

    record = getattr(model, "rope_scaling", None)
    return isinstance(model, LoadedModel) and record is not None and record["spec"] == parse(spec)


def vocab_size(config, dataset: Dataset) -> int:
    """The size of a by-token table: the config's vocabulary, else the largest id seen + 1."""
    return getattr(config, "vocab_size", None) or max(int(s.max()) for s in dataset.sequences) + 1


def as_loaded(model, *, dtype, device, device_map, gate, tokenizer, rope_scaling=None) -> LoadedModel:
    """tokenizer: None (the checkpoint's own), a folder, or a tokenizer object; a folder is
    loaded for a model object too (never stored as if it were a tokenizer)."""
    if isinstance(model, (str, Path)):
        loaded = load(model, dtype=dtype, device=device, device_map=device_map, gate=gate,
                      tokenizer=tokenizer if isinstance(tokenizer, (str, Path)) else None,
                      rope_scaling=rope_scaling)
        if tokenizer is not None and not isinstance(tokenizer, (str, Path)):
            loaded.tokenizer = tokenizer
        return loaded
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(check_tokenizer_dir(tokenizer))
    if isinstance(model, LoadedModel):
        if tokenizer is None:
            return model
        return dataclasses.replace(model, tokenizer=tokenizer)
    if isinstance(model, nn.Module) and hasattr(model, "config"):
        model.eval()
        return LoadedModel(model, describe(model, gate, user_declared=gate is not None),
                           tokenizer, getattr(model.config, "_name_or_path", None) or None, None)
    raise ProbeError(f"cannot analyse a {type(model).__name__}; pass a checkpoint directory or a "
                     "Hugging Face causal LM")


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
        rows += head_averaged_rows(name, layer, att[0].float().mean(0))     # (T, T), averaged over heads
    return pd.DataFrame(rows)
