"""What the report's captions say follows what the runs hold (reports/sections.py and the
sections it assembles: sections_attention.py, sections_gates.py, sections_loss.py; items.py)."""
from __future__ import annotations

import reports
from reports.sections import build_sections


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
