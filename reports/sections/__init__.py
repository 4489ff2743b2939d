"""What the report says, independent of its format: sections of figures, tables and notes.

HTML and PDF both render this list, so the two formats cannot drift apart. The sections on
attention, gates and loss are in reports/sections/attention.py, reports/sections/gating.py, reports/sections/loss.py;
the figure, table and section types in items.py.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from probe.reports import claims, tables
from probe.reports.sections import notes
# The building blocks live in items.py; html.py, reports/pdf/__init__.py, build.py and the tests import them here.
from probe.reports.sections.items import (PROVENANCE, FigureItem, Section, TableItem, left_out,
                                          left_out_line, numbered, shown, shown_figures)
from probe.reports.differences import comparisons, differences_display, differences_notes
from probe.reports.claims.reference import table4_caption
from probe.reports.claims.scope import linear_attention_scope
from probe.reports.seeds import seed_display
from probe.reports.tables.intervals import interval_caption, interval_notes
from probe.reports.runs import Runs
from probe.reports.labels import ATTENTION
from probe.reports.sections.sink_anatomy import anatomy
from probe.reports.sections.attention import attention_patterns, first_token, massive
from probe.reports.sections.context import context_length
from probe.reports.sections.gating import gates, sparsity
from probe.reports.sections.loss import inference, interventions, training, trajectory


def build_sections(runs: Runs, pairs=None, groups=None) -> list[Section]:
    """Every section, in order; those with nothing to show carry `omitted` (the reason) and
    no items. Figures and tables are numbered in reading order over the shown sections."""
    # Sink anatomy only where a run has its tables: without them the report is as it was.
    sink_anatomy = anatomy(runs)
    context = context_length(runs)         # only where a run is part of a context sweep
    return numbered(_with_metric_sections(runs, [
        _claims(runs, pairs),
        _summary(runs, pairs, groups),
        first_token(runs),
        attention_patterns(runs),
        *([sink_anatomy] if sink_anatomy is not None else []),
        *([context] if context is not None else []),
        massive(runs),
        gates(runs),
        sparsity(runs),
        interventions(runs),
        training(runs),
        trajectory(runs),
        inference(runs),
        _provenance(runs),
    ]))


def metric_sections() -> list:
    """The sections of the modules of reports/sections/ that declare one: `SECTION` (a builder,
    runs -> Section, usually items.needing its tables, or None) and `AFTER` (the id of the section it
    follows). A new metric's section is its module alone, listed nowhere else. A builder returns
    None where its section is not about these models at all (GDN layers in a report without a
    hybrid, per-token series no run has), so that the contents do not list it among the sections
    left out."""
    found = []
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        loaded = importlib.import_module(f"{__name__}.{module.name}")
        if hasattr(loaded, "SECTION"):
            found.append(loaded)
    return found


def _with_metric_sections(runs: Runs, sections: list[Section]) -> list[Section]:
    for module in metric_sections():
        section = module.SECTION(runs)
        if section is None:             # not about these models at all (no line among those left out)
            continue
        ids = [section.id for section in sections]
        at = ids.index(module.AFTER) + 1 if module.AFTER in ids else len(sections) - 1
        sections.insert(at, section)
    return sections


def _claims(runs: Runs, pairs=None) -> Section:
    # First, so a reader sees the verdicts before the figures; the rules in a table of their own.
    if not runs.gated_models:       # one line among the sections left out, not a page of its own
        return left_out("claims", "Claims of the paper", claims.NO_GATED)
    return Section(
        id="claims", title="Claims of the paper",
        intro=("Does each headline claim of the paper hold in these runs, in the direction the "
               "paper reports? One row per claim and gated model, with the numbers and their 95% "
               "intervals. Small or briefly trained models are not expected to reach "
               "the paper's values, only to move the same way."),
        items=[TableItem("claims-table", "Claims of the paper", claims.claims_display(runs, pairs),
                         claims.claims_caption(runs), index_label="claim")],
        notes=linear_attention_scope(runs),
    )


def _other_gates(runs: Runs) -> str:
    """" X's gate is 2 * sigmoid, scores in (0, 2): its mean gate is not on the paper's scale." for
    each gated run whose gate is not the paper's sigmoid; "" where every one is."""
    from probe.reports.claims.scope import other_gate

    return "".join(f" {m}'s gate is {kind}: its mean gate is not on the paper's (0, 1) scale."
                   for m in runs.gated_models if (kind := other_gate(runs, m)) is not None)


