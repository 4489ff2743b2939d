"""What the report's captions say follows what the runs hold (reports/sections/__init__.py and the
sections it assembles: reports/sections/attention.py, reports/sections/gating.py,
reports/sections/loss.py; items.py)."""
from __future__ import annotations

from pathlib import Path

from probe import reports
from probe.reports.sections import build_sections


def _captions(runs) -> dict[str, str]:
    return {item.id: item.caption for section in build_sections(runs) for item in section.items
            if getattr(item, "caption", None)}


def test_hatching_is_mentioned_only_where_a_model_has_linear_attention(run_dirs):
    plain = _captions(reports.load_runs([run_dirs["baseline"], run_dirs["headwise"]]))
    hybrid = _captions(reports.load_runs([run_dirs["baseline"], run_dirs["hybrid"]]))
    assert "Hatched" not in plain["f-attn-heatmap"] and "Hatched" not in plain["gate-heatmap"]
    assert "Hatched rows are linear-attention layers" in hybrid["f-attn-heatmap"]
    assert "Hatched rows" in hybrid["gate-heatmap"]


def test_loss_spike_markers_are_mentioned_only_when_a_step_was_flagged(run_dirs):
    runs = reports.load_runs([run_dirs["baseline"]])
    assert runs.training["spike"].any()
    assert "Black crosses mark steps flagged" in _captions(runs)["training-curves"]
    runs.training["spike"] = False
    caption = _captions(runs)["training-curves"]
    assert "Black crosses" not in caption and "No step was flagged as a loss spike." in caption


# -- numbers in captions come from the runs or from the constants the code uses ---------------

def _gate_hist(edges, models=("headwise",)):
    import pandas as pd

    return pd.DataFrame([{"model": model, "layer": 0, "head": 0, "bin_lo": lo, "bin_hi": hi,
                          "count": 10} for model in models for lo, hi in zip(edges, edges[1:])])


def test_gate_histogram_caption_counts_the_bins_the_runs_saved(run_dirs):
    runs = reports.load_runs([run_dirs["baseline"], run_dirs["headwise"]])
    assert "(50 equal bins on [0, 1])" in _captions(runs)["gate-histograms"]
    runs.gate_hist = _gate_hist([i / 20 for i in range(21)])
    assert "(20 equal bins on [0, 1])" in _captions(runs)["gate-histograms"]
    runs.gate_hist = _gate_hist([0.0, 0.5, 0.9, 1.0])
    assert "(3 bins on [0, 1])" in _captions(runs)["gate-histograms"]


def test_sink_rate_caption_quotes_each_runs_threshold(run_dirs):
    from probe.reports.sections import DEFAULT_SINK_EPSILON

    runs = reports.load_runs([run_dirs["baseline"], run_dirs["headwise"]])
    assert all(runs.summary[model].get("sink_epsilon") is None for model in runs.models)
    assert f"with F-Attn > {DEFAULT_SINK_EPSILON:g}. " in _captions(runs)["summary-table"]
    runs.summary["headwise"]["sink_epsilon"] = 0.2
    assert (f"with F-Attn > ε (baseline: {DEFAULT_SINK_EPSILON:g}, headwise: 0.2). "
            in _captions(runs)["summary-table"])
    runs.summary["baseline"]["sink_epsilon"] = 0.2
    assert "with F-Attn > 0.2. " in _captions(runs)["summary-table"]


def test_the_report_layers_copies_of_probes_numbers_agree():
    """reports imports no model code of probe (tests/reports/test_runs.py), so it holds the
    massive-activation criterion and the default sink threshold itself: they must be probe's."""
    import probe.run.interventions
    from probe.metrics import first_token
    from probe.reports import sections
    from probe.reports.sections import loss as sections_loss

    assert sections_loss.MASSIVE_MIN_ABS == probe.run.interventions.MASSIVE_MIN_ABS
    assert sections_loss.MASSIVE_RATIO == probe.run.interventions.MASSIVE_RATIO
    assert sections.DEFAULT_SINK_EPSILON == first_token.SINK_EPSILON


