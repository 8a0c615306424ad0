"""Where a score comes from: all of a test cell's points or none, decided by its checks, never by its output.

nbgrader scores a test cell from its first ``execute_result``, so a kernel that displays
2.9999999999999996 (a patched check's return value, or a ``pre_run_cell`` hook calling the
displayhook) would get partial credit for a stub. Here: the kernel's verdict is "its outputs
hold no error"; the grader gives the points only when the trusted re-check agrees, or, for an
exercise left to the kernel, when nbgrader's own reading is exactly full marks (recorded all
or nothing in the job: ``SaveCheckedGrades``); ``decide`` is the rule. The seed of the hidden
inputs is recorded beside the scores. The whole pipeline, attacks included, is
graded in tests/grading/test_grade_command.py (fixtures ``partial_credit_*``); here they are
graded again with ``--no-trusted``, where the kernel decides alone.
"""

from __future__ import annotations

import csv
import math
import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import nbformat
import pytest

from autograder import autograde, gradebook, sandbox, seeds
from autograder.grader import KernelOutcome, TrustedOutcome, decide, kernel_passed
from autograder.nbexec import SaveCheckedGrades
from autograder.report import Row, read_csv, write_csv
from tests.grading import fixtures
from tools.mutants import ROOT, source_notebook

A = "01_matmul_from_shapes"
ULP_BELOW_3 = math.nextafter(3.0, 0.0)  # 2.9999999999999996
CONFIRMED = {"status": "ok", "passed": True, "cls": "", "message": ""}


def cell(score: float, passed: bool, **kw) -> KernelOutcome:
    return KernelOutcome("s", A, "test_linear_backward", score, 3.0, passed=passed, **kw)


# -- decide: the grader's rule ------------------------------------------------------------------


@pytest.mark.parametrize("outcome, trusted, rechecked, expected", [
    # Passed in the kernel, confirmed by the re-check: all the points.
    (cell(3.0, True), CONFIRMED, True, (3.0, "", "")),
    # The visible checks passed in the kernel, the hidden ones found the stub: zero with their diagnosis, whatever
    # nbgrader recorded.
    (cell(3.0, True), {"status": "ok", "passed": False, "cls": "not-implemented", "message": "stub"}, True,
     (0.0, "not-implemented", "")),
    # Passed in the kernel, but no verdict came back for it: never a pass, and the reason says why.
    (cell(3.0, True), None, True, (0.0, "", "grading failed: the hidden checks gave no verdict")),
    (cell(3.0, True), {"status": "timeout", "message": "no answer"}, True, (0.0, "", "timeout: in the hidden checks")),
    (cell(3.0, True), {"status": "died", "message": "exit"}, True, (0.0, "", "kernel died: in the hidden checks")),
    # A reply the checker refused (over the wire format's limits, its measurements switched off): tampering.
    (cell(3.0, True), {"status": "refused", "message": "the reply holds more entries than the limit"}, True,
     (0.0, "tampering", "tampering: the hidden checks refused the reply")),
    # A partial score with an error after it (the pre_run_cell hook): the error decides, 0 with its diagnosis.
    (cell(ULP_BELOW_3, False, diagnosis="not-implemented"), None, True, (0.0, "not-implemented", "")),
    (cell(ULP_BELOW_3, False, diagnosis="not-implemented"), None, False, (0.0, "not-implemented", "")),
    # No error, whatever it displayed: the re-check decides (a right answer that displays a number, or
    # warns on stderr, keeps its points; the stub behind patched checks does not, see "refuted").
    (cell(ULP_BELOW_3, True), CONFIRMED, True, (3.0, "", "")),
    (cell(0.0, True), CONFIRMED, True, (3.0, "", "")),
    # Left to the kernel (--no-trusted, or no autograder.check call): an exact, error-free pass is full marks ...
    (cell(3.0, True), None, False, (3.0, "", "")),
    # ... a displayed partial score, or stderr (nbgrader's reading below full marks), is 0 ...
    (cell(ULP_BELOW_3, True), None, False, (0.0, "", "partial score: the test cell raised no error")),
    (cell(0.0, True), None, False, (0.0, "", "partial score: the test cell raised no error")),
    # ... and full marks recorded beside an error are 0.
    (cell(3.0, False, reason="timeout: the cell ran past 10 s"), None, False, (0.0, "", "timeout: the cell ran past")),
    # An in-kernel failure stands even where the re-check would pass it (a property only the kernel measures).
    (cell(0.0, False, diagnosis="materialized-jacobian"), CONFIRMED, True, (0.0, "materialized-jacobian", "")),
], ids=["confirmed", "refuted", "no-verdict", "re-check-timeout", "re-check-died", "re-check-refused",
        "hook-partial-then-error",
        "hook-partial-then-error-kernel-only", "partial-confirmed", "stderr-confirmed", "kernel-only-exact",
        "kernel-only-partial", "kernel-only-stderr", "kernel-only-error", "kernel-failure-stands"])
