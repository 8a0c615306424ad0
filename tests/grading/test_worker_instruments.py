"""The value worker's runner of a measured call (``worker_instruments._Fresh``), on its own: a thread per call.

The interpreter counts a thread among the live ones only once it runs, which on a loaded machine (CI's two cores
under a whole test suite) can be long after it was started. A runner that read "fewer live threads than before"
as "the thread ended without a word" then gave up on a call still to come: the call ran on beside the grader, its
measurement was refused or the worker died (both seen in CI). These tests hold a thread back before it runs.
"""

from __future__ import annotations

import _thread
import threading
import time

import pytest

from autograder.worker_instruments import _Fresh

HELD_BACK = 0.4  # seconds a thread waits before it runs: several of the runner's 0.05 s polls


def held_back(fresh: _Fresh, seconds: float = HELD_BACK) -> None:
    """Make ``fresh`` start threads that run only ``seconds`` later, and count as live only once they run."""
    real_start, real_count = fresh._start, fresh._count
    waiting = [0]

    def start(fn, args):
        waiting[0] += 1

        def late(*a):
            time.sleep(seconds)
            waiting[0] -= 1
            return fn(*a)

        return real_start(late, args)

    fresh._start = start
    fresh._count = lambda: real_count() - waiting[0]


def test_a_call_returns_its_value_and_the_steps_around_it_run_in_its_thread():
    fresh, threads = _Fresh(), []
    ran = fresh.run(lambda x, y=0: x + y, (2,), {"y": 3},
                    before=[(threads.append, (None,))], after=[(threading.get_ident, ())])
    assert ran.raised is None and ran.value == 5
    assert threads == [None] and ran.after != [threading.get_ident()]  # the after step ran on the call's thread


def test_what_a_call_raises_is_reported_and_the_steps_after_it_still_run():
    fresh = _Fresh()

    def fails():
        raise ValueError("the student's bug")

    ran = fresh.run(fails, (), {}, after=[(int, ("7",))])
    assert isinstance(ran.raised, ValueError) and ran.after == [7]


def test_a_call_that_ends_its_thread_without_a_word_is_reported():
    fresh = _Fresh()
    ran = fresh.run(_thread.exit, (), {})
    assert isinstance(ran.raised, SystemExit) and "without returning or raising" in str(ran.raised)


@pytest.mark.parametrize("fails", [False, True])
def test_a_thread_slow_to_run_is_waited_for(fails):
    fresh = _Fresh()
    held_back(fresh)

    def call():
        if fails:
            raise ValueError("raised late")
        return "returned late"

    begun = time.monotonic()
    ran = fresh.run(call, (), {}, after=[(int, ("1",))])
    assert time.monotonic() - begun >= HELD_BACK
    if fails:
        assert isinstance(ran.raised, ValueError)
    else:
        assert ran.raised is None and ran.value == "returned late"
    assert ran.after == [1]


def test_a_slow_thread_that_ends_without_a_word_is_still_reported():
    fresh = _Fresh()
    held_back(fresh)
    ran = fresh.run(_thread.exit, (), {})
    assert isinstance(ran.raised, SystemExit)


def test_the_interrupt_waits_for_the_thread_to_run():
    """A timeout shorter than the thread's wait to run still interrupts the call, once it runs."""
    fresh = _Fresh()
    held_back(fresh)

    def spins():
        end = time.monotonic() + 30
        while time.monotonic() < end:
            pass
        return "never interrupted"

    ran = fresh.run(spins, (), {}, timeout=0.05)
    assert isinstance(ran.raised, KeyboardInterrupt)
