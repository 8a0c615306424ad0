"""Each grading batch holds a block of sandbox uids of its own, so no two share a process limit."""

import subprocess
import sys

import pytest

from autograder.autograde import SLOTS_PER_BATCH, SandboxSlots


def test_batches_running_together_get_different_blocks(tmp_path):
    a, b = SandboxSlots(tmp_path), SandboxSlots(tmp_path)
    try:
        assert {a.slot(i) for i in range(SLOTS_PER_BATCH)}.isdisjoint(b.slot(i) for i in range(SLOTS_PER_BATCH))
    finally:
        a.close()
        b.close()


def test_a_block_is_free_again_when_its_batch_ends(tmp_path):
    a = SandboxSlots(tmp_path)
    first = a.slot(0)
    a.close()
    c = SandboxSlots(tmp_path)
    assert c.slot(0) == first
    c.close()


def test_a_batch_that_dies_frees_its_block(tmp_path):
    """The lock is the operating system's: a grader killed mid-batch leaves no stale claim."""
    code = (f"from autograder.autograde import SandboxSlots; import os; "
            f"s = SandboxSlots(__import__('pathlib').Path({str(tmp_path)!r})); os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True)
    s = SandboxSlots(tmp_path)
    assert s.slot(0) == 0
    s.close()


def test_more_workers_than_a_block_holds_is_refused(tmp_path):
    s = SandboxSlots(tmp_path)
    with pytest.raises(ValueError, match="at most"):
        s.slot(SLOTS_PER_BATCH)
    s.close()
