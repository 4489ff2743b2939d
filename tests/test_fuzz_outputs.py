"""Every command on generated faults of what it writes and of the state it reads back.

For each (command, fault) of the table: exit status 2, exactly one line on stderr and it starts
`probe: error:`, no traceback, and nothing left behind: the folder holds what it held before the
command, so the corrected command (the same one once the fault is gone, or with a usable --out)
does not trip over a half-written run, a stray temporary or a partial folder. Cheap commands
also run the corrected command, which must succeed.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from probe.api.cli import main

TRAIN = ["--arm", "none", "--tokens", "256", "--layers", "1", "--width", "32", "--heads", "1",
         "--kv-heads", "1", "--seq-len", "16", "--batch-size", "4", "--vocab-size", "280",
         "--threads", "1", "--quiet"]
ANALYZE = ["--seq-len", "16", "--batch-size", "1", "--max-sequences", "2", "--quiet", "--save-every", "0"]


def _os_error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _fail_when(monkeypatch, module, name: str, code: int, when: Callable[..., bool] = lambda *a, **k: True):
    """Make module.name raise OSError(code) when `when(*args)` holds."""
    real = getattr(module, name)

    def failing(*args, **kwargs):
        if when(*args, **kwargs):
            raise _os_error(code)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, failing)


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


# -- faults: each takes (monkeypatch, ctx) and makes one thing fail --------------------------------

def read_only(monkeypatch, ctx):
    """A read-only file system: making any temporary file or folder fails with EROFS."""
    _fail_when(monkeypatch, tempfile, "mkdtemp", errno.EROFS)
    _fail_when(monkeypatch, tempfile, "mkstemp", errno.EROFS)
    _fail_when(monkeypatch, os, "mkdir", errno.EROFS, lambda path, *a, **k: str(path).startswith(str(ctx.root)))


def disk_full(monkeypatch, ctx):
    """Every flush of a file under ctx.root runs out of space."""
    _fail_when(monkeypatch, os, "fsync", errno.ENOSPC, lambda fd, *a: _fd_path(fd).startswith(str(ctx.root)))


def disk_full_in_run(monkeypatch, ctx):
    """The disk fills up while the finished run directory is written (after the pass)."""
    _fail_when(monkeypatch, os, "fsync", errno.ENOSPC, lambda fd, *a: ".partial-" in _fd_path(fd))


def disk_full_in_report(monkeypatch, ctx):
    """The disk fills up when a report file is put in place (the run itself fits)."""
    _fail_when(monkeypatch, os, "replace", errno.ENOSPC,
               lambda src, dst, *a, **k: Path(src).name.startswith(".report."))


def disk_full_in_checkpoint(monkeypatch, ctx):
    """safetensors runs out of space while saving the weights."""
    import probe.train.loop
    from safetensors import SafetensorError

    def save_model(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    monkeypatch.setattr(probe.train.loop, "save_model", save_model)


def unwritable(monkeypatch, ctx):
    """A folder this user cannot write to: chmod 0500. Root may write there all the same, so for
    root os.access answers as it would for anyone else, and making anything inside fails."""
    ctx.locked.mkdir()
    ctx.locked.chmod(0o500)
    if os.geteuid() == 0:
        real = os.access

        def inside(path) -> bool:
            return str(path) == str(ctx.locked) or str(path).startswith(str(ctx.locked) + os.sep)
        monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if inside(path) else real(path, mode, *a, **k))
        _fail_when(monkeypatch, os, "mkdir", errno.EACCES, lambda path, *a, **k: inside(path))


# -- the commands -----------------------------------------------------------------------------------

@dataclass
class Ctx:
    root: Path
    ckpt: Path
    text: Path
    run: Path                   # a saved run directory (outside root)
    corpus: Path

    @property
    def afile(self) -> Path:
        return self.root / "afile"

    @property
    def locked(self) -> Path:
        return self.root / "locked"

    def out(self, kind: str) -> Path:
        return {"fresh": self.root / "out", "file": self.afile, "under_file": self.afile / "sub",
                "unwritable": self.locked / "out"}[kind]


COMMANDS = {
    "analyze": lambda c, out: ["analyze", str(c.ckpt), "--data", str(c.text), "--out", str(out), *ANALYZE],
    "analyze_report": lambda c, out: ["analyze", str(c.ckpt), "--data", str(c.text), "--out", str(out),
                                      "--report", "html", *ANALYZE],
    "compare": lambda c, out: ["compare", str(c.ckpt), str(c.ckpt), "--data", str(c.text), "--out", str(out),
                               "--format", "html", *ANALYZE[:-2]],
    "report": lambda c, out: ["report", str(c.run), "--out", str(out), "--format", "html"],
    "train": lambda c, out: ["train", "--data", str(c.corpus), "--out", str(out), *TRAIN],
}


@dataclass
class Case:
    command: str
    out: str = "fresh"                                  # which --out (Ctx.out)
    fault: Callable | None = None
    extra: tuple = ()
    setup: Callable | None = None                       # (ctx, out) -> None: damage made before
    says: str = ""                                      # in the error line
    corrected: bool = False                             # also run the corrected command
    fixed: tuple = field(default=())                    # the corrected command's extra arguments


def _partial(ctx, out, text_state=b"\x80\x04garbage" * 40, progress='{"batches_done": 1, "fingerprint": {}}'):
    partial = out.with_name(out.name + ".partial")
    partial.mkdir()
    (partial / "state-rank0.pt").write_bytes(text_state)
    (partial / "progress.json").write_text(progress)


def _partial_is_a_file(ctx, out):
    out.with_name(out.name + ".partial").write_text("not a folder")


CASES = {
    # analyze
    "analyze/out is a file": Case("analyze", "file", says="is a file"),
    "analyze/--force, out is a file": Case("analyze", "file", extra=("--force",), says="is a file"),
    "analyze/out under a file": Case("analyze", "under_file", says="is a file, not a folder"),
    "analyze/read-only file system": Case("analyze", fault=read_only, says="Read-only file system", corrected=True),
    "analyze/unwritable folder": Case("analyze", "unwritable", fault=unwritable, says="not writable"),
    "analyze/disk full saving the state": Case("analyze", fault=disk_full, says="No space left on device",
                                               corrected=True),
    "analyze/disk full writing the run": Case("analyze", fault=disk_full_in_run, says="No space left on device"),
    "analyze/garbage state": Case("analyze", extra=("--resume",), setup=_partial, says="damaged",
                                  corrected=True, fixed=("--force",)),
    "analyze/progress not an object": Case("analyze", extra=("--resume",),
                                           setup=lambda c, o: _partial(c, o, progress="[1, 2]"),
                                           says="not the object", corrected=True, fixed=("--force",)),
    "analyze/partial folder is a file": Case("analyze", setup=_partial_is_a_file, says="is a file"),
    "analyze/--report, disk full": Case("analyze_report", fault=disk_full_in_report,
                                        says="No space left on device", corrected=True),
    # compare
    "compare/out is a file": Case("compare", "file", says="is a file"),
    "compare/out under a file": Case("compare", "under_file", says="is a file, not a folder"),
    "compare/read-only file system": Case("compare", fault=read_only, says="Read-only file system"),
    "compare/report, disk full": Case("compare", fault=disk_full_in_report, says="No space left on device"),
    # report
    "report/out is a file": Case("report", "file", says="is a file"),
    "report/out under a file": Case("report", "under_file", says="is a file, not a folder"),
    "report/read-only file system": Case("report", fault=read_only, says="Read-only file system", corrected=True),
    "report/unwritable folder": Case("report", "unwritable", fault=unwritable, says="not writable"),
    "report/disk full": Case("report", fault=disk_full_in_report, says="No space left on device"),
    "report/--format empty": Case("report", extra=("--format", ""), says="--format is empty"),
    # train
    "train/out is a file": Case("train", "file", says="is a file"),
    "train/out under a file": Case("train", "under_file", says="is a file, not a folder"),
    "train/read-only file system": Case("train", fault=read_only, says="Read-only file system"),
    "train/unwritable folder": Case("train", "unwritable", fault=unwritable, says="not writable"),
    "train/disk full": Case("train", fault=disk_full, says="No space left on device"),
    "train/disk full saving the weights": Case("train", fault=disk_full_in_checkpoint,
                                               says="No space left on device", corrected=True),
}


# -- damaged run directories for probe report --------------------------------------------------------

def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


RUN_DAMAGE = {
    "deleted csv": (lambda run: (run / "massive.csv").unlink(), "massive.csv is missing"),
    "half-cut csv": (lambda run: (run / "gates.csv").write_text((run / "gates.csv").read_text()[:3001]),
                     "gates.csv"),
    "csv cut at a line end": (lambda run: (run / "sparsity.csv").write_text("".join(_lines(run / "sparsity.csv")[:7])),
                              "sparsity.csv has 6 rows"),
    "no value column": (lambda run: (run / "first_token.csv").write_text(
        "".join(line.rsplit(",", 1)[0] + "\n" for line in _lines(run / "first_token.csv"))),
        "first_token.csv lacks the column value"),
    "bad cell": (lambda run: (run / "massive.csv").write_text(
        (run / "massive.csv").read_text().replace("max_abs,", "max_abs,big", 1)), "is not a number"),
    "non-numeric layer": (lambda run: (run / "first_token.csv").write_text(
        "".join(_lines(run / "first_token.csv")[:1]) + "".join(_lines(run / "first_token.csv")[1:]).replace(",0,", ",L0,", 1)),
        "is not an integer"),
    "empty csv": (lambda run: (run / "first_token.csv").write_text(""), "first_token.csv is empty"),
    "invalid summary.json": (lambda run: (run / "summary.json").write_text('{"model": "x", '), "summary.json is not valid JSON"),
    "non-object summary.json": (lambda run: (run / "summary.json").write_text('"x"'), "summary.json holds a JSON str"),
    "invalid meta.json": (lambda run: (run / "meta.json").write_text("{nope}"), "meta.json is not valid JSON"),
    "non-object meta.json": (lambda run: (run / "meta.json").write_text("[]"), "meta.json holds a JSON list"),
    # meta.json lists the tables written: without it a missing csv read as nothing measured
    "deleted meta.json and a csv": (lambda run: [(run / f).unlink() for f in ("meta.json", "gates.csv")],
                                    "meta.json is missing; the run directory is incomplete"),
    "deleted summary.json": (lambda run: (run / "summary.json").unlink(), "(no summary.json)"),
}


@pytest.fixture(scope="module")
def saved_run(checkpoint, text_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz-run") / "run"
    assert main(["analyze", str(checkpoint("official_headwise")), "--data", str(text_file), "--out", str(out),
                 *ANALYZE]) == 0
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from tests.samples import TEXT

    path = tmp_path_factory.mktemp("fuzz-corpus") / "docs.txt"
    path.write_text((TEXT + "\n\n") * 4)
    return path


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _one_error_line(capsys, argv) -> str:
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, (code, err)
    assert "Traceback" not in captured.err + captured.out
    # COMMANDS' compare gives one checkpoint twice, which probe notes in one warning line first.
    lines = [line for line in err.splitlines() if not (line.startswith("probe: warning: ")
                                                        and "is given 2 times" in line)]
    err = "\n".join(lines)
    assert err.startswith("probe: error: ") and "\n" not in err, err
    return err


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_output_fault_is_one_line_and_leaves_nothing(name, checkpoint, text_file, saved_run, corpus,
                                                       tmp_path, monkeypatch, capsys):
    case = CASES[name]
    root = tmp_path / "work"
    root.mkdir()
    ctx = Ctx(root, checkpoint("qwen3"), text_file, saved_run, corpus)
    ctx.afile.write_text("a file, not a folder")
    out = ctx.out(case.out)
    try:
        with monkeypatch.context() as m:
            if case.fault:
                case.fault(m, ctx)
            if case.setup:
                case.setup(ctx, out)
            before = _listing(root)
            line = _one_error_line(capsys, [*COMMANDS[case.command](ctx, out), *case.extra])
            assert case.says in line, line
        if case.command != "analyze" or "--resume" not in case.extra:
            assert _listing(root) == before              # nothing added, nothing half-written
        if case.corrected:
            extra = [a for a in case.extra if a != "--resume"] + list(case.fixed)
            assert main([*COMMANDS[case.command](ctx, out), *extra]) == 0
    finally:
        if ctx.locked.exists():
            ctx.locked.chmod(0o700)


@pytest.mark.parametrize("damage", sorted(RUN_DAMAGE))
def test_probe_report_refuses_a_damaged_run_directory(damage, saved_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(saved_run, run)
    spoil, says = RUN_DAMAGE[damage]
    spoil(run)
    line = _one_error_line(capsys, ["report", str(run), "--out", str(tmp_path / "report"), "--format", "html"])
    assert says in line and str(run) in line, line
    assert not (tmp_path / "report").exists()


def test_saved_run_lists_its_tables(saved_run):
    """The list the deleted / cut-short checks read: every CSV with its row count."""
    meta = json.loads((saved_run / "meta.json").read_text())
    csvs = {p.stem: len(_lines(p)) - 1 for p in saved_run.glob("*.csv")}
    assert meta["tables"] == csvs



# -- --force replaces a probe output folder, nothing else (issue 24, items 1 and 2) -----------------

def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root (links not followed) with its bytes: what survives, exactly."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}


@dataclass
class Keep:
    """A command whose --out would replace something that is not probe's: refused in one line,
    and every file under the work folder is still there, byte for byte."""
    argv: Callable                          # (work folder, checkpoint copy, data file) -> argv
    says: str


def _ck_work(tmp_path, checkpoint, text_file):
    work = tmp_path / "work"
    models = work / "models"
    ck = shutil.copytree(checkpoint("qwen3"), models / "ck")
    shutil.copytree(checkpoint("qwen3"), models / "sibling")
    data = work / "data" / "docs.txt"
    data.parent.mkdir()
    shutil.copy(text_file, data)
    return work, ck, data


def _groups_inside(w, ck, data):
    (w / "data" / "groups.json").write_text('{"digits": [5, 6]}')
    return ["analyze", str(ck), "--data", str(w / "elsewhere.txt"), "--out", str(w / "data"), "--force",
            "--token-groups", str(w / "data" / "groups.json"), *ANALYZE]


FORCE = {
    "analyze --out the checkpoint": Keep(lambda w, ck, d: ["analyze", str(ck), "--data", str(d), "--out", str(ck),
                                                           "--force", *ANALYZE], "is the checkpoint"),
    "analyze --out the checkpoint's parent": Keep(lambda w, ck, d: ["analyze", str(ck), "--data", str(d), "--out",
                                                                    str(ck.parent), "--force", *ANALYZE],
                                                  "holds the checkpoint"),
    "analyze --out inside the checkpoint": Keep(lambda w, ck, d: (ck / "old").mkdir() or [
        "analyze", str(ck), "--data", str(d), "--out", str(ck / "old"), "--force", *ANALYZE], "inside the checkpoint"),
    "analyze --out the data's folder": Keep(lambda w, ck, d: ["analyze", str(ck), "--data", str(d), "--out",
                                                              str(d.parent), "--force", *ANALYZE], "holds the data"),
    "analyze --out the sibling checkpoint": Keep(lambda w, ck, d: ["analyze", str(ck), "--data", str(d), "--out",
                                                                   str(w / "models" / "sibling"), "--force", *ANALYZE],
                                                 "not a folder probe wrote"),
    "analyze --out the tokenizer's folder": Keep(lambda w, ck, d: ["analyze", str(ck), "--data", str(d), "--out",
                                                                   str(w / "models" / "sibling"), "--force",
                                                                   "--tokenizer", str(w / "models" / "sibling"),
                                                                   *ANALYZE], "is the tokenizer"),
    "analyze --out the token groups' folder": Keep(_groups_inside, "holds the token-groups file"),
    "compare --out the checkpoints' parent": Keep(lambda w, ck, d: ["compare", str(ck), str(w / "models" / "sibling"),
                                                                    "--data", str(d), "--out", str(w / "models"),
                                                                    "--force", "--format", "", *ANALYZE[:-2]],
                                                  "holds the checkpoint"),
    "train --out the data's folder": Keep(lambda w, ck, d: ["train", "--data", str(d), "--out", str(d.parent),
                                                            "--force", *TRAIN], "holds the data"),
    "train --out someone's folder": Keep(lambda w, ck, d: ["train", "--data", str(d), "--out", str(w / "models"),
                                                           "--force", *TRAIN], "not a folder probe wrote"),
}


@pytest.mark.parametrize("case", sorted(FORCE))
def test_force_never_replaces_what_is_not_probes(case, checkpoint, text_file, tmp_path, capsys):
    work, ck, data = _ck_work(tmp_path, checkpoint, text_file)
    (work / "elsewhere.txt").write_text(data.read_text())
    argv = FORCE[case].argv(work, ck, data)
    before = _tree(work)
    line = _one_error_line(capsys, argv)
    assert FORCE[case].says in line and "--force replaces a probe output folder, nothing else" in line, line
    assert _tree(work) == before                       # every file survives, byte for byte
    assert sorted(p.name for p in work.iterdir()) == ["data", "elsewhere.txt", "models"]


def test_force_replaces_probes_own_run(checkpoint, text_file, tmp_path):
    """What --force is for still works: a run probe wrote is replaced whole, marker and all."""
    out = tmp_path / "run"
    argv = ["analyze", str(checkpoint("qwen3")), "--data", str(text_file), "--out", str(out), *ANALYZE]
    assert main(argv) == 0
    (out / "note.csv").write_text("a\n1\n")            # a file the old run held: gone after
    assert main(argv + ["--force"]) == 0
    assert (out / ".probe-output").is_file() and not (out / "note.csv").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("force", [False, True])
def test_a_symlinked_partial_folder_is_never_followed(force, checkpoint, text_file, tmp_path, capsys):
    """OUT.partial -> a folder of the user's: refused, and the folder keeps every file."""
    target = tmp_path / "precious"
    target.mkdir()
    (target / "thesis.tex").write_text("years of work")
    (target / "sub").mkdir()
    (target / "sub" / "data.bin").write_bytes(b"\x00" * 64)
    out = tmp_path / "run"
    out.with_name("run.partial").symlink_to(target, target_is_directory=True)
    before = _tree(target)
    line = _one_error_line(capsys, ["analyze", str(checkpoint("qwen3")), "--data", str(text_file), "--out", str(out),
                                    *ANALYZE, *(["--force"] if force else [])])
    assert "symbolic link" in line, line
    assert _tree(target) == before and sorted(p.name for p in target.iterdir()) == ["sub", "thesis.tex"]


