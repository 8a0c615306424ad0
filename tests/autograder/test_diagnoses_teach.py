"""A failed check teaches without solving: it names the bug, points to the hint, and never prints the fix.

For every bug a sample mutant carries, from the visible and the hidden check alike:

- the message points to a hint of that exercise (``→ Hint N``) that exists in the release
  notebook, unless the class is one no hint can cover (the stub, a crash, a helper's answer);
- the message holds none of the exercise's answer forms (``tests/notebooks/answers/``): the
  literal fix lives in the last hint, where the student chooses to open it.

And each exercise's two checks read one hint table (``course.registry``), so they point to the same hint.
"""

from __future__ import annotations

import re

import pytest

import autograder.check as hidden
import course.selfcheck as visible
from course.diagnose import UNHINTED
from course.registry import BY_NAME
from tests.autograder.test_samples import DECLARED, EXERCISES
from tests.notebooks.test_derivation import answer_table, exercises, found, hints, release
from tests.support import failure_of, mutant_named

POINTER = re.compile(r"^→ Hint (\d+), just above this test cell, is about this kind of bug\.$", re.M)


def hint_count(assignment: str, name: str) -> int:
    nb = release(assignment)
    return len(hints(nb, next(ex for ex in exercises(nb) if ex.name == name)))


@pytest.mark.parametrize("assignment, name", EXERCISES)
def test_both_checks_of_an_exercise_read_one_hint_table(assignment, name):
    # course.diagnose.graded finds the table by the check's name
    assert getattr(visible, name).__name__ == getattr(hidden, name).__name__ == name
    assert BY_NAME[name].notebook == assignment and "*" in BY_NAME[name].hints
    count = hint_count(assignment, name)
    for cls, number in BY_NAME[name].hints.items():
        assert 1 <= number <= count, f"{name}'s hints[{cls!r}] = {number}, but the notebook has {count} hints"


@pytest.mark.parametrize("assignment, mutant, name, cls", DECLARED)
def test_a_diagnosis_points_to_its_hint_and_holds_no_answer(assignment, mutant, name, cls, monkeypatch):
    monkeypatch.setenv("AUTOGRADER_SEED", "0")
    forms = answer_table(assignment).get(name, {}).get("forms", [])
    for check in (getattr(hidden, name), getattr(visible, name)):
        message = str(failure_of(check, mutant_named(assignment, mutant)[name]))
        pointers = POINTER.findall(message)
        if cls in UNHINTED:
            assert not pointers, message
        else:
            assert len(pointers) == 1, f"{check.__module__}: no pointer to a hint in\n{message}"
            assert 1 <= int(pointers[0]) <= hint_count(assignment, name)
        leaked = found(forms, message)
        assert not leaked, f"{check.__module__} prints the answer {leaked}:\n{message}"
