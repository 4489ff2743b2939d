"""probe.core.options.AnalysisOptions: every option once, the CLI and probe.analyze built from it."""
from __future__ import annotations

import dataclasses

import pytest

from probe import ProbeError
from probe.api import cli
from probe.core import errors
from probe.core.options import DTYPE_NAMES, AnalysisOptions


def test_every_field_has_a_help_text_and_the_cli_offers_the_command_line_ones():
    parser = cli.build_parser()
    analyze = parser._subparsers._group_actions[0].choices["analyze"]
    flags = {o: a for a in analyze._actions for o in a.option_strings}
    for f in dataclasses.fields(AnalysisOptions):
        assert f.metadata["help"], f.name
        if f.metadata["cli"] is None:
            continue
        name = "--" + errors.CLI_NAMES.get(f.name, f.name).replace("_", "-")
        action = flags[name]
        assert action.dest == f.name and action.default == f.default, f.name
        assert action.help.startswith(f.metadata["cli"].get("help", f.metadata["help"])), f.name


def test_cli_defaults_and_python_defaults_are_the_same_object():
    args = cli.build_parser().parse_args(["analyze", "ckpt"])
    assert AnalysisOptions.from_cli(args) == AnalysisOptions()
    assert AnalysisOptions().seq_len == 512 and AnalysisOptions().checkpoint_seconds == 30.0
    args = cli.build_parser().parse_args(["analyze", "ckpt", "--seq-len", "64", "--quiet", "--save-every", "0"])
    o = AnalysisOptions.from_cli(args)
    assert (o.seq_len, o.progress, o.checkpoint_seconds) == (64, False, 0)


def test_dtype_names_are_the_loaders():
    from probe.load.loader import DTYPES

    assert tuple(DTYPES) == DTYPE_NAMES


@pytest.mark.parametrize("field, value, python, command_line", [
    ("seq_len", 1, "seq_len=", "--seq-len"),
    ("checkpoint_seconds", -1.0, "checkpoint_seconds=", "--save-every"),
    ("bos", "first", "bos='first'", "--bos first"),
    ("thresholds", (0.1, -1), "thresholds=", None),
    ("resamples", 1, "resamples=", "--resamples"),               # issue 37 #5: a 0-wide "interval"
    ("resamples", 10 ** 9, "resamples=", "--resamples"),         # issue 37 #11: 29.8 GiB after the pass
    ("seed", 2 ** 70, "seed=", "--seed"),                       # issue 37: torch cannot take it
    ("name", 5, "name=", "--name"),                             # once saved as the model's name
    ("name", " ", "name=", "--name"),
    ("device_map", "weird", "device_map='weird' is not a device map", "--device-map weird"),   # blamed the weights
])
def test_a_bad_option_names_the_python_argument_or_the_flag(field, value, python, command_line):
    with pytest.raises(ProbeError, match=python.replace("(", r"\(")):
        AnalysisOptions(**{field: value})
    if command_line is not None:
        with errors.command_line(), pytest.raises(ProbeError, match=command_line):
            AnalysisOptions(**{field: value})


