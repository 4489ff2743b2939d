"""probe/train/cli.py: the options of `probe train`, and its errors as one line."""
from __future__ import annotations

from probe.api.cli import main
from tests.train.tiny_runs import TINY


def test_qk_norm_flag_parses_and_defaults_on():
    from probe.train.cli import add_arguments, config_from_args
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    base = ["--arm", "none", "--out", "x"]
    assert config_from_args(p.parse_args(base)).qk_norm is True
    assert config_from_args(p.parse_args(base + ["--qk-norm"])).qk_norm is True
    assert config_from_args(p.parse_args(base + ["--no-qk-norm"])).qk_norm is False


def test_min_lr_ratio_sets_the_schedule_the_grafting_experiment_ran():
    """The experiment (examples/grafts/experiment.py) trains at a constant rate after warmup
    (min_lr_ratio 1); the command line had no way to ask for it, so docs/grafting.md's example ran
    a cosine decay to 0.1 x --lr instead."""
    import argparse

    import pytest

    from probe.core.errors import ProbeError
    from probe.train.cli import add_arguments, config_from_args
    from probe.train.schedule import lr_factor

    p = argparse.ArgumentParser()
    add_arguments(p)
    base = ["--from", "g", "--train", "gates", "--steps", "60", "--warmup", "6", "--out", "x"]
    cosine = config_from_args(p.parse_args(base))
    assert cosine.min_lr_ratio == 0.1 and lr_factor(59, cosine) == pytest.approx(0.1, abs=1e-3)
    constant = config_from_args(p.parse_args(base + ["--min-lr-ratio", "1"]))
    assert [lr_factor(s, constant) for s in (0, 5, 6, 30, 59)] == [1 / 6, 1.0, 1.0, 1.0, 1.0]
    with pytest.raises(ProbeError, match="--min-lr-ratio must be between 0 and 1"):
        config_from_args(p.parse_args(base + ["--min-lr-ratio", "1.5"]))


def test_cli_reports_errors_in_one_line(tmp_path, corpus_file, capsys):
    assert main(["train", "--arm", "headwise", "--data", str(tmp_path / "missing.txt"),
                 "--out", str(tmp_path / "x"), *TINY]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_seed_out_of_range_is_one_line(tmp_path, capsys):
    """Issue 37: --seed 2**70 (or one whose row-order seed overflows 64 bits) is refused in one line."""
    from probe.api.cli import main

    for seed in (2 ** 70, 2 ** 62):
        code = main(["train", "--arm", "none", "--seed", str(seed), "--steps", "1", "--out", str(tmp_path / "x"),
                     "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "--seed" in err[0], err
        assert not (tmp_path / "x").exists()


def test_a_width_that_gives_odd_heads_is_one_line(tmp_path, corpus_file, capsys):
    """--width 33 (one head of 33 dimensions) or 62 over 2 heads: rotary positions need an even
    head size; transformers' config validation raised a traceback from inside the model's build."""
    for shape in (["--width", "33", "--heads", "1", "--kv-heads", "1"], ["--width", "62", "--heads", "2", "--kv-heads", "1"]):
        assert main(["train", "--arm", "none", "--data", str(corpus_file), "--out", str(tmp_path / "x"), *TINY,
                     *shape]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "even head size" in err and "Traceback" not in err, err
        assert not (tmp_path / "x").exists()
