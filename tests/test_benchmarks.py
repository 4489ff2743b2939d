"""The benchmarks' own measuring pieces (benchmarks/common.py, benchmarks/long_context_peers.py,
benchmarks/gdn_peers.py):
the clocks and peak memory a child reports, the peers' predicted memory, the rows a resumed run keeps."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from transformers import LlamaConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import common  # noqa: E402
import long_context_peers as lcp  # noqa: E402

MB = 2 ** 20


def test_clocks_keep_cpu_wall_and_peak_apart():
    held = []

    def fn():
        held.append(bytearray(64 * MB))     # zero-filled: every page touched, resident
        time.sleep(0.3)                     # wall time, no CPU time
        held.clear()

    c = common.clocks(fn, 2)
    assert c["wall_seconds"] >= 0.3
    assert c["seconds"] < c["wall_seconds"] - 0.2
    assert c["peak_mb"] >= 60
    assert common.timed(fn, 1)[1] >= 60


def test_predicted_needs_add_the_square_patterns():
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    T, params = 2048, 10 ** 6
    need = {m: lcp.predicted(m, config, params, T) for m in lcp.METHODS}
    square = 4 * 4 * T * T                  # one layer's (1, H, T, T) float32 pattern
    assert need["eager"] - need["plain"] == (3 + 2) * square
    assert need["tl_cache"] - need["plain"] == (3 + 3) * square
    assert need["tl_hooks"] - need["plain"] == 3 * square
    # probe keeps a block of the logits, not all T x V of them.
    assert need["plain"] - need["probe"] == 4 * (T - 1024) * 512


def test_rows_written_atomically_come_back(tmp_path):
    path = str(tmp_path / "rows.json")
    assert lcp.previous_rows(path) == []
    rows = [{"method": "plain", "T": 64, "seconds": 1.5}, {"method": "eager", "T": 64, "error": "not run"}]
    lcp.write_atomic(path, {"command": "x", "rows": rows})
    assert lcp.previous_rows(path) == rows
    assert [p.name for p in tmp_path.iterdir()] == ["rows.json"]


def test_gdn_peers_compare_on_the_same_inputs():
    """benchmarks/gdn_peers.py at T = 96 (two of the kernel's chunks): probe's terms add up to
    transformers' kernel output to float32 rounding; TransformerLens' effective attention, which
    drops the delta rule's key-removal term, misses it by far more even on normalised q and k."""
    import gdn_peers

    q, k, v, g, beta = gdn_peers.inputs(96, heads=4, dim=16)
    reference = gdn_peers.kernel_output(q, k, v, g, beta)
    error = lambda out: float((out.double() - reference.double()).norm() / reference.double().norm())
    assert error(gdn_peers.probe_output(q, k, v, g, beta)) < 1e-5
    assert error(gdn_peers.tl_output(*gdn_peers.normed(q, k), v, g, beta)) > 1e-2
