"""The proof: hostile notebooks graded in ONE batch beside honest ones, through the real command.

``python -m autograder grade`` runs on a scratch copy of the course with every fixture in
``tests/submissions/hostile/`` and three honest students: the solution, a sample mutant
(delivered as an LMS zip) and the untouched release notebook. Every row of grades.csv is
checked against the fixture's ``expect`` lines; the instructor's files must come out
untouched; the gradebook must hold exactly what grades.csv says. Then the honest
students are graded again, alone (from nbgrader's ``submitted/`` layout, into the same
gradebook, after an instructor gave one manual grade): their grades must equal those of
the hostile batch, with no duplicate rows and the manual grade kept.

Where the machine has root and Linux namespaces every fixture is graded in the full
sandbox. Elsewhere the sandbox is limits-only (docs/grading.md, "What is isolated"): the
batch then holds the fixtures that do not say ``# needs: full-isolation`` — attacks on the
instructor's files and a fork bomb are stopped only by the namespaced sandbox — and every
row of those must still hold. ``AUTOGRADER_TEST_ISOLATION=none`` forces that mode on a
machine that could do better.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import sandbox
from autograder.submissions import ROOT, build_submission, mutants, source_notebook
from tests.grading import fixtures

pytestmark = pytest.mark.nbgrader

ISOLATION = os.environ.get("AUTOGRADER_TEST_ISOLATION") or sandbox.available_isolation()

ASSIGNMENT = "01_matmul_from_shapes"
OTHER = "00_vjp_contract"  # present in the course, so that a notebook of it is recognised
MUTANT = "first_sample_only"
LIMITS = ["--workers", "2", "--cell-timeout", "10", "--memory", "3", "--isolation", ISOLATION, "--quiet"]


def grade(course: Path, submissions: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--submissions", str(submissions),
         "--course", str(course), "--out", str(out), *LIMITS],
        cwd=ROOT, capture_output=True, text=True, timeout=900)


def read_rows(path: Path) -> dict[tuple[str, str], dict]:
    with open(path, newline="") as f:
        return {(r["student"], r["grade_id"]): r for r in csv.DictReader(f)}


def digest(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def honest_notebooks() -> dict[str, nbformat.NotebookNode]:
    mutant = next(m for m in mutants(ASSIGNMENT) if m.name == MUTANT)
    return {
        "solution": source_notebook(ASSIGNMENT),
        "mutant": build_submission(ASSIGNMENT, mutant.cells),
        "untouched-release": nbformat.read(ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4),
    }


def honest_expectations(test_ids: list[str]) -> dict[tuple[str, str], tuple[bool, str]]:
    mutant = next(m for m in mutants(ASSIGNMENT) if m.name == MUTANT)
    out = {}
    for t in test_ids:
        out[("solution", t)] = (True, "")
        out[("untouched-release", t)] = (False, "not-implemented")
        out[("mutant", t)] = (t not in mutant.expect, mutant.expect.get(t, ""))
    return out


def _test_ids() -> list[str]:
    nb = source_notebook(ASSIGNMENT)
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def make_course(tmp: Path) -> Path:
    course = tmp / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for name in (ASSIGNMENT, OTHER):
        shutil.copytree(ROOT / "source" / name, course / "source" / name)
    return course


def write_submissions(subs: Path, course: Path, hostile, honest) -> None:
    for h in hostile:
        fixtures.write(h, subs / h.name / f"{ASSIGNMENT}.ipynb", course)
    for student, nb in honest.items():
        if student == "mutant":  # as an LMS exports it: one zip, files named <student>_<id>_<assignment>.ipynb
            loose = subs.parent / f"{student}_4711_{ASSIGNMENT}.ipynb"
            nbformat.write(nb, loose)
            with zipfile.ZipFile(subs / "lms-export.zip", "w") as z:
                z.write(loose, loose.name)
        else:
            (subs / student).mkdir(parents=True)
            nbformat.write(nb, subs / student / f"{ASSIGNMENT}.ipynb")


def check_rows(rows, hostile, honest) -> list[str]:
    """Every row against the fixtures' expect lines and the honest students' known grades."""
    problems, tests = [], _test_ids()
    for h in hostile:
        for test_id, e in h.expected(tests).items():
            r = rows.get((h.name, test_id))
            if r is None:
                problems.append(f"{h.name}/{test_id}: no row")
                continue
            score, max_score = float(r["score"]), float(r["max_score"])
            got = f"{score:g}/{max_score:g} diagnosis={r['diagnosis']!r} reason={r['reason'][:160]!r}"
            if e.full and score != max_score:
                problems.append(f"{h.name}/{test_id}: expected full marks, got {got}")
            elif not e.full and (score != 0 or r["diagnosis"] != e.diagnosis or not r["reason"].startswith(e.reason)):
                problems.append(f"{h.name}/{test_id}: expected 0, diagnosis={e.diagnosis!r}, reason {e.reason!r}…; got {got}")
    for (student, test_id), (full, cls) in honest_expectations(tests).items():
        r = rows.get((student, test_id))
        if r is None:
            problems.append(f"{student}/{test_id}: no row")
        elif full != (float(r["score"]) == float(r["max_score"])) or (not full and r["diagnosis"] != cls) or r["reason"]:
            problems.append(f"{student}/{test_id}: expected {'full' if full else cls}, got {dict(r)}")
    if len(rows) != (len(hostile) + len(honest)) * len(tests):
        problems.append(f"{len(rows)} rows; expected one per student and test cell")
    return problems


def check_gradebook(course: Path, rows) -> list[str]:
    from nbgrader.api import Gradebook

    problems = []
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        students = {s.id for s in gb.students}
        if students != {student for student, _ in rows}:
            problems.append(f"gradebook students {sorted(students)} differ from grades.csv")
        for (student, test_id), r in rows.items():
            cell = gb.find_grade(test_id, ASSIGNMENT, ASSIGNMENT, student)
            if cell.score != float(r["score"]):
                problems.append(f"gradebook {student}/{test_id}: {cell.score} but grades.csv says {r['score']}")
    return problems


def check_report(out: Path, n: int) -> list[str]:
    problems = []
    report = (out / "report.md").read_text()
    for line in (f"1 of {n}: batch-reduction in linear_backward",  # the mutant
                 f"of {n}: tampering in linear_backward", f"1 of {n}: malformed notebook in linear_backward"):
        if line not in report:
            problems.append(f"report.md lacks {line!r}")
    if (out / "diagnoses.png").read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        problems.append("diagnoses.png is not a PNG")
    if not (out / "feedback" / "solution" / f"{ASSIGNMENT}.html").is_file():
        problems.append("no feedback for the solution")
    if (out / "feedback" / "invalid_json").exists():
        problems.append("feedback for a notebook that never ran")
    # A tampering zero sits under a cell whose own output reads as a pass: the feedback must say why.
    forged = (out / "feedback" / "forged_replies" / f"{ASSIGNMENT}.html").read_text()
    if "Grader: this part scored 0. tampering" not in forged:
        problems.append("forged_replies' feedback does not explain its tampering zeros")
    return problems


def test_hostile_and_honest_in_one_batch_then_honest_alone(tmp_path):
    """One test, so that test runners that split tests across processes never run the batch twice."""
    from nbgrader.api import Gradebook

    course = make_course(tmp_path)
    hostile = [h for h in fixtures.fixtures()
               if h.assignment == ASSIGNMENT and (ISOLATION == "full" or not h.needs_full_isolation)]
    honest = honest_notebooks()
    subs = tmp_path / "submissions"
    subs.mkdir()
    write_submissions(subs, course, hostile, honest)
    protected = sorted((course / "source").rglob("*.ipynb")) + [course / "nbgrader_config.py"]
    before = digest(protected)

    # 1. Every hostile notebook and the honest ones, in one batch.
    done = grade(course, subs, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_rows(tmp_path / "out" / "grades.csv")
    problems = check_rows(rows, hostile, honest)
    if digest(protected) != before:
        problems.append("an instructor file changed")
    problems += check_gradebook(course, rows)
    problems += check_report(tmp_path / "out", len(hostile) + len(honest))
    assert not problems, "\n".join(problems)

    # 2. The honest students again, alone, from nbgrader's submitted/ layout, into the same gradebook,
    #    after the instructor gave one manual grade.
    db = f"sqlite:///{course / 'gradebook.db'}"
    with Gradebook(db) as gb:
        gb.find_grade("test_reduce_to_shape", ASSIGNMENT, ASSIGNMENT, "untouched-release").manual_score = 1.5
        gb.db.commit()
        submissions_before = len(gb.find_assignment(ASSIGNMENT).submissions)
    again_subs = tmp_path / "again" / "submitted"
    for student, nb in honest.items():
        (again_subs / student / ASSIGNMENT).mkdir(parents=True)
        nbformat.write(nb, again_subs / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    done = grade(course, again_subs.parent, tmp_path / "out-again")
    assert done.returncode == 0, done.stderr[-3000:]
    again = read_rows(tmp_path / "out-again" / "grades.csv")
    assert {s for s, _ in again} == set(honest)
    for key, r in again.items():
        if key == ("untouched-release", "test_reduce_to_shape"):
            assert float(r["score"]) == 1.5 and "manual grade kept" in r["reason"], r
        else:
            assert (r["score"], r["diagnosis"]) == (rows[key]["score"], rows[key]["diagnosis"]), key
    with Gradebook(db) as gb:
        assert len(gb.find_assignment(ASSIGNMENT).submissions) == submissions_before
        assert len(list(gb.students)) == len({s for s, _ in rows})
