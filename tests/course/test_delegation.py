"""course.delegation: tripwires on the course's helpers, armed only while a check runs student code."""

import pytest
import torch

import course
from course import delegation
from course.delegation import DelegatedToHelper, forbid_helpers


def test_unarmed_helpers_work_as_before():
    delegation.install()
    a, b = torch.tensor([3.0, 4.0]), torch.tensor([0.0, 0.0])
    assert course.relative_error(b, a) == 1.0  # all zeros against the reference (3, 4)
    assert course.gradcheck.verdict(1e-9) == "excellent"


def test_armed_a_helper_raises_and_is_recorded_once_per_call():
    with forbid_helpers() as record:
        with pytest.raises(DelegatedToHelper):
            course.gradcheck.verdict(1e-9)
        with pytest.raises(DelegatedToHelper):
            course.relative_error(torch.ones(2), torch.ones(2))
    assert record == ["course.gradcheck.verdict", "course.diagnose.relative_error"]
    assert course.gradcheck.verdict(1e-9) == "excellent", "disarmed again when the block ends"


def test_a_reference_taken_before_arming_is_the_same_tripwire():
    delegation.install()
    taken = course.gradcheck.numerical_vjp  # as `from course.gradcheck import numerical_vjp` would
    with forbid_helpers() as record, pytest.raises(DelegatedToHelper):
        taken(torch.matmul, (torch.ones(2, 2), torch.ones(2, 2)), torch.ones(2, 2))
    assert record == ["course.gradcheck.numerical_vjp"]


def test_nested_checks_each_see_the_trip():
    with forbid_helpers() as outer:
        with forbid_helpers() as inner, pytest.raises(DelegatedToHelper):
            course.gradcheck.verdict(0.5)
    assert outer == inner == ["course.gradcheck.verdict"]


def test_exempt_and_private_functions_never_trip():
    with forbid_helpers() as record:
        assert isinstance(course.todo(), NotImplementedError)  # the stub every exercise starts with
        course.diagnose._fmt_index("x", [1, 2])
    assert record == []


def test_install_is_idempotent():
    delegation.install()
    before = delegation.guarded()
    delegation.install()
    assert delegation.guarded() == before
    assert delegation.guarded()["course.gradcheck.verdict"] is course.gradcheck.verdict
