"""The proof: hostile notebooks graded in ONE batch beside honest ones, through the real command.

``python -m autograder grade`` runs on a scratch copy of the course with every fixture in
``tests/submissions/hostile/`` (delivered as each says: a folder, a zip, a named pipe, a
link) and three honest students: the solution, a sample mutant (in an LMS class export,
``--lms-export``) and the untouched release notebook. Every row of grades.csv is checked
against the fixture's ``expect`` lines, with the instructor's points and no row for a
student who did not submit; the instructor's files must come out untouched, and nothing
beside the output folder and the course may change; the gradebook must hold exactly what
grades.csv says. Then the honest students are graded again, alone (from nbgrader's
``submitted/`` layout, into the same gradebook, after an instructor gave one manual
grade): their grades must equal those of the hostile batch, with no duplicate rows and
the manual grade kept.

Where the machine has root and Linux namespaces every fixture is graded in the full
sandbox (``# needs: root`` fixtures only where the test runs as root). Elsewhere the
sandbox is limits-only (docs/grading.md, "What is isolated"): the batch then holds the
fixtures that do not say ``# needs: full-isolation`` — attacks on the instructor's files
and a fork bomb are stopped only by the namespaced sandbox — and every row of those must
still hold. ``AUTOGRADER_TEST_ISOLATION=none`` forces that mode on a
machine that could do better.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import sandbox
from tests.grading import fixtures
from tools.mutants import ROOT, build_submission, mutants, source_notebook

pytestmark = pytest.mark.nbgrader

ISOLATION = os.environ.get("AUTOGRADER_TEST_ISOLATION") or sandbox.available_isolation()

ASSIGNMENT = "01_matmul_from_shapes"
# A line only the hidden checks of ASSIGNMENT hold (their secret shapes): found in a page, it is a leak.
HIDDEN_MARKER = next(line for line in (ROOT / "autograder" / "check" / "matmul.py").read_text().splitlines()
                     if line.startswith("LINEAR_TRANSPOSED = "))
OTHER = "00_vjp_contract"  # present in the course, so that a notebook of it is recognised
MUTANT = "first_sample_only"
LIMITS = ["--workers", "2", "--cell-timeout", "10", "--memory", "3", "--isolation", ISOLATION, "--quiet"]


def grade(course: Path, submissions: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--submissions", str(submissions),
         "--course", str(course), "--out", str(out), *LIMITS, *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=900)


def read_rows(path: Path) -> dict[tuple[str, str], dict]:
    with open(path, newline="") as f:
        return {(r["student"], r["grade_id"]): r for r in csv.DictReader(f)}


def digest(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def tree(root: Path, skip=()) -> dict[str, tuple]:
    """Every entry under ``root`` (links not followed, only regular files read): its type, size and content digest."""
    out = {}
    for where, dirs, files in os.walk(root):
        if Path(where) == root:
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        for name in dirs + files:
            p = Path(where, name)
            st = p.lstat()
            data = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
            out[str(p.relative_to(root))] = (stat.S_IFMT(st.st_mode), st.st_size if data else 0, data)
    return out


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


def _points() -> dict[str, float]:
    nb = source_notebook(ASSIGNMENT)
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}


def make_course(tmp: Path) -> Path:
    course = tmp / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for name in (ASSIGNMENT, OTHER):
        shutil.copytree(ROOT / "source" / name, course / "source" / name)
    return course


def write_submissions(subs: Path, course: Path, hostile, honest) -> None:
    for h in hostile:
        fixtures.deliver(h, subs, course)  # a folder, a zip, a named pipe, a link: as the fixture says
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
    """Every row against the fixtures' expect lines and the honest students' known grades; the points are the
    instructor's, and no row belongs to a student who did not submit (a zip naming another student)."""
    problems, tests = [], _test_ids()
    for h in hostile:
        for test_id, e in h.expected(tests).items():
            r = rows.get((h.student, test_id))
            if r is None:
                problems.append(f"{h.student}/{test_id}: no row")
                continue
            score, max_score = float(r["score"]), float(r["max_score"])
            got = f"{score:g}/{max_score:g} diagnosis={r['diagnosis']!r} reason={r['reason'][:160]!r}"
            if e.full and score != max_score:
                problems.append(f"{h.student}/{test_id}: expected full marks, got {got}")
            elif not e.full and (score != 0 or r["diagnosis"] != e.diagnosis or not r["reason"].startswith(e.reason)):
                problems.append(f"{h.student}/{test_id}: expected 0, diagnosis={e.diagnosis!r}, reason {e.reason!r}…; got {got}")
    for (student, test_id), (full, cls) in honest_expectations(tests).items():
        r = rows.get((student, test_id))
        if r is None:
            problems.append(f"{student}/{test_id}: no row")
        elif full != (float(r["score"]) == float(r["max_score"])) or (not full and r["diagnosis"] != cls) or r["reason"]:
            problems.append(f"{student}/{test_id}: expected {'full' if full else cls}, got {dict(r)}")
        elif r["seed"] != os.environ.get("AUTOGRADER_SEED", "0"):  # tests grade with a fixed seed: the batch's
            problems.append(f"{student}/{test_id}: seed {r['seed']!r}, expected AUTOGRADER_SEED's")
    students = {h.student for h in hostile} | set(honest)
    if unexpected := sorted({s for s, _ in rows} - students):
        problems.append(f"rows for students who did not submit: {unexpected}")
    if len(rows) != len(students) * len(tests):
        problems.append(f"{len(rows)} rows; expected one per student and test cell")
    points = _points()
    for (student, test_id), r in rows.items():
        if float(r["max_score"]) != points.get(test_id):
            problems.append(f"{student}/{test_id}: max_score {r['max_score']}, the instructor's is {points.get(test_id)}")
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
    # A zero from the hidden checks sits under a cell whose own output reads as a pass: the feedback must say why.
    patched = (out / "feedback" / "patched_checks" / f"{ASSIGNMENT}.html").read_text()
    if "Grader: this part scored 0. The hidden checks" not in patched:
        problems.append("patched_checks' feedback does not explain its hidden-check zero")
    return problems


