"""The memory a call touches, counted by the Linux kernel from another process (autograder/pages.py).

A child process stands for the value worker: this process (its parent, in the place of the sandbox's init)
resets its counts, has it do one thing, and reads what it touched. Memory made before and written during the
window counts, so do pieces alive together and memory freed before the window ends; reading back a small
buffer does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from autograder.pages import PageCounter, processes

MiB = 1 << 20

CHILD = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    libc = ctypes.CDLL(None)
    libc.mallopt(-3, 128 << 10)  # as the value worker does (valueworker._return_big_blocks)
    libc.mallopt(-1, 128 << 10)
    workspace = np.ones(64 << 17)  # 64 MiB, touched before any window
    small = np.ones(1 << 10)
    for line in sys.stdin:
        what = line.strip()
        if what == "small":
            small += 1.0
        elif what == "workspace":
            workspace += 1.0  # written in place: no allocation at all
        elif what == "fresh":
            np.ones(64 << 17).sum()  # made and freed inside the window
        elif what == "halves":
            a, b = np.ones(32 << 17), np.ones(32 << 17)  # two halves, alive together
            (a + 0).sum(); del a, b
        elif what == "let-go":
            workspace[:] = 2.0; del workspace  # written, then unmapped before the window ends
            workspace = np.ones(1)
        sys.stdout.write("done\\n"); sys.stdout.flush()
""")


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    yield proc
    proc.kill()
    proc.wait()


def touched(counter: PageCounter, proc, what: str) -> int:
    assert counter.begin(), "the counts could not be reset"
    proc.stdin.write(what + "\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "done"
    got = counter.end()
    assert got is not None
    return got


def test_the_kernel_counts_what_a_call_touches_however_it_was_allocated(child):
    counter = PageCounter(os.getpid())
    if not counter.available or not counter.begin():
        pytest.skip("this kernel does not let the test reset a child's page counts (/proc/PID/clear_refs)")
    assert child.pid in processes(os.getpid())
    touched(counter, child, "small")  # the first window pays for the child's start-up
    quiet = touched(counter, child, "small")
    assert quiet < 8 * MiB, quiet
    for what in ("workspace", "fresh", "halves", "let-go"):
        assert touched(counter, child, what) >= 60 * MiB, what  # each is 64 MiB of data


def test_a_process_that_ends_takes_its_count_with_it(child):
    counter = PageCounter(os.getpid())
    if not counter.available or not counter.begin():
        pytest.skip("this kernel does not let the test reset a child's page counts (/proc/PID/clear_refs)")
    counter.begin()
    child.kill()
    child.wait()
    assert counter.end() is None  # the checker refuses such a measurement


def test_no_sandbox_no_count():
    counter = PageCounter(None)
    assert not counter.available and not counter.begin()
