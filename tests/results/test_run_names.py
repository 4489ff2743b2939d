"""probe.summary_frame and the distinct names of runs of one checkpoint (probe/results/run_names.py)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

import probe
from probe import reports
from probe.results.run_names import distinct_names


@pytest.fixture(scope="module")
def three_runs(checkpoint, text_file, tmp_path_factory):
    """One checkpoint in float32 and bfloat16 and on a shorter window: three runs named alike."""
    root = tmp_path_factory.mktemp("names")
    path = checkpoint("llama")
    settings = {"f32": {}, "bf16": {"dtype": "bfloat16"}, "short": {"seq_len": 24}}
    return [probe.analyze(path, text_file, seq_len=settings[k].pop("seq_len", 48), progress=False,
                          **settings[k]).save(root / k) for k in settings]


def test_summary_frame_is_one_tidy_row_per_run(three_runs, tmp_path):
    frame = probe.summary_frame(three_runs)
    assert len(frame) == 3
    assert frame["name"].is_unique
    assert list(frame["dtype"]) == ["float32", "bfloat16", "float32"]
    assert list(frame["seq_len"]) == [48, 48, 24]
    for row, run in zip(frame.itertuples(), three_runs):
        summary = json.loads((run / "summary.json").read_text())
        meta = json.loads((run / "meta.json").read_text())
        for key in ("f_attn", "m_act", "loss", "tokens", "sequences"):
            assert getattr(row, key) == summary[key], key
        assert (row.checkpoint, row.bos_policy, row.data) == (meta["checkpoint"], meta["bos_policy"], meta["data"])
        assert row.source == str(run)
    # Plain columns: a CSV round trip gives the same table back.
    frame.to_csv(tmp_path / "runs.csv", index=False)
    back = pd.read_csv(tmp_path / "runs.csv", keep_default_na=False, na_values=[""])
    assert list(back.columns) == list(frame.columns)
    assert back["f_attn"].tolist() == pytest.approx(frame["f_attn"].tolist())
    # One run, or an in-memory Analysis, makes a one-row frame.
    assert len(probe.summary_frame(three_runs[0])) == 1
    assert probe.summary_frame(probe.Analysis.load(three_runs[1]))["dtype"].tolist() == ["bfloat16"]


def test_runs_of_one_checkpoint_are_named_by_what_differs(three_runs):
    names = list(probe.summary_frame(three_runs)["name"])
    base = json.loads((three_runs[0] / "summary.json").read_text())["model"]
    assert names == [f"{base} (float32, T=48)", f"{base} (bfloat16, T=48)", f"{base} (float32, T=24)"]
    with pytest.warns(UserWarning, match="two runs are named"):
        runs = reports.load_runs(three_runs)
    assert list(runs.models) == names


def test_distinct_names_number_runs_alike_in_every_setting():
    meta = {"dtype": "float32", "data": "/a/b/corpus.txt"}
    assert distinct_names(["m", "m", "n"], [meta, meta, meta]) == ["m", "m (2)", "n"]
    assert distinct_names(["m", "m", "m"], [meta, {**meta, "data": "/x/other.jsonl"}, meta]) == [
        "m (corpus.txt)", "m (other.jsonl)", "m (corpus.txt) (2)"]


def test_summary_frame_refuses_what_is_not_a_run(tmp_path):
    with pytest.raises(probe.ProbeError, match="not a run directory"):
        probe.summary_frame(tmp_path)


def test_summary_frame_refuses_what_is_no_run_in_one_line(three_runs, tmp_path):
    """Issue 37: summary_frame on a summary.json that is [] (or a meta.json that is a string),
    or called on None or a number, raised a traceback; now one ProbeError each."""
    import shutil

    for file, text in (("summary.json", "[]"), ("meta.json", '"x"'), ("summary.json", "{")):
        run = shutil.copytree(three_runs[0], tmp_path / f"{file}-{len(text)}")
        (run / file).write_text(text)
        with pytest.raises(probe.ProbeError, match=file):
            probe.summary_frame([run])
    for bad in (None, 3, [None]):
        with pytest.raises(probe.ProbeError, match="summary_frame takes"):
            probe.summary_frame(bad)
