"""probe/api/cli_parser.py: a mistyped command, choice or option is one line naming the nearest
valid one and the help of the command it belongs to."""
from __future__ import annotations

import pytest

from probe.api.cli import main


@pytest.mark.parametrize("argv, said", [
    (["analyz", "x"], "invalid choice: 'analyz' (choose from 'analyze', 'report', 'compare', 'train', "
                      "'graft', 'view', 'check'); did you mean 'analyze'? (see probe --help)"),
    (["analyze", "ckpt", "--bos", "prepnd"], "did you mean 'prepend'? (see probe analyze --help)"),
    (["analyze", "ckpt", "--formt", "html"],
     "unrecognized arguments: --formt html; did you mean --format? (see probe analyze --help)"),
    (["analyze", "ckpt", "--max-sequnces=3", "--devce", "cpu"],
     "unrecognized arguments: --max-sequnces=3 --devce cpu; did you mean --max-sequences / --device? "
     "(see probe analyze --help)"),
    (["report", "run", "--out", "o", "--xyz"], "unrecognized arguments: --xyz (see probe report --help)"),
    (["compare", "a", "b", "--names", "x,y", "--bos", "zzz"], "invalid choice: 'zzz'"),
])
def test_mistakes_name_the_nearest_word_and_the_commands_help(argv, said, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("probe: error: ") and said in err
    if "zzz" in argv:
        assert "did you mean" not in err          # nothing near: no guess


def test_help_says_the_defaults_and_what_resume_does_for_compare(capsys):
    """--format wrote a PDF without saying so, --title had no help, and compare's --resume said
    it continues an interrupted analysis while compare refuses it but for a --seq-len sweep."""
    from probe.api.cli import main

    for command in ("report", "compare"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "(default: html,pdf)" in text and "the report's title (default:" in text
    assert "continue an interrupted --seq-len sweep from OUT" in text


def test_a_report_of_a_path_that_does_not_exist_says_so(tmp_path, capsys):
    from probe.api.cli import main

    assert main(["report", str(tmp_path / "nothing"), "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip() == (f"probe: error: {tmp_path / 'nothing'} does not exist; give a run "
                                               "directory written by probe analyze")


def test_the_summary_table_says_what_its_columns_are(capsys):
    """The printed summary's columns are summary.json's keys: one wrapped line says what each is,
    the sink threshold the run used and the loss's unit."""
    import probe
    from probe.api.cli_names import print_summary

    a = probe.Analysis(meta={"name": "m"}, summary={"model": "m", "f_attn": 0.1, "sink_epsilon": 0.25, "loss": 3.0})
    print_summary([a])
    legend = " ".join(capsys.readouterr().out.splitlines()[1:]).split()
    text = " ".join(legend)
    assert "sink_rate: share of heads with F-Attn > 0.25" in text and "nats per token" in text
