"""Fixtures of the tests that drive the trusted checker directly: a zygote and a sandbox slot, per module."""

from __future__ import annotations

import os

import pytest

from autograder import autograde, sandbox

# With namespaces the value worker has no ``autograder`` in its filesystem; with limits only, its import is
# refused. AUTOGRADER_TEST_ISOLATION=none forces the second on a machine that could do the first.
ISOLATION = os.environ.get("AUTOGRADER_TEST_ISOLATION") or sandbox.available_isolation()


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = sandbox.Zygote(str(tmp_path_factory.mktemp("zygote")), str(tmp_path_factory.mktemp("log") / "zygote.log"))
    yield z.socket
    z.stop()


@pytest.fixture(scope="module")
def slot():
    """A sandbox uid of this test process's own: a batch graded beside it never shares its process limit.
    With limits only, the worker runs as this user and no uid is claimed."""
    if ISOLATION != "full":
        yield 0
        return
    slots = autograde.SandboxSlots()
    yield slots.slot(0)
    slots.close()
