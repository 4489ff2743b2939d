"""Every example in examples/ runs top to bottom: the notebooks with nbclient, the scripts as
scripts. They analyse the shipped arms (examples/checkpoints) and write into a temporary folder."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
# demo.py is `make demo` (it trains models); it is not one of the quick examples.
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_") and p.name != "demo.py")
KERNEL = "probe-examples-test"


# Executes one notebook in a fresh process; the executed copy goes to argv[4], never examples/.
RUN_NOTEBOOK = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
# The kernel starts in argv[3]: a folder outside the repository, as for a user who copied the
# notebook elsewhere (the arms are found all the same).
NotebookClient(nb, kernel_name=sys.argv[2], timeout=300, startup_timeout=300, allow_errors=False,
               resources={"metadata": {"path": sys.argv[3]}}).execute()
nbformat.write(nb, sys.argv[4])
"""
# A notebook that does nothing special: no %matplotlib, no set_matplotlib_formats, no backend
# chosen. A probe figure as a cell's last line must still draw as an image.
PLAIN_NOTEBOOK = "plain.ipynb"
PLAIN_CELLS = (
    "import probe",
    "a = probe.analyze(probe.shipped_checkpoints() / 'elementwise', texts=['the gate closes the head'] * 4,\n"
    "                  seq_len=16, progress=False)",
    "a.plot_first_token_heatmap()",
)


