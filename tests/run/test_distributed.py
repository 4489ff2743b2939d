"""The same command under torchrun (2 processes, gloo, CPU) gives the numbers of one process,
interventions included, with every process evaluating only its share of the batches."""
from __future__ import annotations

import json
import os
import re
import runpy
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from tests import tiny
from probe.api.cli import main
from probe.data.sequences import build_dataset
from probe.run.interventions import NOTHING_ZEROED
from probe.metrics.gates.reduce import GateStats
from probe.metrics.massive.reduce import MaxAbsStats

TABLES = ("gates", "gate_hist", "first_token", "first_token_buckets", "massive", "massive_top",
          "sparsity", "attention_patterns", "per_sequence")
# Columns that hold float64 sums divided by counts: equal up to the order of addition.
MEANS = 1e-6
# Intervention losses and mean-gate settings are float64 sums divided by counts too.
LOSSES = 1e-9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node 2 ARGS` on the CPU (gloo), one thread per process."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-addr", "127.0.0.1", "--master-port", str(free_port()), *args],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def shard_tokens(dataset, batch_size: int, world: int) -> list[int]:
    """Real tokens in each rank's batches, counted from the batches themselves."""
    return [sum(int(valid.sum()) for _, valid, _ in dataset.batches(batch_size, rank=r, world=world))
            for r in range(world)]


def assert_same_interventions(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal tables: losses and settings within LOSSES relative (NaN where the other is NaN),
    names, layers and zeroed counts exactly."""
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for col in ("loss", "delta_loss", "setting"):
        close = (a[col] - b[col]).abs() <= LOSSES * a[col].abs()
        assert (close | (a[col].isna() & b[col].isna())).all(), (col, a[col] - b[col])
    rest = ["model", "intervention", "layer", "zeroed"]
    assert a[rest].equals(b[rest]), (a[rest], b[rest])


def test_torchrun_two_processes_equal_one(checkpoint, loaded, text_file, tmp_path):
    ckpt = str(checkpoint("official_headwise"))
    args = ["analyze", ckpt, "--data", str(text_file), "--seq-len", "32", "--batch-size", "2", "--quiet",
            "--interventions", "all", "--exact-control"]
    one, two = tmp_path / "one", tmp_path / "two"
    with tiny.single_thread(), pytest.warns(UserWarning, match=re.escape(NOTHING_ZEROED)):   # a tiny model
        assert main([*args, "--out", str(one)]) == 0                     # has no massive activation
    run = torchrun("-m", "probe", *args, "--out", str(two))
    assert run.stdout.count("wrote ") == 1                 # only rank 0 writes and prints

    meta1, meta2 = (json.loads((d / "meta.json").read_text()) for d in (one, two))
    assert meta1["processes"] == 1 and meta2["processes"] == 2
    assert meta1["sparsity_control"] == meta2["sparsity_control"] == "second pass"   # merged too
    assert meta2["sparsity_exact"] == {"ungated": True, "gated": True, "mean_gate": True}
    assert meta1["sequences"] == meta2["sequences"] >= 4     # at least one batch per rank
    for table in TABLES:
        a, b = pd.read_csv(one / f"{table}.csv"), pd.read_csv(two / f"{table}.csv")
        assert list(a.columns) == list(b.columns) and len(a) == len(b), table
        for col in a.columns:
            if a[col].dtype.kind == "f":
                # counts, maxima, histograms and shares are exact; means within MEANS; a NaN on
                # one side only is a difference (fillna(0) once let 0.5 against NaN pass)
                assert (a[col].isna() == b[col].isna()).all(), (table, col)
                assert ((a[col] - b[col]).abs().dropna() <= MEANS).all(), (table, col)
            else:
                assert a[col].tolist() == b[col].tolist(), (table, col)
    exact = {("massive", "max_abs"), ("massive", "count"), ("gates", "count"), ("gates", "max"), ("gates", "min"),
             ("first_token", "n_queries")}
    for table, metric in exact:
        a, b = pd.read_csv(one / f"{table}.csv"), pd.read_csv(two / f"{table}.csv")
        assert a[a.metric == metric].value.tolist() == b[b.metric == metric].value.tolist(), (table, metric)
    for table in ("gate_hist", "sparsity", "massive_top"):
        assert pd.read_csv(one / f"{table}.csv").equals(pd.read_csv(two / f"{table}.csv")), table
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (one, two))
    for key in ("mean_gate", "f_attn", "f_attn_paper", "m_act", "loss", "sink_rate", "f_attn_lo", "m_act_hi",
                "loss_lo"):
        assert s2[key] == pytest.approx(s1[key], abs=MEANS), key     # the intervals resample merged rows
    assert s1["tokens"] == s2["tokens"]

    # Interventions: the same table, from passes shared out over the two processes.
    a, b = pd.read_csv(one / "interventions.csv"), pd.read_csv(two / "interventions.csv")
    assert_same_interventions(a, b)
    assert (a.intervention == "mean_gate").sum() == 5 and (a.delta_loss != 0).sum() >= 15
    passes = meta1["intervention_passes"]
    assert passes == meta2["intervention_passes"] == 15    # mean_gate, gate_one, gate_zero x (4 layers + all)
    dataset = build_dataset(str(text_file), loaded("official_headwise").tokenizer, seq_len=32)
    assert dataset.tokens == meta1["tokens"]
    assert meta1["intervention_tokens_per_process"] == [passes * dataset.tokens]
    # Each rank ran exactly its own batches in every pass, not the whole dataset.
    shares = shard_tokens(dataset, 2, 2)
    assert 0 < min(shares) and sum(shares) == dataset.tokens
    assert meta2["intervention_tokens_per_process"] == [passes * n for n in shares]


# interventions.run on its own (no Capture passed in), with thresholds low enough that the tiny
# model has massive activations to zero. Run by torchrun (2 processes) and in this process (1).
MASSIVE_SCRIPT = """
import json, sys
import torch
torch.set_num_threads(1)
import probe
from probe.run import distributed, interventions
from probe.data.sequences import build_dataset

ckpt, data, out = sys.argv[1:]
distributed.setup()
loaded = probe.load(ckpt)
dataset = build_dataset(data, loaded.tokenizer, seq_len=32)
frame = interventions.run(loaded, dataset, kinds="mean_gate,massive_zero", batch_size=2,
                          massive_min_abs=0.0, massive_ratio=4.0)
if distributed.is_main():
    frame.to_csv(out + ".csv", index=False)
    with open(out + ".json", "w") as f:
        json.dump(frame.attrs, f)
distributed.finish()
"""


def test_torchrun_interventions_use_merged_statistics(checkpoint, loaded, text_file, tmp_path, monkeypatch):
    """The mean gates and massive thresholds are those of the whole dataset (a rank's own would
    change `setting`, `zeroed` and the losses), and each rank zeroes only in its own batches."""
    script = tmp_path / "massive.py"
    script.write_text(MASSIVE_SCRIPT)
    ckpt = str(checkpoint("official_headwise"))
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    monkeypatch.setattr(sys, "argv", [str(script), ckpt, str(text_file), one])
    with tiny.single_thread():
        runpy.run_path(str(script), run_name="__main__")
    torchrun(str(script), ckpt, str(text_file), two)

    a, b = pd.read_csv(one + ".csv"), pd.read_csv(two + ".csv")
    assert_same_interventions(a, b)
    massive = a[a.intervention == "massive_zero"]
    assert (massive.zeroed > 0).all() and (massive.delta_loss != 0).all()   # something was zeroed
    attrs1, attrs2 = (json.loads(Path(p + ".json").read_text()) for p in (one, two))
    dataset = build_dataset(str(text_file), loaded("official_headwise").tokenizer, seq_len=32)
    passes = attrs1["passes"]
    assert passes == attrs2["passes"] == 10                  # (4 layers + all) x 2 kinds
    assert attrs1["tokens_per_process"] == [passes * dataset.tokens]
    assert attrs2["tokens_per_process"] == [passes * n for n in shard_tokens(dataset, 2, 2)]


def test_merge_gathers_top_k_and_reduces_min_max():
    """merge_reducers' rules (SUM / MIN / MAX / gathered) equal Reducer.merge, on one process's
    view of what every rank holds (the collectives themselves run in the torchrun test)."""
    g = torch.Generator().manual_seed(0)
    parts = [torch.rand(50, 2, 4, generator=g) for _ in range(2)]
    whole, halves = GateStats(2), [GateStats(2), GateStats(2)]
    whole.update(torch.cat(parts)[:3], torch.cat(parts))
    halves[0].update(parts[0][:3], parts[0])
    halves[1].update(parts[1][:0], parts[1])
    merged = halves[0].merge(halves[1])
    for name in ("count", "below", "above", "hist", "low", "high"):
        assert torch.equal(getattr(merged, name), getattr(whole, name)), name
    torch.testing.assert_close(merged.total, whole.total, rtol=1e-12, atol=0)

    tops = []
    for part in range(2):
        m = MaxAbsStats(3)
        h = torch.randn(40, 8, generator=g)
        n = torch.arange(40)
        m.update(h, torch.full((40,), part), n, n)
        tops.append(m)
    combined = MaxAbsStats(3)
    combined.merge_gathered("top", [t.top for t in tops])
    assert [c[0] for c in combined.top] == sorted((c[0] for t in tops for c in t.top), reverse=True)[:3]


# A reference Capture that was never merged, with one batch for two processes: rank 0's share is
# the whole dataset, rank 1's is empty. Both must refuse (one alone would leave the other waiting
# in the merge for ever).
UNMERGED_SCRIPT = """
import sys
import torch
torch.set_num_threads(1)
import probe
from probe import Capture
from probe.run import distributed, interventions
from probe.data.sequences import build_dataset
from probe.core.errors import ProbeError

ckpt, data, out = sys.argv[1:]
rank, world, _ = distributed.setup()
loaded = probe.load(ckpt)
dataset = build_dataset(data, loaded.tokenizer, seq_len=32, max_sequences=2)
cap = Capture(loaded.model, loaded.layout)
with torch.inference_mode(), cap:
    for ids, valid, seq in dataset.batches(4, 0, rank=rank, world=world):
        with cap.batch(ids, valid, seq):
            cap.observe_logits(loaded.model(input_ids=ids, use_cache=False).logits)
try:
    interventions.run(loaded, dataset, kinds="gate_one", batch_size=4, reference=cap, progress=False)
    said = "ran"
except ProbeError as err:
    said = str(err)
with open(f"{out}.{rank}", "w") as f:
    f.write(said)
distributed.finish()
"""


def test_unmerged_reference_is_refused_by_every_process(checkpoint, text_file, tmp_path):
    script = tmp_path / "unmerged.py"
    script.write_text(UNMERGED_SCRIPT)
    out = tmp_path / "said"
    torchrun(str(script), str(checkpoint("official_headwise")), str(text_file), str(out))
    said = [Path(f"{out}.{rank}").read_text() for rank in (0, 1)]
    assert "did not see this whole dataset in another process" in said[0]
    assert "scored 0 next-token pairs" in said[1]
