"""probe/train/cli.py: the options of `probe train`, and its errors as one line."""
from __future__ import annotations

from probe.cli import main
from train.tiny_runs import TINY


def test_qk_norm_flag_parses_and_defaults_on():
    from probe.train.cli import add_arguments, config_from_args
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    base = ["--arm", "none", "--out", "x"]
    assert config_from_args(p.parse_args(base)).qk_norm is True
    assert config_from_args(p.parse_args(base + ["--qk-norm"])).qk_norm is True
    assert config_from_args(p.parse_args(base + ["--no-qk-norm"])).qk_norm is False


def test_cli_reports_errors_in_one_line(tmp_path, corpus_file, capsys):
    assert main(["train", "--arm", "headwise", "--data", str(tmp_path / "missing.txt"),
                 "--out", str(tmp_path / "x"), *TINY]) == 2
    assert "does not exist" in capsys.readouterr().err
