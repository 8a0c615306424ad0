"""The real nbgrader, end to end, on a scratch copy of the course.

For each assignment with samples: the source notebook scores full marks; the untouched
release notebook scores zero on every test cell with `not-implemented` and nothing
crashes; each mutant graded loses exactly the points of the exercises it breaks, with the
diagnosis it is meant to get.

nbgrader runs one notebook after another, about ten seconds each, so the suite grades the
mutants that between them declare every class of the course (``tools.mutants.covering`` over
every assignment's: 12 of 81, earlier notebooks first), not all. Every mutant's diagnosis from
both checks, and its passing every exercise it does not declare, are held by
``tests/autograder/test_samples.py``; every mutant's whole notebook, run by the grader's worker
and re-checked in the trusted checker, by ``tests/grading/test_checker.py``. What this test adds —
the notebook graded by nbgrader, and the pipeline scoring each class — is the same for two
mutants of one class, whatever their notebook. ``make grade`` grades them all.
"""

import time

import pytest

from tools.mutants import covering, mutants, sample_assignments
from tools.samples import grade_samples, score_table

ASSIGNMENTS = sample_assignments()
GRADED = covering([m for a in ASSIGNMENTS for m in mutants(a)])  # every class of the course, earlier notebooks first
CHOSEN = {a: [m for m in GRADED if m.assignment == a] for a in ASSIGNMENTS}


@pytest.mark.nbgrader
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_samples_grade_as_expected(assignment, tmp_path):
    start = time.perf_counter()
    rows, problems, seconds = grade_samples(assignment, tmp_path / "course", CHOSEN[assignment])
    students = {r.student for r in rows}
    print(f"{assignment}: {len(students)} submissions autograded in {seconds:.0f} s "
          f"(setup included: {time.perf_counter() - start:.0f} s)")
    print(score_table(rows))
    assert students == {"solution", "untouched-release"} | {f"mutant-{m.name}" for m in CHOSEN[assignment]}
    assert not problems, "\n".join(problems)


def test_the_graded_mutants_declare_every_class_of_the_course():
    every = [m for a in ASSIGNMENTS for m in mutants(a)]
    assert {c for m in GRADED for c in m.expect.values()} == {c for m in every for c in m.expect.values()}
    assert sum(map(len, CHOSEN.values())) == len(GRADED) <= len(every) // 4, "nbgrader grades one notebook at a time"