def plain_notebook(path: Path) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in PLAIN_CELLS])
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def executions(tmp_path_factory):
    """Start every notebook and script at once (a few at a time) in its own process; each test
    below waits for its own. Kernels get a kernelspec for this very interpreter that Jupyter finds
    first: a fresh CI machine has none registered, and a user-wide "python3" may be another Python."""
    from ipykernel.kernelspec import write_kernel_spec

    jupyter = tmp_path_factory.mktemp("jupyter")
    write_kernel_spec(jupyter / "kernels" / KERNEL, overrides={"display_name": "probe examples (test)"})
    # No MPLBACKEND for the notebooks: their kernels choose as a user's would. Scripts get Agg.
    base = {key: value for key, value in os.environ.items() if key != "MPLBACKEND"}
    env = {**base,
           "JUPYTER_PATH": os.pathsep.join(filter(None, [str(jupyter), os.environ.get("JUPYTER_PATH")])),
           # The probe of this tree, also for kernels started outside it (the venv's editable
           # install may point at another checkout).
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "TOKENIZERS_PARALLELISM": "false", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
           # Several processes share the cores; tiny models gain nothing from more threads.
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    def run(argv, cwd, workdir=None, **extra):
        # Each example gets its own output folder, as if run alone.
        job_env = {**env, "PROBE_EXAMPLES_DIR": str(Path(workdir or cwd) / "work"), **extra}
        return subprocess.run(argv, cwd=cwd, env=job_env, capture_output=True, text=True, timeout=600)

    jobs = {}
    plain = plain_notebook(tmp_path_factory.mktemp("plain") / PLAIN_NOTEBOOK)
    with ThreadPoolExecutor(max_workers=3) as pool:
        for path in [*NOTEBOOKS, plain]:
            # A copy in a folder of its own, outside the repository, opened there.
            workdir = tmp_path_factory.mktemp(path.stem + "-nb")
            copy = workdir / path.name
            copy.write_bytes(path.read_bytes())
            executed = workdir / f"executed-{path.name}"
            jobs[path.name] = (pool.submit(run, [sys.executable, "-c", RUN_NOTEBOOK, str(copy), KERNEL,
                                                 str(workdir), str(executed)], workdir), executed)
        for path in SCRIPTS:                 # from the repository, as `python examples/X.py`
            workdir = tmp_path_factory.mktemp(path.stem)
            jobs[path.name] = (pool.submit(run, [sys.executable, str(path)], ROOT, workdir,
                                           MPLBACKEND="Agg"), None)
        yield jobs


def _result(jobs, name):
    future, executed = jobs[name]
    result = future.result()
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return executed


def test_examples_exist_and_notebooks_match_their_scripts():
    assert {p.stem for p in NOTEBOOKS} >= {"quickstart", "gated_vs_baseline", "transformerlens"}
    assert {p.stem for p in SCRIPTS} == {p.stem for p in NOTEBOOKS}
    result = subprocess.run([sys.executable, str(EXAMPLES / "_notebooks.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, f"{result.stdout}{result.stderr}run: python examples/_notebooks.py"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_notebook_has_no_outputs(path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: clear the outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, executions):
    import nbformat

    nb = nbformat.read(_result(executions, path.name), as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code")
    if path.stem != "transformerlens":
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} showed no figure"


def test_a_plain_notebook_draws_probe_figures_inline(executions):
    """A cell ending in a probe figure shows an image in a kernel nobody configured (it printed
    "<Figure size 360x390 with 2 Axes>": probe draws without pyplot, so matplotlib never
    registered IPython's figure formatter)."""
    import nbformat

    nb = nbformat.read(_result(executions, PLAIN_NOTEBOOK), as_version=4)
    last = nb.cells[-1].outputs
    assert any("image/png" in o.get("data", {}) for o in last), last


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_script_runs(path, executions):
    _result(executions, path.name)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_examples_use_the_shipped_arms_and_public_api_only(path):
    """What a reader copies: the trained arms of examples/checkpoints (random weights give verdicts
    that mean nothing), probe's public API, and no private module (no `_tiny` helpers, no
    TransformerLens module whose name starts with an underscore)."""
    source = path.read_text()
    imports = re.findall(r"^\s*(?:from\s+(\S+)\s+import\s+(.+)|import\s+(.+))$", source, re.M)
    names = [n for groups in imports for part in groups if part for n in re.split(r"[\s,.]+", part) if n]
    assert not [n for n in names if n.startswith("_")], f"{path.name} imports private names: {names}"
    assert "examples/checkpoints" in source and "checkpoints" in source
    assert not re.search(r"\bbuild\(", source), f"{path.name} builds a model instead of using the arms"


def test_the_demo_names_the_first_token_or_how_many_kinds():
    """The demo's "position 0" column: the one token all sequences start with, else the count
    (it used to show the first sequence's token as if it were every sequence's)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        from _demo_real import position0_label
    finally:
        sys.path.remove(str(EXAMPLES))
    assert position0_label({"position0": "BOS token '<bos>' (id 2) in every sequence"}) == "'<bos>'"
    assert position0_label({"position0": "no BOS; every sequence starts with token 'The' (id 5)"}) == "'The'"
    assert position0_label({"position0": "no BOS; position 0 holds an ordinary text token (8 distinct "
                                         "first tokens: 'a' in 2, 'b' in 1 of 8 sequences)"}) == "8 kinds"


def test_the_demo_writes_a_pdf_for_its_real_part_too():
    """make demo's real-model report comes as HTML and PDF, as the tiny arms' does."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import _demo_real
    finally:
        sys.path.remove(str(EXAMPLES))
    assert set(_demo_real.REPORT_FORMATS.split(",")) == {"html", "pdf"}
    assert "report.pdf" in (EXAMPLES / "demo.py").read_text()


def test_the_sink_experiment_runs_each_tiny_arm_and_keeps_finished_runs(tmp_path, capsys):
    """examples/sinks/experiment.py, cut down: each tiny arm under one ablation with --anatomy
    (top receiving keys measured), saved as a run directory; run again, each run is kept."""
    sys.path.insert(0, str(ROOT / "examples" / "sinks"))
    try:
        import experiment
    finally:
        sys.path.pop(0)
    import probe

    argv = ["tiny", "--out", str(tmp_path), "--sequences", "2", "--spec", "key0", "--anatomy"]
    assert experiment.main(argv) == 0
    for arm in ("none", "headwise", "elementwise"):
        ablations = probe.Analysis.load(tmp_path / "runs" / f"tiny-{arm}").ablations
        (row,) = ablations.itertuples()
        # unablated, key 0 receives the most; masked, it leaves the top keys (only query 0 still sees it)
        assert row.kind == "key0_mask" and row.base_top_keys.startswith("0:")
        assert re.fullmatch(r"(\d+:0\.\d+ ?){3}", row.top_keys) and not re.search(r"(^| )0:", row.top_keys)
    assert experiment.main(argv) == 0
    assert capsys.readouterr().out.count("exists, kept") == 3