def _summary(runs: Runs, pairs=None, groups=None) -> Section:
    caption = ("Mean gate: mean sigmoid gate score over all gated layers, heads, positions (and "
               f"dimensions for elementwise gates).{_other_gates(runs)} M-Act: mean over layers of the largest "
               "|layer output|. F-Attn (t ≥ 1): attention probability on the first token, "
               "averaged over heads per layer, then over attention layers, for query positions "
               "t ≥ 1; paper-style also counts t = 0, where it is 1 by causality; uniform: "
               "mean_t 1/(t+1), the value without any preference. Sink rate: share of (layer, "
               f"head) with F-Attn > {_sink_epsilon(runs)}. Loss / perplexity: held-out "
               "next-token loss. "
               f"n/a: does not apply or was not measured. {interval_caption(runs)}{table4_caption()}"
               + "".join(" " + note for note in interval_notes(runs)))
    items = [TableItem("summary-table", "Model summary (paper Table 4 style)",
                       tables.summary_display(runs), caption)]
    differences = differences_display(runs, pairs) if len(runs.models) > 1 else None
    if differences is not None and len(differences):
        matched = comparisons(runs, pairs)[1]
        title, who = (("Paired differences: each gated model against its matched baseline",
                       "Each gated model minus its matched baseline (the pairs the claims judge: arms of "
                       "one training run, a graft and its base, or --pair)") if matched else
                      ("Paired differences against the first model", "Each model minus the first"))
        items.append(TableItem(
            "differences-table", title, differences,
            f"{who}, on the same token ids: the difference and the ratio with 95% "
            "intervals from a paired bootstrap (the same resampled sequences for both runs).",
            index_label="models"))
    seeds = seed_display(runs, groups)
    if len(seeds):
        items.append(TableItem(
            "seeds-table", "Runs that differ only in seed", seeds,
            "Mean over seeds with its 95% Student t interval, each seed's value, and the two spreads "
            "kept apart: the sd of the per-seed values (between seeds) and the bootstrap standard error "
            "over sequences of one seed's value, averaged over the seeds (within a seed).",
            index_label="group", free_text=True))
    return Section(
        id="summary", title="Summary",
        intro=("One row per model. The questions: does the gate lower the attention on the "
               "first token (F-Attn) and the largest activations (M-Act), and at what loss?"),
        items=items,
        notes=(notes.nonfinite_notes(runs)
               + (differences_notes(runs, pairs) if len(runs.models) > 1 else []) + notes.no_gate_notes(runs)
               + notes.token_stream_notes(runs) + notes.depth_notes(runs) + notes.budget_notes(runs)),
    )


# probe's F-Attn threshold of the sink rate (Gu et al. 2024 use 0.3), for runs whose
# summary.json does not say: the one named in the first-token metric's declaration, through
# the schema the report layer reads runs against.
from probe.results.schema import SINK_EPSILON as DEFAULT_SINK_EPSILON  # noqa: E402


def _sink_epsilon(runs: Runs) -> str:
    """The F-Attn threshold of the sink rate as the runs saved it: one number, or each model's."""
    saved = {model: runs.summary[model].get("sink_epsilon", DEFAULT_SINK_EPSILON)
             for model in runs.models}
    saved = {model: DEFAULT_SINK_EPSILON if value is None else float(value)
             for model, value in saved.items()}
    if len(set(saved.values())) == 1:
        return f"{next(iter(saved.values())):g}"
    return "ε (" + ", ".join(f"{model}: {value:g}" for model, value in saved.items()) + ")"


def _provenance(runs: Runs) -> Section:
    frame = tables.provenance_table(runs)
    # Runs made from Python (probe.analyze) record no command line: the caption names only the rows there are.
    command = " and the command line" if "command line" in frame.index else ""
    table = TableItem(
        "provenance-table", "Provenance", frame,
        "From each run's meta.json: the checkpoint and data analysed, token counts, what sits "
        f"at position 0 (BOS policy), thresholds, package versions{command}.",
        index_label="field", free_text=True, merge_equal=True)
    attention = {model: len(runs.layers_of_type(model, ATTENTION)) for model in runs.models}
    return Section(
        id=PROVENANCE, title="Provenance",
        intro=("Where the numbers come from. Models: "
               + ", ".join(f"{model} ({runs.num_layers(model)} layers, {attention[model]} with "
                           "softmax attention)" for model in runs.models) + "."),
        # The claims' rules close the report beside the provenance: the claims table opens it short.
        items=[table, *([TableItem("claims-rules", "How each claim's verdict is decided", claims.rules_display(),
                                   claims.rules_caption(), index_label="claim", free_text=True)]
                        if runs.gated_models else [])],
    )