def test_a_partial_folder_of_someone_elses_files_is_not_emptied(checkpoint, text_file, tmp_path, capsys):
    partial = tmp_path / "run.partial"
    partial.mkdir()
    (partial / "mine.txt").write_text("not probe's")
    line = _one_error_line(capsys, ["analyze", str(checkpoint("qwen3")), "--data", str(text_file), "--out",
                                    str(tmp_path / "run"), "--force", *ANALYZE])
    assert "did not write" in line, line
    assert (partial / "mine.txt").read_text() == "not probe's"


# -- every string round-trips through the tables (issue 24, items 5, 8 and 9) -------------------------

ODD_STRINGS = ["\r", "a\rb", "a\r\nb", "\n", "=cmd|' /C calc'!A0", "+1", "-", "-x", "@SUM(A1)", "\tx",
               "'", "'=x", "''-", "NA", "", "é\u2028\u202e\x1b[31m\x00", "\ufeffbom"]


def test_every_string_in_a_text_column_reads_back_as_written(saved_run, tmp_path):
    """A token or a name may hold a bare CR, a formula start, apostrophes, NUL, ESC, U+2028, a
    bidi override: each cell reads back as it was, and none reaches a spreadsheet as a formula."""
    import probe
    from probe.results.csv_cells import FORMULA_START

    analysis = probe.Analysis.load(saved_run)
    top = analysis.massive_top.iloc[:len(ODD_STRINGS)].copy()
    assert len(top) == len(ODD_STRINGS)
    top["token"] = ODD_STRINGS
    top["model"] = "a\rb"
    analysis.massive_top = top
    analysis.save(tmp_path / "odd")
    back = probe.Analysis.load(tmp_path / "odd").massive_top
    assert back.token.tolist() == ODD_STRINGS and set(back.model) == {"a\rb"}
    import csv
    with (tmp_path / "odd" / "massive_top.csv").open(newline="", encoding="utf-8") as f:
        cells = [row[-1] for row in csv.reader(f)][1:]
    assert not [c for c in cells if c[:1] in FORMULA_START]        # no cell starts a formula


