"""Fixtures shared by the checks' tests."""

from contextlib import contextmanager

import pytest

import course.diagnose
import course.selfcheck.attention_trained
from course.sanitizer import Report

# Hidden inputs are drawn fresh on every grading run; these replay three draws, and a
# verdict (pass, or the class of a bug) must be the same for each.
SEEDS = (0, 1, 2)


@pytest.fixture(params=SEEDS, ids=lambda s: f"seed{s}")
def seeded(request, monkeypatch):
    monkeypatch.setenv("AUTOGRADER_SEED", str(request.param))
    return request.param


@pytest.fixture
def unsanitized(monkeypatch):
    """The checks as they run on a GPU, where Triton's interpreter does not run and course.sanitizer records
    nothing: there the checks' own ladder (sentinels, NaN padding, the values) names a missing mask or a race,
    which on a CPU the sanitizer names first."""

    @contextmanager
    def records_nothing():
        yield Report()

    monkeypatch.setattr(course.diagnose, "sanitize", records_nothing)
    monkeypatch.setattr(course.selfcheck.attention_trained, "sanitize", records_nothing)  # its dense-walk records
