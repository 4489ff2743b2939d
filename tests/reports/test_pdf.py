"""reports.pdf: the same figures and tables, one titled page each, stable bytes."""

from __future__ import annotations

import pytest
from pypdf import PdfReader

import reports
from reports.pdf import _row_chunks, _wrapped_cells

PAGE_TITLES = [
    "Gated attention report: baseline vs headwise vs hybrid",
    "Claims of the paper",
    "Claims of the paper (continued)",  # eight rows: one per claim and gated model
    "Summary — Model summary (paper Table 4 style)",
    "Attention on the first token (F-Attn) — F-Attn per layer and head",
    "Attention on the first token (F-Attn) — F-Attn per layer",
    "Attention on the first token (F-Attn) — F-Attn by query position",
    "Attention patterns — Attention patterns of the display prompt",
    "Massive activations (M-Act) — M-Act per layer at four sites",
    "Massive activations (M-Act) — Largest activations",
    "Gate scores — Gate score distributions per layer",
    "Gate scores — Gate score statistics per layer",
    "Gate scores — Mean gate score per layer and head",
    "Gate scores — Gate saturation",
    "Gate scores — Gate score by position",
    "Gate scores — Mean gate score by token type",
    "Gate scores — Gate score by token type, all gated layers",
    "Sparsity of the attention output — Sparsity per layer",
    "Sparsity of the attention output — Sparsity over the threshold sweep",
    "Interventions — Loss change under interventions, all layers",
    "Interventions — Loss under interventions",
    "Interventions — Loss change per intervened layer",
    "Training — Training curves",
    "Inference: long inputs, latency, memory — Held-out loss by input length",
    "Inference: long inputs, latency, memory — Latency and memory",
    "Provenance",
]


@pytest.fixture(scope="module")
def pdf(built_report) -> PdfReader:
    return PdfReader(built_report["pdf"])


@pytest.fixture(scope="module")
def page_texts(pdf) -> list[str]:
    return [page.extract_text() for page in pdf.pages]


def test_one_titled_page_per_figure_and_table(page_texts):
    assert len(page_texts) == len(PAGE_TITLES)
    assert [text.splitlines()[0] for text in page_texts] == PAGE_TITLES


def test_pages_are_a4_landscape(pdf):
    for page in pdf.pages:
        width, height = float(page.mediabox.width), float(page.mediabox.height)
        assert (round(width), round(height)) == (842, 595)


def test_metadata_is_fixed_and_dateless(pdf):
    metadata = pdf.metadata
    assert metadata["/Title"] == PAGE_TITLES[0]
    assert metadata["/Creator"] == "probe reports"
    assert "/CreationDate" not in metadata and "/ModDate" not in metadata


def test_pages_carry_captions_notes_and_tables(page_texts):
    assert "2026-11-02T08:30:00Z" in page_texts[0]
    page = {title: text for title, text in zip(PAGE_TITLES, page_texts)}
    summary = page["Summary — Model summary (paper Table 4 style)"]
    assert "no gate" in summary and "1053" in summary and "0.467" in summary
    assert "Does not apply: baseline has no attention-output gate" in summary
    heatmap = page["Attention on the first token (F-Attn) — F-Attn per layer and head"]
    assert "Figure. Attention probability on the first token" in heatmap
    assert "hatched: linear attention" in heatmap
    assert "Does not apply: headwise has no training log" in page["Training — Training curves"]
    interventions = page["Interventions — Loss under interventions"]
    assert "Δ gate = 0" in interventions and "+2.500" in interventions
    # A section's notes open its first page.
    assert ("headwise has no intervention results"
            in page["Interventions — Loss change under interventions, all layers"])
    assert "dollar $" in page["Gate scores — Gate score by token type, all gated layers"]
    provenance = page["Provenance"]
    for field in ("checkpoint", "BOS policy", "position 0 holds", "versions", "command line"):
        assert field in provenance, field


def test_same_runs_give_the_same_bytes(run_dirs, built_report, generated_at, tmp_path):
    again = reports.build_report(list(run_dirs.values()), tmp_path, formats=["pdf"],
                                 generated_at=generated_at)
    assert again["pdf"].read_bytes() == built_report["pdf"].read_bytes()


def test_long_tables_continue_on_the_next_page():
    import pandas as pd

    frame = pd.DataFrame({"value": [f"row {i} " + "text " * 30 for i in range(60)]},
                         index=[f"field {i}" for i in range(60)])
    cells = _wrapped_cells(frame, "field")
    chunks = _row_chunks(cells, first_in=5.0, later_in=6.5)
    assert len(chunks) > 1
    assert sum(len(chunk) for chunk in chunks) == 60
    assert [row[0] for chunk in chunks for row in chunk] == [f"field {i}" for i in range(60)]
