"""Drawing a report's figures in parallel: one forked worker process per core.

A report's time is its figures (matplotlib draws one at a time, on one core): the demo's five
runs take 12.7 s to draw as HTML and 44 s as HTML and PDF on one core (docs/benchmarks.md). The figures do not
depend on one another, so `map_forked` draws them in worker processes. The workers are forked,
so each inherits the loaded runs and the plot functions (closures, which do not pickle) as
they are; only the results (bytes, sizes) travel back. Where the platform does not fork
(Windows; macOS, where forking a process with system frameworks loaded is unsafe), inside a
worker, or with one core, the same calls run here, in order.

PROBE_REPORT_WORKERS sets the number of workers (1: draw here, serially).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

WORKERS_ENV = "PROBE_REPORT_WORKERS"
MAX_WORKERS = 8

# What the forked workers run: set just before the pool forks, read by _run in each worker;
# one pool at a time (two threads drawing reports at once take turns).
_TASK: tuple[Callable[[Any], Any], Sequence[Any]] | None = None
_ONE_POOL = threading.Lock()
_SHOWN: dict = {}            # the workers' warnings shown here (warnings.warn_explicit's registry)


def workers_for(jobs: int) -> int:
    """How many worker processes `jobs` drawings get: the cores this process may use (at most
    MAX_WORKERS, at most one per job), or PROBE_REPORT_WORKERS; 1 where forking is unsafe."""
    if jobs < 2 or not can_fork():
        return 1
    asked = os.environ.get(WORKERS_ENV, "").strip()
    if asked:
        try:
            return max(1, min(int(asked), jobs))
        except ValueError:
            warnings.warn(f"{WORKERS_ENV}={asked!r} is not a whole number; drawing on every core")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, MAX_WORKERS, jobs))


def can_fork() -> bool:
    return (sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)   # a pool's worker cannot fork its own


def map_forked(function: Callable[[Any], Any], jobs: Sequence[Any]) -> list[Any]:
    """[function(job) for job in jobs], in forked workers where that helps (module docstring).
    Results come back in order; a worker's exception is raised here; warnings a worker's
    drawing gives are given again here, so that the caller's warning filters see them. Where no
    worker can be forked, or one ends abruptly (killed for memory), the jobs run here."""
    workers = workers_for(len(jobs))
    if workers == 1:
        return [function(job) for job in jobs]
    with _ONE_POOL:
        return _in_workers(function, jobs, workers)


def _in_workers(function: Callable[[Any], Any], jobs: Sequence[Any], workers: int) -> list[Any]:
    global _TASK
    _TASK = (function, jobs)
    _flush_std_streams()
    # Ctrl-C reaches every process of the terminal's group: the workers end silently (each
    # would print its own traceback), this process's KeyboardInterrupt cancels what is left.
    executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_quit_on_interrupt)
    try:
        try:
            futures = [executor.submit(_run, index) for index in range(len(jobs))]   # forks the workers
        except OSError as error:                  # no memory or process left to fork
            return _here(function, jobs, workers, error)
        try:
            results = [future.result() for future in futures]
        except BrokenProcessPool as error:        # a worker ended abruptly (killed for memory)
            return _here(function, jobs, workers, error)
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
        _TASK = None
    out = []
    for result, said in results:
        for message, category, filename, lineno in said:
            # With a registry, as warnings.warn keeps per module: a warning the filters show once
            # per place ("default") is shown once, not once for each figure that gave it.
            warnings.warn_explicit(message, category, filename, lineno, registry=_SHOWN)
        out.append(result)
    return out


def _here(function, jobs, workers: int, error: Exception) -> list[Any]:
    warnings.warn(f"probe reports: drawing the figures in {workers} processes failed "
                  f"({str(error) or type(error).__name__}); drawing them in this process instead")
    return [function(job) for job in jobs]


def _quit_on_interrupt() -> None:
    """A worker ends at once and without a word on Ctrl-C: the caller says it was interrupted."""
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(128 + signum))


def _flush_std_streams() -> None:
    """Written text still buffered here would be copied into each worker and could come out twice."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):        # closed or detached: nothing to copy
            pass


def _run(index: int) -> tuple[Any, list[tuple]]:
    """One job in a worker: its result and the warnings it gave (message, category, where)."""
    assert _TASK is not None
    function, jobs = _TASK
    with warnings.catch_warnings(record=True) as said:
        result = function(jobs[index])
    return result, [(str(w.message), w.category, w.filename, w.lineno) for w in said]