def test_replace_checks_again_and_refuses_unknown_names():
    o = AnalysisOptions(seq_len=64)
    assert o.replace(batch_size=2).seq_len == 64
    with pytest.raises(ProbeError, match="batch_size="):
        o.replace(batch_size=0)
    with pytest.raises(TypeError, match="seq_length="):
        o.replace(seq_length=3)
    with pytest.raises(ProbeError, match="partial="):
        o.replace(resume=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.seq_len = 3


def test_meta_and_fingerprint_fields_come_from_the_options():
    o = AnalysisOptions(seq_len=64, thresholds=[0.5], seed=3, command="probe analyze x")
    assert o.meta_fields() == {"seq_len": 64, "thresholds": [0.5], "seed": 3, "resamples": 1000,
                               "command": "probe analyze x"}
    assert o.resume_fields() == {"seq_len": 64, "batch_size": 4, "anatomy": False, "gdn": False, "thresholds": [0.5],
                                 "past_positions": False, "rope_scaling": None}


def test_of_builds_once_and_refuses_what_is_not_options():
    assert AnalysisOptions.of(None, seq_len=64) == AnalysisOptions(seq_len=64)
    assert AnalysisOptions.of(AnalysisOptions(seq_len=64), batch_size=2) == AnalysisOptions(seq_len=64, batch_size=2)
    with pytest.raises(TypeError, match="AnalysisOptions"):
        AnalysisOptions.of({"seq_len": 64})
    with pytest.raises(TypeError, match="seq_length="):
        AnalysisOptions.of(None, seq_length=64)


# -- the defaults live in AnalysisOptions only ----------------------------------------------------

# Parameters named like a field of AnalysisOptions that mean something else there: the
# bootstrap's or a graft's own seed, a column's name.
OTHER_MEANING = {"seed", "name"}
# ... and in one part only: a reducer's device and dtype are those of its own state tensors
# (probe/metrics/), not the model's. The model's dtype and device default in options.py alone
# (DTYPE, DEVICE: what a checkpoint path loads in), like every other option.
OTHER_MEANING_IN = {"probe/metrics/": {"device", "dtype"}}
# (module, parameter) -> why it keeps a default of its own. Every entry must still be needed (a
# stale one fails the test): delete it when the default goes.
OWN_DEFAULTS = {
    ("probe/api/check.py", "seq_len"): "probe check's own short pass, not an analysis",
    ("probe/api/check.py", "batch_size"): "probe check's own short pass, not an analysis",
    ("probe/train/evaluate.py", "batch_size"): "probe train's evaluation batches",
    ("probe/data/documents.py", "text_field"): "the file reader probe train shares; every analysis "
                                          "passes options.text_field",
}


def _keyword_defaults(tree):
    """(parameter, line) of every parameter with a default other than None."""
    import ast

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            for arg, default in pairs:
                if not (isinstance(default, ast.Constant) and default.value is None):
                    yield arg.arg, node.lineno


def test_no_module_but_options_defaults_an_option():
    """An analysis option's default is written once, in AnalysisOptions: a function that takes
    `seq_len=512` or `thresholds=THRESHOLDS` of its own gives a caller who forgot to pass the
    option the default silently, and drifts when the option's default changes. None (not given,
    read from the options) is allowed."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    fields = {f.name for f in dataclasses.fields(AnalysisOptions)} - OTHER_MEANING
    found = {}
    for path in sorted((root / "probe").rglob("*.py")):
        module = path.relative_to(root).as_posix()
        if module == "probe/core/options.py":
            continue
        for parameter, line in _keyword_defaults(ast.parse(path.read_text(encoding="utf-8"))):
            own = {p for folder, names in OTHER_MEANING_IN.items() if module.startswith(folder) for p in names}
            if parameter in fields and parameter not in own:
                found.setdefault((module, parameter), line)
    new = {f"{m}:{line} {p}=" for (m, p), line in found.items() if (m, p) not in OWN_DEFAULTS}
    assert not new, (f"defaults of analysis options outside probe/core/options.py (take the options whole): "
                     f"{sorted(new)}")
    stale = set(OWN_DEFAULTS) - set(found)
    assert not stale, f"OWN_DEFAULTS entries no longer needed (delete them): {sorted(stale)}"


def test_the_default_check_finds_a_default(tmp_path):
    import ast

    tree = ast.parse("def f(x, seq_len=512, *, anatomy=False, tokenizer=None): pass\n"
                     "g = lambda thresholds=(0.1,): thresholds\n")
    assert sorted(p for p, _ in _keyword_defaults(tree)) == ["anatomy", "seq_len", "thresholds"]


def test_the_options_reach_the_sources_whole(loaded):
    """Capture and build_dataset take an AnalysisOptions (fields as checked overrides), so a
    misspelt option is a TypeError, never swallowed."""
    import torch

    from probe.capture.hf import Capture
    from probe.data.sequences import build_dataset

    lm = loaded("qwen3")
    model, layout = lm.model, lm.layout
    cap = Capture(model, layout, AnalysisOptions(thresholds=(0.5, 0.25)))
    assert next(iter(cap.sparsity.values())).thresholds == (0.5, 0.25)
    assert next(iter(Capture(model, layout, thresholds=[0.5]).sparsity.values())).thresholds == (0.5,)
    with pytest.raises(TypeError, match="threshold="):
        Capture(model, layout, threshold=(0.5,))
    with pytest.raises(ProbeError, match="thresholds="):
        Capture(model, layout, thresholds=(-1,))
    ids = torch.arange(3, 40)                                # a 1-D stream, cut into seq_len
    ds = build_dataset(ids, None, AnalysisOptions(seq_len=16, bos="none"), max_positions=None)
    assert [s.tolist() for s in ds.sequences] == [ids[:16].tolist(), ids[16:32].tolist(), ids[32:].tolist()]
    assert build_dataset(ids, None, seq_len=16, bos="none").digest() == ds.digest()
    with pytest.warns(UserWarning, match="lowered to the model's 8 positions"):
        capped = build_dataset(ids, None, seq_len=16, max_positions=8)
    assert [len(s) for s in capped.sequences] == [8] * 4 + [5]
    with pytest.raises(TypeError, match="seqlen="):
        build_dataset(ids, None, seqlen=16)
