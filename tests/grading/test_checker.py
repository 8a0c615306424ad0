"""The trusted re-check on its own: through the value worker's proxies, it reaches the kernel's verdicts.

Each sample mutant (``tests/submissions/``) says which diagnosis its test cells get in the
kernel. Re-checked in the trusted checker — inputs from the tests' seed (AUTOGRADER_SEED, 0
unless set: tests/conftest.py), as the grader passes each submission's, the student's code in
a sandboxed worker without ``autograder``, results back by value — a mutant must fail
exactly those test cells, with the same class, and pass the others; the solution must
pass everything. This is what makes ``tampering`` trustworthy: an honest submission is
re-checked to the same verdict.

Classes that only a measurement *inside* the call can give (allocations, calls into
autograd, what a Function's ctx keeps) are measured by the worker itself
(``autograder/worker_instruments.py``) and reported to the same checks (``course.witness``):
a mutant of that kind must get its class from the re-check too.

Every mutant of the finished assignments is re-checked (the zygote makes each a few
seconds); among them Triton kernels that write out of bounds, an ``autograd.Function``
that saves the wrong tensor, and ``numerical_gradient``, which calls the checker's probe
back across the pipe.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from autograder import checker, seeds
from autograder.autograde import Limits
from autograder.grader import exercises_of, trusted_job
from tests.grading.conftest import ISOLATION
from tools.mutants import build_submission, mutants, sample_assignments, source_notebook

# The re-check holds in both sandboxes (tests/grading/conftest.py: the zygote, the slot, the isolation).

# Value-class verdicts that rest on a property all the same: triton_softmax's "its graph runs
# through a custom autograd.Function" reads the structure of a graph that lives in the worker.
PROPERTY_CELLS = {("03_triton_fused_softmax", "autograd_backward_and_torch_softmax", "test_triton_softmax")}
ASSIGNMENTS = sample_assignments()
SEED = seeds.parse(os.environ.get(seeds.SEED_ENV, "0"))


def cases():
    for assignment in ASSIGNMENTS:
        yield pytest.param(assignment, None, id=f"{assignment}-solution")
        for m in mutants(assignment):
            yield pytest.param(assignment, m.name, id=f"{assignment}-{m.name}")


@pytest.mark.parametrize("assignment, mutant", list(cases()))
def test_trusted_verdicts_match_the_kernels(assignment, mutant, zygote, slot, tmp_path):
    source = source_notebook(assignment)
    tests = [c.metadata["nbgrader"]["grade_id"] for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")]
    if mutant is None:
        nb, expect = source, {}
    else:
        m = next(m for m in mutants(assignment) if m.name == mutant)
        nb, expect = build_submission(assignment, m.cells), m.expect
    job = trusted_job(tmp_path, nbformat.from_dict(nb), exercises_of(assignment, source), set(tests), isolation=ISOLATION,
                      zygote=zygote, limits=Limits(cell_timeout=60), slot=slot, seed=SEED)
    results = checker.run(job)
    problems = []
    for t in tests:
        r = results.get(t, {})
        wanted = expect.get(t)
        if (assignment, mutant, t) in PROPERTY_CELLS:
            # The structure of a graph that lives in the worker: a pass, or the kernel's class.
            if not (r.get("status") == "ok" and (r.get("passed") or r.get("cls") == wanted)):
                problems.append(f"{t}: expected a pass or {wanted}, got {r}")
        elif wanted is None:
            if not (r.get("status") == "ok" and r.get("passed")):
                problems.append(f"{t}: expected a pass, got {r}")
        elif not (r.get("status") == "ok" and not r.get("passed") and r.get("cls") == wanted):
            problems.append(f"{t}: expected {wanted}, got {r}")
    log = Path(job["dir"]) / "valueworker.log"  # what the worker said last: why it ended, when it did
    assert not problems, "\n".join(problems) + ("\n--- valueworker.log:\n" + log.read_text(errors="replace")[-3000:]
                                                 if log.exists() else "")