def _with_a_carriage_return_token(src: Path, dst: Path) -> Path:
    """A copy of a tiny checkpoint whose tokenizer has a token for a bare CR (id 1, byte-level
    "\u010d"), as real byte-level vocabularies do."""
    ckpt = shutil.copytree(src, dst)
    spec = json.loads((ckpt / "tokenizer.json").read_text())
    del spec["model"]["vocab"]["<|im_start|>"]
    spec["model"]["vocab"]["\u010d"] = 1
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] != 1]
    (ckpt / "tokenizer.json").write_text(json.dumps(spec))
    config = json.loads((ckpt / "tokenizer_config.json").read_text())
    config.get("added_tokens_decoder", {}).pop("1", None)
    (ckpt / "tokenizer_config.json").write_text(json.dumps(config))
    return ckpt


def test_a_text_of_odd_characters_runs_through_the_report(checkpoint, tmp_path):
    """BOM, CRLF, lone CRs, NUL, ESC, U+2028 and bidi overrides in the text, a vocabulary with a
    bare-CR token, sink anatomy on: the run's own token tables (the CR token first, as the
    sink) are read back by the report step, and the token reads back as a CR."""
    import probe

    ckpt = _with_a_carriage_return_token(checkpoint("qwen3"), tmp_path / "ckpt")
    text = tmp_path / "odd.txt"
    text.write_bytes("\r\ufeffline one\r\nline\rtwo\x00 \x1b[2J esc \u2028 sep \u202eevil\u202c end\r\r-x =y\n".encode()
                     * 8)
    out = tmp_path / "run"
    assert main(["analyze", str(ckpt), "--data", str(text), "--out", str(out), "--anatomy",
                 "--report", "html", "--seq-len", "32", "--max-sequences", "2", "--quiet"]) == 0
    assert (out / "report.html").exists()
    tokens = probe.Analysis.load(out).received_by_token
    assert "\r" in set(tokens[tokens.token_id == 1].token)


