"""The real nbgrader, end to end, on a scratch copy of the course.

For each assignment with samples: the source notebook scores full marks; the untouched
release notebook scores zero on every test cell with `not-implemented` and nothing
crashes; each mutant loses exactly the points of the exercises it breaks, with the
diagnosis it is meant to get.
"""

import time

import pytest

from tools.mutants import sample_assignments
from tools.samples import grade_samples, score_table

ASSIGNMENTS = sample_assignments()


@pytest.mark.nbgrader
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_samples_grade_as_expected(assignment, tmp_path):
    start = time.perf_counter()
    rows, problems, seconds = grade_samples(assignment, tmp_path / "course")
    students = {r.student for r in rows}
    print(f"{assignment}: {len(students)} submissions autograded in {seconds:.0f} s "
          f"(setup included: {time.perf_counter() - start:.0f} s)")
    print(score_table(rows))
    assert {"solution", "untouched-release"} <= students
    assert len(students) >= 4, "expected mutants beside the solution and the release"
    assert not problems, "\n".join(problems)
