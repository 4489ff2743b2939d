"""reports/parallel.py: figures drawn in forked workers give the bytes drawn here, in order;
a worker's exception and warnings reach the caller."""

from __future__ import annotations

import os
import signal
import warnings
from datetime import datetime, timezone

import pytest

from probe.reports import build_report, parallel

STAMP = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _built(run_dirs, out, workers: str, monkeypatch) -> dict[str, bytes]:
    monkeypatch.setenv(parallel.WORKERS_ENV, workers)
    runs = [run_dirs["baseline"], run_dirs["headwise"]]        # two runs: every kind of figure row
    build_report(runs, out, generated_at=STAMP)
    files = {path.name: path.read_bytes() for path in out.iterdir()}
    assert sorted(files) == ["report.html", "report.pdf"]
    return files


@pytest.mark.skipif(not parallel.can_fork(), reason="this platform does not fork: reports are drawn serially")
def test_parallel_report_is_byte_for_byte_the_serial_one(run_dirs, tmp_path, monkeypatch):
    serial = _built(run_dirs, tmp_path / "serial", "1", monkeypatch)
    forked = _built(run_dirs, tmp_path / "forked", "2", monkeypatch)
    assert forked.keys() == serial.keys()
    assert [name for name in serial if forked[name] != serial[name]] == []


def _where(job):
    if job == "fail":
        raise ValueError("job 'fail' failed")
    if job == "warn":
        warnings.warn("drawn with a warning", RuntimeWarning)
    return job, os.getpid()


@pytest.mark.skipif(not parallel.can_fork(), reason="this platform does not fork")
def test_map_forked_keeps_order_and_hands_back_errors_and_warnings(monkeypatch):
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    jobs = list("abcdef")
    results = parallel.map_forked(_where, jobs)
    assert [job for job, _ in results] == jobs
    assert os.getpid() not in {pid for _, pid in results}        # drawn in the workers
    with pytest.raises(ValueError, match="job 'fail' failed"):
        parallel.map_forked(_where, ["a", "fail"])
    with pytest.warns(RuntimeWarning, match="drawn with a warning"):
        assert [job for job, _ in parallel.map_forked(_where, ["warn", "b"])] == ["warn", "b"]
    # Shown as often as drawing here would show it: once per place under the default filter.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("default")
        parallel.map_forked(_where, ["warn", "warn", "warn"])
    assert [str(w.message) for w in said] == ["drawn with a warning"]
    # Closures travel too (the workers are forked: nothing is pickled on the way out).
    offset = 10
    assert parallel.map_forked(lambda x: x + offset, [1, 2, 3]) == [11, 12, 13]
    # Ctrl-C is the caller's to report: a worker that raised KeyboardInterrupt would print its own
    # traceback ("Process ForkPoolWorker-1: ..." under "probe: interrupted"); it ends silently.
    handlers = parallel.map_forked(lambda _: signal.getsignal(signal.SIGINT).__qualname__, [1, 2])
    assert handlers == ["_quit_on_interrupt.<locals>.<lambda>"] * 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler     # this process's is as it was


PARENT = os.getpid()


def _killed_in_a_worker(job):
    if os.getpid() != PARENT and job == "killed":
        os.kill(os.getpid(), signal.SIGKILL)          # as the kernel's out-of-memory killer would
    return job


@pytest.mark.skipif(not parallel.can_fork(), reason="this platform does not fork")
def test_a_worker_killed_midway_leaves_the_jobs_to_this_process(monkeypatch):
    """A pool whose worker dies waits forever for its result (multiprocessing.Pool does); here the
    jobs are drawn in this process instead, with one warning saying so."""
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    with pytest.warns(UserWarning, match="drawing the figures in 2 processes failed .*drawing them in this process"):
        assert parallel.map_forked(_killed_in_a_worker, ["a", "killed", "c"]) == ["a", "killed", "c"]


def test_one_worker_or_one_job_draws_here(monkeypatch):
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    assert {pid for _, pid in parallel.map_forked(_where, ["a", "b"])} == {os.getpid()}
    monkeypatch.setenv(parallel.WORKERS_ENV, "4")
    assert parallel.workers_for(1) == 1 and parallel.workers_for(0) == 1
    assert parallel.workers_for(3) == (3 if parallel.can_fork() else 1)    # at most one per job
    monkeypatch.setenv(parallel.WORKERS_ENV, "many")
    with pytest.warns(UserWarning, match="PROBE_REPORT_WORKERS='many' is not a whole number"):
        parallel.workers_for(3)
