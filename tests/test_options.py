"""probe.options.AnalysisOptions: every option once, the CLI and probe.analyze built from it."""
from __future__ import annotations

import dataclasses

import pytest

from probe import ProbeError, cli, errors
from probe.options import DTYPE_NAMES, AnalysisOptions


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
    from probe.load import DTYPES

    assert tuple(DTYPES) == DTYPE_NAMES


@pytest.mark.parametrize("field, value, python, command_line", [
    ("seq_len", 1, "seq_len=", "--seq-len"),
    ("checkpoint_seconds", -1.0, "checkpoint_seconds=", "--save-every"),
    ("bos", "first", "bos='first'", "--bos first"),
    ("thresholds", (0.1, -1), "thresholds=", None),
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
    assert o.resume_fields() == {"seq_len": 64, "batch_size": 4, "anatomy": False, "thresholds": [0.5],
                                 "past_positions": False, "rope_scaling": None}


def test_of_builds_once_and_refuses_what_is_not_options():
    assert AnalysisOptions.of(None, seq_len=64) == AnalysisOptions(seq_len=64)
    assert AnalysisOptions.of(AnalysisOptions(seq_len=64), batch_size=2) == AnalysisOptions(seq_len=64, batch_size=2)
    with pytest.raises(TypeError, match="AnalysisOptions"):
        AnalysisOptions.of({"seq_len": 64})
    with pytest.raises(TypeError, match="seq_length="):
        AnalysisOptions.of(None, seq_length=64)
