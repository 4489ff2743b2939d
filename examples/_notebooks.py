"""Build examples/*.ipynb from the plain scripts beside them (one source for both).

The scripts use the "percent" cell format that Jupyter, VS Code and jupytext understand:
`# %%` starts a code cell, `# %% [markdown]` a markdown cell whose lines start with `# `.
Notebooks are written without outputs. Run after editing a script:

    python examples/_notebooks.py            # rewrite the notebooks
    python examples/_notebooks.py --check    # exit 1 if a notebook is out of date (tests do this)
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
EXAMPLES = ("quickstart", "gated_vs_baseline", "transformerlens")
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def cells(script: str) -> list:
    out, kind, lines = [], None, []

    def flush():
        text = "\n".join(lines).strip("\n")
        if kind == "markdown":
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in text.splitlines())
            out.append(nbformat.v4.new_markdown_cell(text))
        elif kind == "code" and text:
            out.append(nbformat.v4.new_code_cell(text))

    for line in script.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind is not None:
            lines.append(line)
    flush()
    return out


def notebook(name: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells((HERE / f"{name}.py").read_text())
    for i, cell in enumerate(nb.cells):
        cell.id = f"{name[:20]}-{i}"          # stable ids: regenerating changes nothing
    nb.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    return nb


def render(name: str) -> str:
    return nbformat.writes(notebook(name)) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stale = []
    for name in EXAMPLES:
        path = HERE / f"{name}.ipynb"
        text = render(name)
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path.name)
        if "--check" not in argv:
            path.write_text(text)
    if stale:
        print(("out of date: " if "--check" in argv else "wrote: ") + ", ".join(stale))
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    raise SystemExit(main())