def test_a_cell_scores_all_its_points_or_none(outcome, trusted, rechecked, expected):
    row = decide(outcome, TrustedOutcome.parse(trusted), rechecked)
    score, diagnosis, reason = expected
    assert (row.score, row.max_score, row.diagnosis) == (score, 3.0, diagnosis), row
    assert row.reason.startswith(reason) and (reason or not row.reason or outcome.reason), row
    assert row.score in (0.0, row.max_score)


def test_a_missing_test_cell_never_passes():
    assert not kernel_passed(KernelOutcome("s", A, "test_x", 0.0, 2.0, reason="not graded: the cell is missing"))


# -- SaveCheckedGrades: what nbgrader records in the job -----------------------------------------


def _recorded(outputs, points=3.0, **meta) -> float:
    saver = SaveCheckedGrades()
    grade = SimpleNamespace(max_score=points, manual_score=None, auto_score=None, needs_manual_grade=None)
    saver.gradebook = SimpleNamespace(find_grade=lambda *args: grade, db=SimpleNamespace(commit=lambda: None))
    saver.notebook_id = saver.assignment_id = A
    saver.student_id = "s"
    c = nbformat.v4.new_code_cell("autograder.check.linear_backward(linear_backward)")
    c.metadata["nbgrader"] = {"grade": True, "grade_id": "test_linear_backward", "points": points, **meta}
    c.outputs = outputs
    saver._add_score(c, {})
    return grade.auto_score


def _result(value) -> nbformat.NotebookNode:
    return nbformat.v4.new_output("execute_result", data={"text/plain": repr(value)}, execution_count=1)


def _error(name="NotImplementedError") -> nbformat.NotebookNode:
    return nbformat.v4.new_output("error", ename=name, evalue="", traceback=[])


def test_nbgrader_partial_credit_is_off_in_the_job():
    assert _recorded([_result(ULP_BELOW_3)]) == 0.0  # nbgrader would record 2.9999999999999996
    assert _recorded([_result(ULP_BELOW_3), _error()]) == 0.0  # nbgrader: 2.9999999999999996, the error unread
    assert _recorded([_result(-1.0), _error()]) == 0.0  # nbgrader: a negative value is full marks
    assert _recorded([_result(1e9)]) == 0.0  # nbgrader: ValueError, the whole submission "grading failed"
    assert _recorded([nbformat.v4.new_output("stream", name="stderr", text="UserWarning\n")]) == 0.0  # nbgrader's rule
    assert _recorded([_error("GradingStopped")]) == 0.0
    assert _recorded([]) == 3.0
    assert _recorded([_result(3.0)]) == 3.0
    assert _recorded([_result((1, 2))]) == 3.0  # not a number: nbgrader reads it as no score at all


def test_the_kernel_verdict_is_read_from_error_outputs(tmp_path):
    nb = nbformat.v4.new_notebook()
    for grade_id, outputs in {"test_ok": [_result(0.0)], "test_raised": [_result(ULP_BELOW_3), _error()],
                              "test_quiet": []}.items():
        c = nbformat.v4.new_code_cell("pass")
        c.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": 1}
        c.outputs = outputs
        nb.cells.append(c)
    solution = nbformat.v4.new_code_cell("raise ValueError")
    solution.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "f"}
    solution.outputs = [_error("ValueError")]
    nb.cells.append(solution)
    nbformat.write(nb, tmp_path / "a.ipynb")
    assert autograde._test_cells(tmp_path / "a.ipynb")[1] == {"test_ok", "test_quiet"}


# -- seeds ---------------------------------------------------------------------------------------


def test_seed_options():
    assert seeds.parse_options([]) == (None, {})
    assert seeds.parse_options(["7", "alice=12", "a=b=3"]) == (7, {"alice": 12, "a=b": 3})
    for bad in (["x"], ["-1"], ["=5"], ["alice="], ["1", "2"], ["a=1", "a=2"], [str(2**63)], ["٣"]):
        with pytest.raises(ValueError):
            seeds.parse_options(bad)
    drawn = {seeds.draw() for _ in range(20)}
    assert len(drawn) > 1 and all(0 <= s < 2**seeds.SEED_BITS for s in drawn)


