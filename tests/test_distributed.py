"""The same command under torchrun (2 processes, gloo, CPU) gives the numbers of one process."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pandas as pd
import pytest
import torch

import tiny
from probe.cli import main
from probe.reducers import GateStats, MaxAbsStats

TABLES = ("gates", "gate_hist", "first_token", "first_token_buckets", "massive", "massive_top",
          "sparsity", "attention_patterns")
# Columns that hold float64 sums divided by counts: equal up to the order of addition.
MEANS = 1e-6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_processes_equal_one(checkpoint, text_file, tmp_path):
    ckpt = str(checkpoint("official_headwise"))
    args = ["analyze", ckpt, "--data", str(text_file), "--seq-len", "32", "--batch-size", "2", "--quiet"]
    one, two = tmp_path / "one", tmp_path / "two"
    with tiny.single_thread():                           # each torchrun worker has one thread too
        assert main([*args, "--out", str(one)]) == 0
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                          "-m", "probe", *args, "--out", str(two)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("wrote ") == 1                 # only rank 0 writes and prints

    meta1, meta2 = (json.loads((d / "meta.json").read_text()) for d in (one, two))
    assert meta1["processes"] == 1 and meta2["processes"] == 2
    assert meta1["sequences"] == meta2["sequences"] >= 4     # at least one batch per rank
    for table in TABLES:
        a, b = pd.read_csv(one / f"{table}.csv"), pd.read_csv(two / f"{table}.csv")
        assert list(a.columns) == list(b.columns) and len(a) == len(b), table
        for col in a.columns:
            if a[col].dtype.kind == "f":
                # counts, maxima, histograms and shares are exact; means within MEANS
                assert ((a[col] - b[col]).abs().fillna(0) <= MEANS).all(), (table, col)
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
    for key in ("mean_gate", "f_attn", "f_attn_paper", "m_act", "loss", "sink_rate"):
        assert s2[key] == pytest.approx(s1[key], abs=MEANS), key
    assert s1["tokens"] == s2["tokens"]


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
