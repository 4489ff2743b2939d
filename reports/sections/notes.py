"""Sentences that say where a metric does not apply, so a report explains its gaps."""

from __future__ import annotations

from probe.reports.claims import nonfinite_reason
from probe.reports.tables.frames import pattern_layers
from probe.reports.runs import Runs
from probe.reports.labels import LINEAR_ATTENTION
from probe.reports.text import join_layers, join_names


def no_gate_notes(runs: Runs) -> list[str]:
    """One sentence for all the ungated models (a line each made a report of ungated models
    open with a paragraph of the same words)."""
    ungated = runs.ungated_models
    if not ungated:
        return []
    if len(ungated) == 1:
        return [f"{ungated[0]} has no attention-output gate: gate scores and the mean-gate control do "
                "not apply to it."]
    return [f"{join_names(ungated)} have no attention-output gate: gate scores and the mean-gate control "
            "do not apply to them."]


def linear_layer_notes(runs: Runs, metric: str) -> list[str]:
    notes = []
    for model in runs.models:
        linear = runs.layers_of_type(model, LINEAR_ATTENTION)
        if linear:
            notes.append(f"{model}: layers {join_layers(linear)} are linear attention (Gated "
                         f"DeltaNet), with no softmax over keys: {metric} does not apply there "
                         "(hatched or left out).")
    return notes


def nonfinite_notes(runs: Runs) -> list[str]:
    """Models that saw NaN/inf activations: said in the summary, not only in provenance."""
    notes = []
    for model in runs.models:
        reason = nonfinite_reason(runs, [model])
        if reason is not None:
            notes.append(f"{reason}: its numbers cover fewer values "
                         "than the model has, and the claims that involve it are not "
                         "testable.")
    return notes


def token_stream_notes(runs: Runs) -> list[str]:
    """Runs compared side by side should have read the same token ids (meta.tokens_sha256)."""
    digests = {model: runs.meta[model].get("tokens_sha256") for model in runs.models}
    if None in digests.values() or len(set(digests.values())) <= 1:
        return []
    return ["These runs did not see the same token ids (different tokenizers, BOS policies or "
            "data): their numbers describe each model on its own tokenization of the text."]


def depth_notes(runs: Runs) -> list[str]:
    depths = {model: runs.num_layers(model) for model in runs.models}
    if len(set(depths.values())) <= 1:
        return []
    listed = ", ".join(f"{model}: {layers}" for model, layers in depths.items())
    return [f"The models differ in depth ({listed} layers); layer-wise figures use each model's "
            "own layer indices, so equal indices are not equal relative depths."]


def budget_notes(runs: Runs) -> list[str]:
    """Models that probe train trained on different numbers of tokens (meta.json train_recipe
    tokens): side by side, their losses differ for the budget as well as for the gate, so the
    report says so where losses are compared (a shorter run's higher loss read as the
    architecture's is the mistake this prevents)."""
    budgets: dict[int, list[str]] = {}
    for model in runs.models:
        recipe = runs.meta[model].get("train_recipe")
        tokens = recipe.get("tokens") if isinstance(recipe, dict) else None
        if isinstance(tokens, (int, float)) and tokens > 0:
            budgets.setdefault(int(tokens), []).append(model)
    if len(budgets) <= 1:
        return []
    listed = "; ".join(f"{join_names(models)}: {_tokens(tokens)}"
                       for tokens, models in sorted(budgets.items(), reverse=True))
    return [f"The models were trained on different numbers of tokens ({listed}; probe train's recipe): "
            "their losses differ for the training budget too, not only for the gate or the architecture; "
            "compare losses within one budget."]


def _tokens(n: int) -> str:
    """3000000 -> "3M tokens", 1500000 -> "1.5M tokens", 64000 -> "64k tokens"."""
    for size, unit in ((10 ** 9, "B"), (10 ** 6, "M"), (10 ** 3, "k")):
        if n >= size:
            return f"{n / size:.3g}{unit} tokens"
    return f"{n} tokens"


def pattern_notes(runs: Runs) -> list[str]:
    return [f"{model} saved no attention patterns of a display prompt (attention_patterns.csv)."
            for model in runs.models if not pattern_layers(runs, model)]


def training_notes(runs: Runs) -> list[str]:
    trained = set(runs.training["model"])
    missing = [model for model in runs.models if model not in trained]
    if not missing:
        return []
    if len(missing) == len(runs.models):
        return ["No run has a training log (training.csv): these runs were analysed, not "
                "trained by probe."]
    return [f"{model} has no training log (training.csv)." for model in missing]


def sparsity_notes(runs: Runs) -> list[str]:
    ungated = runs.ungated_models
    notes = ([f"{join_names(ungated)} {'has' if len(ungated) == 1 else 'have'} no gate: "
              f"{'its' if len(ungated) == 1 else 'their'} attention output is shown once (ungated "
              "equals gated) and the mean-gate control does not apply."] if ungated else [])
    analysed = set(runs.sparsity["model"])
    notes += [f"{model} has no sparsity table (sparsity.csv)." for model in runs.models
              if model not in analysed]
    return notes


def missing_table_notes(runs: Runs, table: str, what: str, models=None) -> list[str]:
    """Say which runs (of `models`, default all) lack `table`.csv, or that none has it."""
    candidates = list(runs.models if models is None else models)
    present = set(runs.table(table)["model"])
    missing = [model for model in candidates if model not in present]
    if not missing:
        return []
    if len(missing) == len(runs.models):
        return [f"No run has {what} ({table}.csv)."]
    return [f"{model} has no {what} ({table}.csv)." for model in missing]


def token_type_notes(runs: Runs) -> list[str]:
    # Baselines have no gate, so no gate scores by token type: said once by no_gate_notes.
    return missing_table_notes(runs, "gates_by_token_type", "gate scores by token type",
                               runs.gated_models)


def intervention_notes(runs: Runs) -> list[str]:
    notes = missing_table_notes(runs, "interventions", "intervention results; made by probe "
                                "analyze --interventions")
    with_rows = set(runs.interventions["model"])
    notes += [f"{model} has no gate: only the massive-activation intervention applies to it."
              for model in runs.ungated_models if model in with_rows]
    return notes
