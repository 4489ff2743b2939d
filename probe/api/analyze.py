"""`probe.analyze`: one streaming pass over the data, returning an `Analysis`.

One recipe for every model source (source.py: a Hugging Face model or checkpoint, a
TransformerLens bridge): the options checked, the source loaded and named, the dataset, the
pass (pipeline.run_pass), the exact control (control.py), the tables (pipeline.assemble), the
interventions (interventions.py).
"""
from __future__ import annotations

import torch

from ..data.sequences import Dataset, read_data
from ..core.options import AnalysisOptions
from ..metrics import kernels
from ..run.pipeline import (activation_values, assemble, data_token_ids, dataset_for, run_pass,
                            token_group_table)
from ..results.analysis import Analysis
from ..run.source import source_for


def analyze(model, data=None, *, texts: list[str] | None = None, options: AnalysisOptions | None = None,
            **overrides) -> Analysis:
    """Measure gates, first-token attention, massive activations, sparsity and loss.

    model: a checkpoint directory, a loaded Hugging Face causal LM, a `LoadedModel`, or a
           TransformerLens `TransformerBridge` (measured through its own hooks, see bridge.py;
           an option it cannot honour is refused in one line, source.HF_ONLY).
    data:  a path (text, folder, JSONL, .npy/.pt token ids); token ids in memory (a torch tensor
           or numpy array: 1-D a stream cut into seq_len, 2-D (N, T) N sequences as given; a
           list of lists of ints: one sequence each); a list of strings; or pass `texts=[...]`.
    options: an `AnalysisOptions` (probe/core/options.py: every option, its default and its meaning);
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
    from ..run import distributed

    # Every option and the data are checked before the model is loaded or anything written.
    o = AnalysisOptions.of(options, **overrides)
    data = read_data(data, texts=texts, text_field=o.text_field)
    torch.manual_seed(o.seed)
    if o.ablate:                # what the config and tokenizer files answer, before the weights load
        from ..run import ablations

        ablations.preflight(model, o)
    source = source_for(model, o)
    loaded, layout, name = source.loaded, source.layout, source.name
    dataset = dataset_for(data, None, source.tokenizer, source.config, o)
    if o.resamples:             # the intervals' resampling weights must fit, known before the pass
        from ..intervals.bootstrap import check_size

        check_size(len(dataset.sequences), o.resamples)
    if o.ablate:                # the sink ablations' checks (layers, tokens, BOS), before the pass
        ablation_plan = ablations.prepare(loaded, dataset, o)
    # The compiled CPU kernels (metrics/kernels.py) for an analysis large enough to repay their
    # load in a new process; the torch path, the same counts, for a small one.
    with kernels.sized_for(activation_values(source.config, layout, dataset)):
        groups = token_group_table(layout, source.tokenizer, source.config, dataset, o.token_groups)
        cap = source.capture(o, token_groups=groups, sequences=len(dataset.sequences),
                             vocab_size=vocab_size(source.config, dataset) if o.anatomy else None,
                             token_ids=data_token_ids(dataset) if o.anatomy else None)
        saver = None
        if o.partial is not None:
            from ..run.resume import PassCheckpoint, fingerprint

            command = o.command or "probe analyze ..."
            saver = PassCheckpoint(o.partial, fingerprint(loaded, dataset, world=source.world, dtype=source.dtype,
                                                          gate=layout.gate_layout, **o.resume_fields()),
                                   rank=source.rank, every_seconds=o.checkpoint_seconds,
                                   resume_hint=command + ("" if "--resume" in command else " --resume"))
        dev = source.device
        with source.forwarding(cap, dataset, o) as forward:
            run_pass(cap, forward, dataset, o, dev=dev, desc=source.desc, rank=source.rank, world=source.world,
                     saver=saver)
        source.check_fired(cap)
        distributed.merge_reducers(cap.reducers())     # no-op in one process
        control = None
        if o.exact_control and layout.gated:
            from ..run.control import count_control

            control = count_control(loaded, dataset, cap, o, desc=f"exact control {name}")
        cap.to("cpu")

        analysis = assemble(cap, loaded, dataset, name, dev, o, control=control, world=source.world,
                            patterns=source.display_patterns(dataset, o.display_len, cap))
        analysis.meta.update(source.meta())
        if o.interventions:
            from ..run import interventions as _interventions

            analysis.interventions = _interventions.run(loaded, dataset, o, name=name, reference=cap)
            analysis.meta["interventions"] = list(_interventions.parse_kinds(o.interventions))
            # Who evaluated what: under torchrun each process's share of the intervention passes.
            analysis.meta["intervention_passes"] = analysis.interventions.attrs["passes"]
            analysis.meta["intervention_tokens_per_process"] = analysis.interventions.attrs["tokens_per_process"]
        if o.ablate:
            analysis.ablations, analysis.ablation_positions, analysis.ablation_sequences = ablations.run(
                ablation_plan, name=name, reference=cap)
        if saver:
            saver.finish()
        return analysis


def vocab_size(config, dataset: Dataset) -> int:
    """The size of a by-token table: the config's vocabulary, else the largest id seen + 1."""
    return getattr(config, "vocab_size", None) or max(int(s.max()) for s in dataset.sequences) + 1
