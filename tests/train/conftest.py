"""Session fixtures for the tests of probe/train: a small corpus and the three arms trained on
it through the command line, with QK-norm and without (each trained once)."""
from __future__ import annotations

import csv
import inspect
import json
import textwrap
from pathlib import Path

import pytest

from probe.api.cli import main
from tests.train.tiny_runs import TINY


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    """About 12 KB of English prose and Python: a few dozen stdlib docstrings, one per paragraph."""
    parts = []
    for module in (json, csv, textwrap, inspect):
        for name in sorted(dir(module)):
            doc = inspect.getdoc(getattr(module, name))
            if doc and not name.startswith("_") and doc not in parts:
                parts.append(doc)
    text = "\n\n".join(parts)[:12_000]
    path = tmp_path_factory.mktemp("train-data") / "docs.txt"
    path.write_text(text)
    return path


@pytest.fixture(scope="session")
def arms(tmp_path_factory, corpus_file) -> Path:
    """The three arms, trained through the command line (--arm all) for 12 steps."""
    out = tmp_path_factory.mktemp("arms") / "run"
    assert main(["train", "--arm", "all", "--data", str(corpus_file), "--tokens", "1536",
                 "--out", str(out), "--eval-every", "4", *TINY]) == 0
    return out


@pytest.fixture(scope="session")
def no_qk_arms(tmp_path_factory, corpus_file):
    """The three arms trained with --no-qk-norm (12 steps), and each arm's model as it stood
    when training saved it (captured from the loop, to compare with what probe.load reads)."""
    import probe.train.loop as loop

    out = tmp_path_factory.mktemp("no-qk") / "run"
    trained = {}
    save = loop.save_model

    def capture(model, tokenizer, folder):
        save(model, tokenizer, folder)
        trained[Path(folder).name] = model            # the last save of each arm is its final one

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "save_model", capture)
        assert main(["train", "--arm", "all", "--data", str(corpus_file), "--tokens", "1536",
                     "--out", str(out), "--eval-every", "4", "--no-qk-norm", *TINY]) == 0
    return out, trained


@pytest.fixture(scope="session")
def hybrid_arms(tmp_path_factory, corpus_file) -> Path:
    """The two hybrid arms (Qwen3.5 layout, 4 layers), trained through the command line
    (--arm hybrids) for 12 steps."""
    out = tmp_path_factory.mktemp("hybrids") / "run"
    assert main(["train", "--arm", "hybrids", "--data", str(corpus_file), "--tokens", "1536",
                 "--out", str(out), "--eval-every", "4", *TINY, "--layers", "4"]) == 0   # the last --layers wins
    return out