def check_outputs(course: Path, out: Path, hostile) -> list[str]:
    """What a submission wrote stays inert text: no formula in grades.csv, no markup in report.md, feedback pages
    that run and load nothing (parsed as a browser parses them), outputs within the executor's caps, each cut
    marked (docs/grading.md, "Outputs")."""
    import json
    import re

    from autograder import nbexec
    from autograder.feedback import FEEDBACK_MAX
    from tests.grading.pagecheck import live_markup

    problems = []
    with open(out / "grades.csv", newline="") as f:
        formulas = [c for row in csv.reader(f) for c in row
                    if c[:1] in ("=", "+", "-", "@", "\t", "\r") and not re.fullmatch(r"[+-]?[\d.]+(e[+-]?\d+)?", c)]
    if formulas:
        problems.append(f"grades.csv: cells a spreadsheet would run as formulas: {formulas[:3]}")
    if re.search(r"<(img|script)|^#+ Injected", (out / "report.md").read_text(), re.I | re.M):
        problems.append("report.md holds markup from a submission")
    names = {h.name for h in hostile}
    for name in {"fake_reasons", "live_outputs", "huge_outputs"} & names:
        if not (out / "feedback" / name / f"{ASSIGNMENT}.html").is_file():
            problems.append(f"no feedback page for {name}")
    for page in sorted((out / "feedback").rglob("*.html")):
        if page.stat().st_size > FEEDBACK_MAX:
            problems.append(f"{page.relative_to(out)}: {page.stat().st_size} bytes, past the cap")
        if live := live_markup(page.read_text(errors="replace")):
            problems.append(f"{page.relative_to(out)} runs or loads: {live[:4]}")
    for path in sorted((course / "autograded").rglob("*.ipynb")):
        outputs = [o for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code" for o in c.outputs]
        if kinds := {m for o in outputs for m in o.get("data", {})} - {"text/plain", *nbexec.IMAGES}:
            problems.append(f"{path.relative_to(course)} keeps outputs of type {sorted(kinds)}")
        if (size := len(json.dumps(outputs).encode())) > nbexec.NOTEBOOK_OUTPUT_MAX + (1 << 20):
            problems.append(f"{path.relative_to(course)}: {size} bytes of outputs, past the cap")
    # The hidden checks' source never reaches a student: not in the kernel (prints_the_checks looks everywhere).
    marker = HIDDEN_MARKER
    leaks = [str(p.relative_to(out.parent)) for base in (course / "autograded", out / "feedback")
             for p in sorted(base.rglob("*")) if p.is_file() and marker in p.read_text(errors="replace")]
    if leaks:
        problems.append(f"the hidden checks' source is in {leaks[:3]}")
    if "prints_the_checks" in names and "LEAKED: nothing" not in (
            course / "autograded" / "prints_the_checks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text():
        problems.append("prints_the_checks' notebook does not show that it found nothing")
    if "huge_outputs" in names:
        text = (course / "autograded" / "huge_outputs" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text()
        for cut in ("output truncated by the grader: this cell's output passed",
                    "output truncated by the grader: the notebook's outputs passed"):
            if cut not in text:
                problems.append(f"huge_outputs' notebook does not say {cut!r}")
        if "output truncated by the grader" not in (out / "feedback" / "huge_outputs" / f"{ASSIGNMENT}.html").read_text():
            problems.append("huge_outputs' feedback does not say its output was truncated")
    return problems


def test_hostile_and_honest_in_one_batch_then_honest_alone(tmp_path):
    """One test, so that test runners that split tests across processes never run the batch twice."""
    from nbgrader.api import Gradebook

    course = make_course(tmp_path)
    hostile = [h for h in fixtures.fixtures()
               if h.assignment == ASSIGNMENT and (ISOLATION == "full" or not h.needs_full_isolation)
               and (os.geteuid() == 0 or not h.needs_root)]
    honest = honest_notebooks()
    subs = tmp_path / "submissions"
    subs.mkdir()
    write_submissions(subs, course, hostile, honest)
    protected = sorted((course / "source").rglob("*.ipynb")) + [course / "nbgrader_config.py"]
    before = digest(protected)
    outside = tree(tmp_path, skip=("out", "course"))  # the submissions, and whatever an escape would write beside them

    # 1. Every hostile notebook and the honest ones, in one batch.
    done = grade(course, subs, tmp_path / "out", "--lms-export", "lms-export.zip")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_rows(tmp_path / "out" / "grades.csv")
    problems = check_rows(rows, hostile, honest)
    if digest(protected) != before:
        problems.append("an instructor file changed")
    if (changed := sorted(set(tree(tmp_path, skip=("out", "course")).items()) ^ set(outside.items()))):
        problems.append(f"outside the output folder and the course: {changed[:5]}")
    problems += check_gradebook(course, rows)
    problems += check_report(tmp_path / "out", len({h.student for h in hostile} | set(honest)))
    problems += check_outputs(course, tmp_path / "out", hostile)
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
    # Into the same output folder: its template and preflight, cached there, are not built again (10 s).
    done = grade(course, again_subs.parent, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-3000:]
    again = read_rows(tmp_path / "out" / "grades.csv")
    assert {s for s, _ in again} == set(honest)
    for key, r in again.items():
        if key == ("untouched-release", "test_reduce_to_shape"):
            assert float(r["score"]) == 1.5 and "manual grade kept" in r["reason"], r
        else:
            assert (r["score"], r["diagnosis"]) == (rows[key]["score"], rows[key]["diagnosis"]), key
    with Gradebook(db) as gb:
        assert len(gb.find_assignment(ASSIGNMENT).submissions) == submissions_before
        assert len(list(gb.students)) == len({s for s, _ in rows})
