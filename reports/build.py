"""`build_report`: read runs once, lay out the sections once, write each requested format."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from probe.reports.html import render_html
from probe.reports.parallel import map_forked
from probe.reports.pdf import render_formats, write_pdf
from probe.reports.runs import Runs, load_runs
from probe.reports.sections import FigureItem, Section, build_sections, shown_figures

FORMATS = ("html", "pdf")


def build_report(run_dirs_or_analyses: Any, out_dir: str | os.PathLike,
                 formats: Iterable[str] = FORMATS, title: str | None = None, *,
                 generated_at: datetime | None = None,
                 figures: str | os.PathLike | None = None, pairs=None,
                 groups=None) -> dict[str, Path]:
    """Write report.html and/or report.pdf into `out_dir`; return {format: path}.

    `figures`: a folder that also gets every figure on its own (`write_figures`), returned
    under "figures". `pairs`: declared (baseline, gated) pairs of the claims (--pair);
    `groups`: {name: runs} that differ only in seed (--group).

    `generated_at` is the timestamp printed in the provenance, the only part of the output
    that changes between two builds of the same runs. It defaults to $SOURCE_DATE_EPOCH
    (the reproducible-builds convention) when set, else to now.
    """
    formats = _check_formats(formats)
    runs = load_runs(run_dirs_or_analyses)
    sections = build_sections(runs, pairs, groups)
    title = title or default_title(runs)
    subtitle = _subtitle(runs)
    stamp = _timestamp(generated_at)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    writers: dict[str, Callable[[Path], None]] = {
        "html": lambda path: path.write_text(
            render_html(sections, title=title, subtitle=subtitle, generated_at=stamp),
            encoding="utf-8"),
        "pdf": lambda path: write_pdf(sections, path, title=title, subtitle=subtitle,
                                      generated_at=stamp),
    }
    written = {fmt: _write_atomically(out / f"report.{fmt}", writers[fmt]) for fmt in formats}
    if figures is not None:
        written["figures"] = write_figures(sections, figures)
    return written


def write_figures(sections_or_runs: Any, out_dir: str | os.PathLike) -> Path:
    """Every figure of the report as its own vector PDF and SVG, for a paper's LaTeX, with its
    caption beside it: figure-03-f-attn-by-position.{pdf,svg,txt} in `out_dir`.

    Numbers and captions are the report's; each figure has the size it has in the PDF report
    (at least 12 cm wide), so its text is at its own size when included at that width.
    Accepts the sections of `build_sections` or what `load_runs` accepts.
    """
    sections = (sections_or_runs if isinstance(sections_or_runs, list)
                and all(isinstance(s, Section) for s in sections_or_runs)
                else build_sections(load_runs(sections_or_runs)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    items = shown_figures(sections)
    for item, rendered in zip(items, map_forked(render_formats, items)):      # drawn in parallel
        stem = figure_file_stem(item)
        for fmt, data in rendered.items():
            _write_atomically(out / f"{stem}.{fmt}", lambda path, d=data: path.write_bytes(d))
        caption = f"{item.label}. {item.title}. {item.caption}\n"
        _write_atomically(out / f"{stem}.txt",
                          lambda path: path.write_text(caption, encoding="utf-8"))
    return out


def figure_file_stem(item: FigureItem) -> str:
    """"figure-03-f-attn-by-position": the number first, so the files sort in report order."""
    return f"figure-{item.number:02d}-{item.id}"


def default_title(runs: Runs) -> str:
    kind = "Gated attention report" if runs.gated_models else "Attention report (no gated model)"
    return f"{kind}: " + " vs ".join(runs.models)


def _subtitle(runs: Runs) -> str:
    kinds = [f"{model} ({'gated' if runs.is_gated(model) else 'no gate'})"
             for model in runs.models]
    return "Models: " + ", ".join(kinds) + "."


def _check_formats(formats: Iterable[str]) -> list[str]:
    if isinstance(formats, str):
        formats = formats.split(",")
    chosen = [fmt.strip().lower() for fmt in formats if fmt.strip()]
    unknown = sorted(set(chosen) - set(FORMATS))
    if unknown or not chosen:
        raise ValueError(f"unknown report format(s) {unknown or chosen}; choose from {FORMATS}")
    return list(dict.fromkeys(chosen))


def _timestamp(generated_at: datetime | None) -> str:
    if generated_at is None:
        epoch = os.environ.get("SOURCE_DATE_EPOCH")
        generated_at = (datetime.fromtimestamp(int(epoch), timezone.utc) if epoch
                        else datetime.now(timezone.utc))
    if generated_at.tzinfo is None:
        generated_at = generated_at.replace(tzinfo=timezone.utc)
    return generated_at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """Write to a temporary file beside `path`, then rename: readers never see half a report."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private: what open() would give
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    current = os.umask(0o022)           # the umask can only be read by setting it
    os.umask(current)
    return current