def test_control_characters_in_a_name_never_reach_the_terminal_or_the_page(checkpoint, text_file, tmp_path,
                                                                        capsys):
    """...and a name with a bare CR and a formula start makes a run that reads back (it was
    "not a valid CSV table")."""
    import probe

    name = "=x\x1b[2J\x00\u202eevil\u2028\rb"
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["analyze", str(checkpoint("qwen3")), "--data", str(text_file), "--out", str(out), "--name", name,
                 "--report", "html", *ANALYZE]) == 0
    printed = capsys.readouterr()
    shown = printed.out + printed.err + (out / "report.html").read_text(encoding="utf-8")
    for raw in ("\x1b", "\x00", "\u202e", "\u2028"):
        assert raw not in shown, repr(raw)
    assert "=x\\x1b[2J\\0\\u202eevil\\u2028\\rb" in shown                # shown as escapes
    assert set(probe.Analysis.load(out).massive.model) == {name}          # the raw name, read back
    import csv
    with (out / "massive.csv").open(newline="", encoding="utf-8") as f:
        models = {row[0] for row in list(csv.reader(f))[1:]}
    assert models == {"'" + name}                                      # no formula in a spreadsheet
    line = _one_error_line(capsys, ["analyze", str(tmp_path / "no\x1b[2Jwhere"), "--out", str(tmp_path / "o")])
    assert "\x1b" not in line and "no\\x1b[2Jwhere" in line


def test_the_pdf_draws_control_characters_as_escapes():
    """The PDF places text by hand: it is wrapped (and measured) and drawn printable."""
    from matplotlib.figure import Figure

    from probe.reports.sections.items import printable_texts
    from probe.reports.measure import wrap

    assert wrap("a\x1b[2Jb \u202eevil", 500, 10) == ["a\\x1b[2Jb \\u202eevil"]
    figure = Figure()
    figure.text(0, 0, "x\x00y")
    figure.add_subplot().set_title("\u2028t")
    texts = {t.get_text() for t in printable_texts(figure).findobj(lambda a: hasattr(a, "get_text"))}
    assert {"x\\0y", "\\u2028t"} <= texts and not any("\x00" in t or "\u2028" in t for t in texts)
