"""The report's sections on loss: under interventions, during training, by input length."""

from __future__ import annotations

from functools import partial

from probe.reports.sections import notes
from probe.reports import plots, tables
from probe.reports.tables.frames import interventions_by_layer
from probe.reports.sections.items import FigureItem, Item, Section, TableItem, axes_level, left_out
from probe.reports.plots.training import SMOOTHING_DIVISOR
from probe.reports.runs import Runs

# The criterion of probe's massive_zero intervention (probe/run/interventions.py, after Sun et al.
# 2024): |h| >= max(MASSIVE_MIN_ABS, MASSIVE_RATIO x the layer's median |h|). The report layer
# imports nothing of probe, so it holds the two numbers too; tests/reports/test_sections.py
# checks that they are probe's.
MASSIVE_MIN_ABS = 100.0
MASSIVE_RATIO = 1000.0


def training(runs: Runs) -> Section:
    if runs.training.empty:
        return left_out("training", "Training", "no run has a training log (training.csv): "
                        "these runs were analysed, not trained by probe")
    figure = FigureItem(
        "training-curves", "Training curves",
        partial(plots.plot_training, runs),
        "Left: training loss per step, right: gradient norm, per model (training.csv): faint, "
        "the raw value of every logged step; solid, its centred moving average over "
        f"{100 / SMOOTHING_DIVISOR:g}% of the logged steps. Dashed with black-edged markers, drawn on top: the held-out loss "
        "at the steps where it was evaluated."
        + (" Black crosses mark steps flagged as loss spikes in training.csv."
           if bool(runs.training["spike"].astype(bool).any()) else " No step was flagged as a loss spike."))
    return Section(
        id="training", title="Training",
        intro=("The training log of each run (probe train records loss and gradient norm per "
               "step); the paper finds that the gate damps loss spikes."),
        items=[figure],
        notes=notes.training_notes(runs) + notes.budget_notes(runs),
    )


def interventions(runs: Runs) -> Section:
    if runs.interventions.empty:
        return left_out("interventions", "Interventions",
                        "no run has intervention results (probe analyze --interventions)")
    explained = ("gate → layer mean: every gate score replaced by its layer's mean gate over the "
                 "same data, the input-independent scaling control run through the model; "
                 "gate = 1: gates forced open (the model without its gate); gate = 0: gates "
                 "forced shut (the attention branch removed, residual stream and MLP kept); "
                 "massive activations → 0: layer-output elements with |h| ≥ "
                 f"max({MASSIVE_MIN_ABS:g}, {MASSIVE_RATIO:g} × the layer's median |h|) set to 0.")
    items: list[Item] = [FigureItem(
        "loss-change-all-layers", "Loss change under interventions, all layers",
        axes_level(partial(plots.plot_interventions, runs)),
        "Held-out next-token loss with the intervention applied to every layer at once, minus "
        f"the unmodified model's loss, one bar per model. {explained} Baselines have only the "
        "massive-activation intervention. A small Δ for gate → layer mean would mean the gate "
        "acts as a constant scale; a large one, that the model relies on where it closes.")]
    table = tables.interventions_display(runs)
    if len(table):
        items.append(TableItem(
            "interventions-table", "Loss under interventions",
            table,
            "Loss of the unmodified model on the analysis data and Δ loss (intervened − "
            "unmodified) of each intervention applied to all layers at once, and how many "
            "elements the massive-activation intervention set to 0 (0: the model has none "
            "above the threshold); n/a: does not apply (no gate) or not measured."))
    if len(interventions_by_layer(runs)):
        items.append(FigureItem(
            "interventions-by-layer", "Loss change per intervened layer",
            partial(plots.plot_interventions_by_layer, runs),
            "Δ loss when the intervention is applied to one layer only (x), per model; one "
            "panel per intervention. Shows which layers the loss depends on."))
    return Section(
        id="interventions", title="Interventions",
        intro=("Does the model need its dynamic gate, or would a constant do? Each intervention "
               "changes the gate or the massive activations and measures the held-out loss."),
        items=items,
        notes=notes.intervention_notes(runs),
    )


def inference(runs: Runs) -> Section:
    if not (runs.inference["metric"] == "eval_loss").any():
        return left_out("inference", "Held-out loss by input length",
                        "no run has held-out loss by input length (inference.csv, written "
                        "by examples/demo.py for trained checkpoints)")
    items: list[Item] = [FigureItem(
        "loss-by-length", "Held-out loss by input length",
        axes_level(partial(plots.plot_loss_by_length, runs)),
        "Held-out next-token loss of rows of each length (log2 x), per trained model, from "
        "inference.csv. Dotted: the analysed sequence length (meta.json seq_len), which "
        "examples/demo.py sets to the training length; beyond the training length RoPE "
        "extrapolates; "
        "a model whose loss rises less there generalises better to long inputs.")]
    # Latency is left out: inference.csv holds one timing per arm (the best of a few rounds),
    # and for models this small two runs of examples/demo.py can flip the arms' order; a
    # table of such numbers would read as a finding. reports.inference_table(runs) has them.
    return Section(
        id="inference", title="Held-out loss by input length",
        intro=("For trained runs (examples/demo.py): how the loss holds up at and beyond the "
               "training length. Latency and memory (inference.csv) are not shown: single "
               "timings of models this small vary between runs by more than between arms; "
               "reports.inference_table(runs) returns them."),
        items=items,
        notes=notes.missing_table_notes(runs, "inference", "inference measurements"),
    )


def trajectory(runs: Runs) -> Section:
    if runs.trajectory.dropna(subset=["value"]).empty:
        return left_out("trajectory", "Continued training",
                        "no run has a trajectory (trajectory.csv, written by "
                        "examples/grafts/experiment.py for continued training)")
    figure = FigureItem(
        "trajectory-figure", "Measured at each saved step of continued training",
        partial(plots.plot_trajectory, runs),
        "Each point is probe analyze of the model as it stood at that training step, on the same "
        "held-out rows for every model (trajectory.csv). Step 0 is the model training started "
        "from; a dashed line is a model measured once (the base). F-Attn, base's sink layers: the "
        "mean F-Attn over the layers where the base's F-Attn is at least 0.3. Mean gate: the "
        "gate's own activation (2 × sigmoid for an identity graft, exactly 1 at step 0).")
    return Section(
        id="trajectory", title="Continued training",
        intro=("Gates grafted into a pretrained model and trained, measured as they train "
               "(docs/grafting.md): does the sink or the massive activation move, and with it the loss?"),
        items=[figure],
        notes=notes.missing_table_notes(runs, "trajectory", "trajectory"),
    )