def test_the_seed_is_recorded_in_the_gradebook(tmp_path):
    from nbgrader.api import Gradebook

    with Gradebook(gradebook.db_url(tmp_path)) as gb:
        gb.add_assignment(A)
        gb.add_notebook(A, A)
        gb.add_grade_cell("test_linear_backward", A, A, max_score=3, cell_type="code")
        gb.add_source_cell("test_linear_backward", A, A, cell_type="code", locked=True, source="x", checksum="0")
        assert gradebook.seed_of(gb, A, "alice") is None  # no table yet: read, not created
        gradebook.record(gb, A, "alice", {"test_linear_backward": 3.0}, seed=4711)
        gradebook.record(gb, A, "bob", {"test_linear_backward": 0.0}, seed=2**32 - 1)
        assert (gradebook.seed_of(gb, A, "alice"), gradebook.seed_of(gb, A, "bob")) == (4711, 2**32 - 1)
        gradebook.record(gb, A, "alice", {"test_linear_backward": 3.0}, seed=5)  # graded again
        assert gradebook.seed_of(gb, A, "alice") == 5
        gradebook.record(gb, A, "bob", {"test_linear_backward": 0.0})  # a notebook that never ran keeps no seed
        assert gradebook.seed_of(gb, A, "bob") is None
        assert gb.find_grade("test_linear_backward", A, A, "alice").auto_score == 3.0


def test_grades_csv_has_the_seed_and_exact_scores(tmp_path):
    rows = [Row("alice", A, "test_linear_backward", 3, 3, seed=4711),
            Row("bob", A, "test_linear_backward", 1.5, 3, seed=0),
            Row("carol", A, "test_linear_backward", ULP_BELOW_3, 3),
            Row("dave", A, "test_linear_backward", 0, 3, "", "malformed notebook: not JSON")]
    write_csv(tmp_path / "grades.csv", rows)
    lines = (tmp_path / "grades.csv").read_text().splitlines()
    assert lines[0].endswith(",reason,seed")
    assert lines[1] == f"alice,{A},test_linear_backward,3,3,,,4711"
    assert lines[3] == f"carol,{A},test_linear_backward,2.9999999999999996,3,,,"  # never printed as 3
    assert read_csv(tmp_path / "grades.csv") == rows


# -- the attacks, with the kernel alone deciding ---------------------------------------------------


@pytest.mark.nbgrader
def test_the_partial_credit_attacks_score_zero_without_the_re_check(tmp_path):
    """``--no-trusted``: the kernel decides alone, and still neither attack gets a point; the solution gets all."""
    isolation = os.environ.get("AUTOGRADER_TEST_ISOLATION") or sandbox.available_isolation()
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "source" / A, course / "source" / A)
    subs = tmp_path / "subs"
    attacks = [h for h in fixtures.fixtures() if h.name in ("partial_credit_value", "partial_credit_hook")]
    assert len(attacks) == 2
    for h in attacks:
        fixtures.write(h, subs / h.name / f"{A}.ipynb", course)
    (subs / "solution").mkdir()
    nbformat.write(source_notebook(A), subs / "solution" / f"{A}.ipynb")
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", A, "--submissions", str(subs), "--course", str(course),
         "--out", str(tmp_path / "out"), "--workers", "2", "--cell-timeout", "10", "--isolation", isolation,
         "--no-trusted", "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "out" / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 15
    # Here the hidden tests ran in the kernel, so nbgrader's autograded notebooks hold their lines: the
    # feedback pages must not show them, nor load anything to draw their maths.
    for student in ("solution", *(h.name for h in attacks)):
        page = (tmp_path / "out" / "feedback" / student / f"{A}.html").read_text()
        text = re.sub(r"<[^>]*>", "", page)  # the code as shown, without the highlighter's spans
        assert "HIDDEN TESTS" not in text, student
        assert not re.search(r"autograder\.check\.\w+\(", text), student  # a hidden call line
        assert page.count("# hidden tests ran here") == 5, student
        assert "<script" not in page and "<math" in page, student
    for r in rows:
        if r["student"] == "solution":
            assert r["score"] == r["max_score"] and not r["reason"], r
        elif r["student"] == "partial_credit_value":  # no error, 2.9999999999999996 displayed
            assert r["score"] == "0" and r["reason"].startswith("partial score:"), r
        else:  # the hook's number, then the stub's error
            assert (r["score"], r["diagnosis"]) == ("0", "not-implemented"), r
