"""probe/api/console.py: a Ctrl-C during torch's import is held to the import's end (a
KeyboardInterrupt raised inside torch's C++ initialisers ends the process in std::terminate)."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from probe.api import console


@pytest.fixture
def watch():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are the main thread's")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with console.watch_interrupts() as w:
            yield w
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_interrupt_inside_held_is_raised_when_it_ends(watch):
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with watch.held():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):          # bytecodes after the signal: Python runs its handler here
                reached.append(1)
            reached.append("end of the body")
    assert reached[-1] == "end of the body" and watch.seen


def test_outside_held_an_interrupt_raises_at_once(watch):
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
        pytest.fail("the interrupt waited")                        # pragma: no cover
    with watch.held():                                                 # nothing pending: nothing raised
        pass