def test_caption_numbers_follow_the_constants(run_dirs, monkeypatch):
    from probe.reports.sections import gating as sections_gates, loss as sections_loss
    from probe.reports.plots.gates import SATURATION_THRESHOLDS
    from probe.reports.plots.training import SMOOTHING_DIVISOR, smoothing_window

    runs = reports.load_runs([run_dirs["baseline"], run_dirs["hybrid"]])
    captions = _captions(runs)
    assert "max(100, 1000 × the layer's median |h|)" in captions["loss-change-all-layers"]
    assert smoothing_window(1000) == round(1000 / SMOOTHING_DIVISOR)
    assert f"moving average over {100 / SMOOTHING_DIVISOR:g}% of" in captions["training-curves"]
    assert ("x = 0.01, 0.1, 0.5, 0.9 and 0.99 (logit x axis; below 0.9 and 0.99 as 1 − the share "
            "above)" in captions["gate-saturation"])
    assert list(SATURATION_THRESHOLDS.values()) == [0.01, 0.1, 0.5, 0.9, 0.99]
    monkeypatch.setattr(sections_loss, "MASSIVE_RATIO", 500.0)
    monkeypatch.setattr(sections_loss, "SMOOTHING_DIVISOR", 20)
    monkeypatch.setattr(sections_gates, "SATURATION_THRESHOLDS",
                        {"frac_lt_0.2": 0.2, "frac_gt_0.8": 0.8})
    monkeypatch.setattr(sections_gates, "_ABOVE", {"frac_gt_0.8": 0.8})
    captions = _captions(runs)
    assert "max(100, 500 × the layer's median |h|)" in captions["loss-change-all-layers"]
    assert "moving average over 5% of" in captions["training-curves"]
    assert "x = 0.2 and 0.8 (logit x axis; below 0.8 as 1 − the share above)" \
        in captions["gate-saturation"]
    assert "reaches 1 before 0.8 (few near 1)" in captions["gate-saturation"]


def test_a_section_whose_runs_lack_its_tables_is_left_out_with_the_reason(run_dirs):
    """items.needing: without any of its tables in any run the builder is not called, and the
    contents say which file is missing and how to get it (the option, from the declarations)."""
    from probe.reports.sections.items import Section, left_out_line, needing

    called = []

    @needing("received_by_position", id="sinks", title="Sinks")
    def optional(runs):
        called.append(runs)
        return Section(id="sinks", title="Sinks", intro="", items=[])

    @needing("gates", id="gated", title="Gated")
    def present(runs):
        called.append(runs)
        return Section(id="gated", title="Gated", intro="", items=[])

    runs = reports.load_runs([run_dirs["baseline"], run_dirs["headwise"]])
    skipped = optional(runs)
    assert not called and skipped.needs == ("received_by_position",) and not skipped.items
    assert left_out_line(skipped) == ("Not in this report: Sinks (no run has received_by_position.csv: "
                                      "analyse with --anatomy).")
    shown_section = present(runs)
    assert called == [runs] and shown_section.omitted is None and shown_section.needs == ("gates",)
    # A table every analysis writes, missing from runs written before its metric existed.
    without = reports.load_runs([run_dirs["baseline"]])
    assert "analyse them again" in needing("gates", id="g", title="G")(lambda r: None)(without).omitted



def test_captions_name_only_what_the_runs_draw(run_dirs):
    """Without a gated run the sparsity figures draw O alone: their captions say so, not the
    mean-gate control and gated bars; the head-norm map mentions hatched linear-attention rows
    only where a run has such layers."""
    def captions(*names):
        return _captions(reports.load_runs([run_dirs[name] for name in names]))

    alone = captions("baseline")
    assert "no run has a gate" in alone["sparsity-by-layer"]
    assert "uniform control" not in alone["sparsity-by-layer"]
    assert "the ungated output O, one line per model" in alone["sparsity-sweep"]
    gated = captions("baseline", "headwise")
    assert "the uniform control O × (the layer's mean gate score)" in gated["sparsity-by-layer"]
    assert "one panel per variant" in gated["sparsity-sweep"]
    # Real runs with head_norms.csv (tests/gold_runs): a grafted Llama, a Qwen3-Next hybrid.
    gold = Path(__file__).resolve().parents[1] / "gold_runs"
    llama = _captions(reports.load_runs([gold / "grafted_llama"]))
    hybrid = _captions(reports.load_runs([gold / "cli_qwen3_next"]))
    assert "Hatched rows" not in llama["head-norm-ratio"]
    assert "Hatched rows: linear-attention layers" in hybrid["head-norm-ratio"]


def _notes(runs, section_id: str) -> list[str]:
    return next(section.notes for section in build_sections(runs) if section.id == section_id)


def test_models_trained_on_different_budgets_are_named_where_losses_are_compared(run_dirs):
    runs = reports.load_runs([run_dirs["baseline"], run_dirs["headwise"], run_dirs["hybrid"]])
    budget = "trained on different numbers of tokens"
    assert not any(budget in note for note in _notes(runs, "summary"))      # no recipe recorded
    for model, tokens in (("baseline", 3_000_000), ("headwise", 3_000_000), ("hybrid", 1_500_000)):
        runs.meta[model]["train_recipe"] = {"arm": model, "tokens": tokens, "seed": 0}
    expected = ("The models were trained on different numbers of tokens (baseline and headwise: 3M tokens; "
                "hybrid: 1.5M tokens; probe train's recipe)")
    for section in ("summary", "training"):
        assert sum(note.startswith(expected) for note in _notes(runs, section)) == 1, section
    runs.meta["hybrid"]["train_recipe"]["tokens"] = 3_000_000                 # one budget: nothing to say
    assert not any(budget in note for note in _notes(runs, "summary"))
