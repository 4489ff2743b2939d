"""The benchmarks' own measuring pieces (benchmarks/common.py, benchmarks/long_context_peers.py,
benchmarks/gdn_peers.py, benchmarks/whole_analysis.py): the clocks and peak memory a child reports,
the peers' predicted memory, the rows a resumed run keeps, the GDN peers' comparison, the stage
clocks of the whole analysis."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
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


# -- benchmarks/whole_analysis.py -----------------------------------------------------------------

def test_stage_clocks_time_each_stage_inclusive_and_put_the_functions_back(monkeypatch):
    import types

    import whole_analysis as wa

    module = types.ModuleType("staged")

    def inner():
        time.sleep(0.05)                       # wall, no CPU
        sum(range(200_000))                    # CPU

    def outer():
        module.inner()
        module.inner()
    module.inner, module.outer = inner, outer
    monkeypatch.setitem(sys.modules, "staged", module)
    stages = (("outer", "staged", "outer"), ("  inner", "staged", "inner"), ("gone", "staged", "missing"))
    spent = {label: (s, n) for label, s, n in wa.stage_clocks(lambda: module.outer(), stages)}
    assert set(spent) == {"outer", "  inner", "total"}          # a missing function is left out
    assert spent["  inner"][1] == 2 and spent["outer"][1] == 1
    assert 0 < spent["  inner"][0] <= spent["outer"][0] <= spent["total"][0]
    assert spent["total"][0] < 0.1                              # CPU time: the sleeps are not in it
    assert module.inner is inner and module.outer is outer


def test_metric_clocks_time_each_subscriber_by_its_metric_and_put_the_bus_back():
    import whole_analysis as wa
    from probe.capture import bus
    from probe.core.events import EVENTS

    class Spinning:
        def update(self, layer, x, b):
            sum(range(100_000))                 # CPU

        def _updater(self):
            def update(layer, x, b):
                sum(range(300_000))
            return update

    on = bus.Pass.__dict__["on"]
    event = EVENTS[0]

    def analysis():
        p = bus.Pass.__new__(bus.Pass)          # the bus alone: no layout, no metrics
        p._subscribers = {}
        metric = Spinning()
        p.on(event, metric.update)
        p.on(event, metric._updater())
        for _ in range(3):
            for f in p._subscribers[event]:
                f(0, None, None)

    spent = {m: (s, n) for m, s, n in wa.metric_clocks(analysis)}
    assert set(spent) == {"Spinning"} and spent["Spinning"][1] == 6
    assert spent["Spinning"][0] > 0
    assert bus.Pass.__dict__["on"] is on
    assert wa.metric_of(Spinning()._updater()) == "Spinning" and wa.metric_of(Spinning().update) == "Spinning"


def test_every_stage_of_the_breakdown_names_a_function_probe_has():
    """A moved or renamed function would drop out of the breakdown without a word."""
    import importlib

    import whole_analysis as wa

    for label, where, name in wa.STAGES:
        parts = where.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                owner = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for part in parts[cut:]:
                owner = getattr(owner, part)
            break
        assert hasattr(owner, name), (label, where, name)


def test_round_ratios_pair_each_round_with_its_own_plain_forward():
    import whole_analysis as wa

    rounds = {"plain": [1.0, 2.0, 1.0], "analyze": [1.2, 2.2, 1.15], "anatomy": [1.3, 2.8, 1.25]}
    spread = wa.round_ratios(rounds)
    assert set(spread) == {"analyze", "anatomy"}
    assert spread["analyze"] == pytest.approx((1.1, 1.2)) and spread["anatomy"] == pytest.approx((1.25, 1.4))
    assert wa.round_line({"T": 8, "rounds": rounds}) == "  per round: analyze 1.10-1.20x, anatomy 1.25-1.40x"
    assert wa.round_line({"T": 8, "error": "killed"}) is None


def test_user_line_divides_each_method_s_user_time_by_the_plain_forward_s():
    import whole_analysis as wa

    row = {"T": 8, "plain_user": 2.0, "analyze_user": 2.3, "anatomy_user": 2.5}
    assert wa.user_line(row) == "  user time only: analyze 1.15x, anatomy 1.25x"
    assert wa.user_line({"T": 8, "plain_user": 2.0, "analyze_user": 2.2}) == "  user time only: analyze 1.10x"
    assert wa.user_line({"T": 8, "error": "killed"}) is None
    assert wa.user_line({"T": 8, "plain_user": 0.0, "analyze_user": 1.0}) is None   # a clock too coarse


def test_the_quickstart_timed_is_the_readme_s():
    import whole_analysis as wa

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "probe " + " ".join(wa.QUICKSTART) + " --out" in readme


# -- benchmarks/kernel_choice.py ------------------------------------------------------------------

def test_kernel_load_calls_each_kernel_of_a_default_analysis():
    """The new process's snippet runs against today's kernels (a renamed kernel or argument
    fails here, not in the next benchmark run) and reports a load time."""
    import kernel_choice

    seconds = kernel_choice.load_seconds()
    assert 0 < seconds < 120
    for name in ("bin_counts_below", "scan_rows", "float64_sum", "vector_norms", "occupied", "signed_peak"):
        assert f"kernels.{name}(" in kernel_choice.LOAD


def test_process_line_gives_the_range_and_median_of_the_ratios_over_processes():
    import whole_analysis as wa

    rows = [{"T": 512, "plain_cpu": 2.0, "analyze_cpu": 2.2, "anatomy_cpu": 2.3},
            {"T": 512, "plain_cpu": 1.8, "analyze_cpu": 1.89, "anatomy_cpu": 2.07},
            {"T": 512, "plain_cpu": 1.9, "analyze_cpu": 2.09, "anatomy_cpu": 2.28},
            {"T": 512, "error": "timed out"}]
    assert wa.process_line(rows) == ("  in 3 fresh processes: analyze 1.05-1.10x (median 1.10x), "
                                     "anatomy 1.15-1.20x (median 1.15x)")
    assert wa.process_line(rows[:1]) is None                  # one process: the table says it all
