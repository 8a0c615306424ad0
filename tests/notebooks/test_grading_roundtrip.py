"""The real nbgrader, end to end, on a scratch copy of the course.

For each assignment with samples: the source notebook scores full marks; the untouched
release notebook scores zero on every test cell with `not-implemented` and nothing
crashes; each mutant graded loses exactly the points of the exercises it breaks, with the
diagnosis it is meant to get.

nbgrader runs one notebook after another, about ten seconds each, so the suite grades the
mutants that between them declare every class of the assignment (``tools.mutants.covering``,
about two thirds of them), not all: every mutant's diagnosis, from both checks, and its
passing every exercise it does not declare are held by ``tests/autograder/test_samples.py``,
and what this test adds — the pipeline scoring each class — is the same for two mutants of one
class. ``make grade`` grades them all.
"""

import time

import pytest

from tools.mutants import covering, mutants, sample_assignments
from tools.samples import grade_samples, score_table

ASSIGNMENTS = sample_assignments()


@pytest.mark.nbgrader
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_samples_grade_as_expected(assignment, tmp_path):
    start = time.perf_counter()
    rows, problems, seconds = grade_samples(assignment, tmp_path / "course", cover=True)
    students = {r.student for r in rows}
    print(f"{assignment}: {len(students)} submissions autograded in {seconds:.0f} s "
          f"(setup included: {time.perf_counter() - start:.0f} s)")
    print(score_table(rows))
    assert {"solution", "untouched-release"} <= students
    assert len(students) >= 4, "expected mutants beside the solution and the release"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_graded_mutants_declare_every_class_of_the_assignment(assignment):
    every = mutants(assignment)
    chosen = covering(every)
    assert {c for m in chosen for c in m.expect.values()} == {c for m in every for c in m.expect.values()}
