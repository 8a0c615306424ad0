"""One submission's grading keeps to its time: --wall for the kernel, and a stated margin for the hidden checks.

Code that swallows the interrupt only in the value worker once held a grading slot six times --wall (two
trusted-checker runs of three times --wall each), and its rows blamed the grader. Here the checker keeps to
the budget it is given, names the student's function or cell that stalled, and gives every exercise it could
not reach a ``timeout`` of its own; the grader tries again only what failed for a reason of its own.
"""

from __future__ import annotations

import json
import time

import nbformat
import pytest

from autograder import checker
from autograder.autograde import Limits
from autograder.grader import Status, TrustedOutcome, checker_results, exercises_of, trusted_job
from tests.grading.conftest import ISOLATION
from tools.mutants import build_submission, source_notebook

ASSIGNMENT = "01_matmul_from_shapes"
IN_THE_WORKER = "type(get_ipython()).__name__ == 'InteractiveShell'"  # the kernel's is ZMQInteractiveShell
STALL = """
import time


def _stall():
    while True:  # swallows the checker's interrupt, again and again
        try:
            time.sleep(0.2)
        except BaseException:
            pass
"""


def _job(tmp_path, cells: dict[str, str], zygote, slot, budget: float, timeout: float = 3):
    source = source_notebook(ASSIGNMENT)
    nb = build_submission(ASSIGNMENT, cells)
    tests = {c.metadata["nbgrader"]["grade_id"] for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")}
    job = trusted_job(tmp_path, nbformat.from_dict(nb), exercises_of(ASSIGNMENT, source), tests, isolation=ISOLATION,
                      zygote=zygote, limits=Limits(cell_timeout=timeout), slot=slot, seed=0)
    job["budget"] = budget
    return job


def _solution(grade_id: str) -> str:
    cell = next(c for c in source_notebook(ASSIGNMENT).cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return cell.source


def test_a_function_that_stalls_in_the_worker_is_named_and_the_budget_holds(tmp_path, zygote, slot):
    stalls = STALL + _solution("linear_backward").replace(
        "def linear_backward(", "def _honest_linear_backward(") + f"""

def linear_backward(*args, **kwargs):
    if {IN_THE_WORKER}:
        _stall()
    return _honest_linear_backward(*args, **kwargs)
"""
    job = _job(tmp_path, {"linear_backward": stalls}, zygote, slot, budget=9)
    began = time.monotonic()
    results = checker.run(job)
    took = time.monotonic() - began
    assert took < 9 + 5, took  # the budget, and a worker's stop
    first = results["test_linear_backward"]
    assert first["status"] == "timeout" and "linear_backward" in first["message"], first
    # Later exercises run on in a fresh worker, in what is left; none is a checker-error.
    assert all(r["status"] in ("ok", "timeout") for r in results.values()), results


def test_a_cell_that_stalls_in_the_worker_is_named(tmp_path, zygote, slot):
    cell = _solution("reduce_to_shape") + f"\n{STALL}\nif {IN_THE_WORKER}:\n    _stall()\n"
    job = _job(tmp_path, {"reduce_to_shape": cell}, zygote, slot, budget=12)
    results = checker.run(job)
    assert results["test_linear_backward"]["status"] == "ok"  # before the cell: checked
    stalled = results["test_reduce_to_shape"]
    assert stalled["status"] == "timeout" and "(reduce_to_shape)" in stalled["message"], stalled
    assert "cell " in stalled["message"]


def test_no_time_left_means_no_check_and_says_so(tmp_path, zygote, slot):
    job = _job(tmp_path, {}, zygote, slot, budget=0)
    results = checker.run(job)
    assert {r["status"] for r in results.values()} == {"timeout"}
    assert all("time ran out" in r["message"] for r in results.values())


def test_what_a_stopped_checker_leaves_is_read_as_the_students_timeout(tmp_path):
    path = tmp_path / "checker.json"
    tests = ["a", "b", "c"]
    path.write_text(json.dumps({"results": {"a": {"status": "ok", "passed": True}}, "in_flight": "b", "done": False}))
    got = checker_results(path, tests, code=None)
    assert got["a"].passed and got["b"].status is got["c"].status is Status.TIMEOUT
    assert "still running" in got["b"].message and "reached" in got["c"].message
    # A checker that ended by itself without every verdict failed: the grader's fault, tried again.
    got = checker_results(path, tests, code=1, last_log_line="Traceback ...")
    assert got["b"].status is Status.CHECKER_ERROR and got["b"].graders_fault
    assert checker_results(tmp_path / "missing.json", ["a"], code=None)["a"].status is Status.TIMEOUT


@pytest.mark.parametrize("result, fault", [
    ({"status": "timeout", "message": "the student's linear_backward gave no answer within 3 s"}, False),
    ({"status": "died", "message": "the student's code ended the worker"}, False),
    ({"status": "refused", "message": "tampering"}, False),
    ({"status": "ok", "passed": False}, False),
    ({"status": "no-start", "message": "the worker did not start (OSError: ...)"}, True),
    ({"status": "died", "message": "the worker did not start"}, False),  # the status decides, never the words
    ({"status": "checker-error", "message": "the trusted checker failed"}, True),
    ({"status": "no-worker", "message": "the worker was restarted too often"}, True),
    (None, True),
])
def test_only_the_graders_own_failures_are_tried_again(result, fault):
    assert TrustedOutcome.parse(result).graders_fault is fault
