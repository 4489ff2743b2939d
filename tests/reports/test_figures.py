"""--figures DIR: every figure of the report on its own, vector PDF and SVG, caption beside it."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfReader

from probe import reports
from probe.api.cli import main
from probe.reports.sections import FigureItem, build_sections, shown

CM = 72 / 2.54


def figure_items(runs) -> list[FigureItem]:
    return [item for section in shown(build_sections(reports.load_runs(runs)))
            for item in section.items if isinstance(item, FigureItem)]


def test_report_writes_every_figure_as_pdf_svg_and_caption(run_dirs, tmp_path, capsys):
    runs = [str(run_dirs["headwise"])]  # one run keeps it quick; the figures are the same code
    figures = tmp_path / "figures"
    assert main(["report", *runs, "--out", str(tmp_path / "out"), "--format", "html",
                 "--figures", str(figures)]) == 0
    items = figure_items(run_dirs["headwise"])
    expected = {f"figure-{item.number:02d}-{item.id}.{ext}" for item in items
                for ext in ("pdf", "svg", "txt")}
    assert {path.name for path in figures.iterdir()} == expected
    # Names say what the figure shows, without a "-figure" tail (figure-04-...-figure.pdf).
    assert not [name for name in expected if name.rsplit(".", 1)[0].endswith("-figure")]
    for item in items:
        stem = figures / f"figure-{item.number:02d}-{item.id}"
        # The caption as the report prints it, number first.
        assert stem.with_suffix(".txt").read_text(encoding="utf-8") \
            == f"Figure {item.number}. {item.title}. {item.caption}\n"
        page = PdfReader(io.BytesIO(stem.with_suffix(".pdf").read_bytes())).pages[0]
        assert float(page.mediabox.width) >= 12 * CM - 0.5  # at least 12 cm wide
        assert page.extract_text().strip()  # vector: its text is text, not pixels
        svg = stem.with_suffix(".svg").read_text(encoding="utf-8")
        assert "<svg" in svg and "<path" in svg
    assert f"wrote {figures}" in capsys.readouterr().out
    # A second run does not overwrite them silently.
    assert main(["report", *runs, "--out", str(tmp_path / "out2"), "--format", "html",
                 "--figures", str(figures)]) == 2
    assert "already holds figures; pass --force" in capsys.readouterr().err


def test_figures_are_the_same_bytes_each_time(all_runs):
    from probe.reports.pdf import render_figure

    items = [item for item in figure_items(all_runs)
             if item.id in ("f-attn-heatmap", "gate-saturation")]  # a figure- and an axes-level plot
    assert len(items) == 2
    for item in items:
        for fmt in ("pdf", "svg"):
            assert render_figure(item, fmt=fmt) == render_figure(item, fmt=fmt), (item.id, fmt)


def test_compare_writes_figures_without_a_report(checkpoint, text_file, tmp_path, capsys):
    out, figures = tmp_path / "cmp", tmp_path / "figs"
    assert main(["compare", str(checkpoint("official_headwise")),
                 "--data", str(text_file), "--seq-len", "32", "--out", str(out),
                 "--format", "", "--figures", str(figures), "--quiet"]) == 0
    wrote = [line for line in capsys.readouterr().out.splitlines() if line.startswith("wrote ")]
    assert wrote == [f"wrote {out}/", f"wrote {figures}"]         # run folders first, as analyze
    names = sorted(path.name for path in figures.iterdir())
    assert names[0].startswith("figure-01-") and names[0].endswith(".pdf")
    assert len(names) == 3 * len(figure_items(out))
    assert not (out / "report.html").exists()


@pytest.mark.parametrize("command", ["report", "compare"])
def test_figures_flag_is_documented(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--figures DIR" in capsys.readouterr().out
