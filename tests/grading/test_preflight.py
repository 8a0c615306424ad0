"""The preflight: before the class, the source solution is graded through the same sandbox and pipeline.

A grader that cannot grade its own solution would give every student zero, "failed without
a diagnosis" (issue 13, item 8). So the command grades the source solution first and stops
with status 2 and the cause, before any student is graded or recorded, unless it gets full
marks on every test cell.

The first test is item 8's own scenario: the grader runs from a folder holding its own copy
of the project, while the environment's editable install points at this checkout. The
grader then binds the folder's ``course`` into the sandbox, but the kernel imports ``course``
the environment's way, from this checkout, which the sandbox does not hold. Only the
namespaced sandbox hides the checkout; with limits only the kernel reads it and grading
works, so that test needs full isolation. The second breaks the source solution itself, which
stops the batch in either sandbox.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import sandbox
from tools.mutants import ROOT

pytestmark = pytest.mark.nbgrader

ISOLATION = os.environ.get("AUTOGRADER_TEST_ISOLATION") or sandbox.available_isolation()
A = "01_matmul_from_shapes"


def course_with_a_student(where: Path) -> Path:
    (where / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", where)
    shutil.copytree(ROOT / "source" / A, where / "source" / A)
    (where / "subs" / "alice").mkdir(parents=True)
    shutil.copy(ROOT / "source" / A / f"{A}.ipynb", where / "subs" / "alice" / f"{A}.ipynb")  # full marks, if graded
    return where


def grade(course: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autograder", "grade", A, "--submissions", str(course / "subs"), "--course", str(course),
         "--out", str(course / "out"), "--workers", "1", "--cell-timeout", "10", "--isolation", ISOLATION, "--quiet"],
        cwd=cwd, capture_output=True, text=True, timeout=600)


def assert_nobody_graded(course: Path) -> None:
    from nbgrader.api import Gradebook

    assert not (course / "out" / "grades.csv").exists()
    assert not (course / "autograded").exists()
    if (course / "gradebook.db").exists():
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            assert [s.id for s in gb.students] == []
    assert "passed" not in ((course / "out" / ".calibration.json").read_text()
                            if (course / "out" / ".calibration.json").exists() else "")


@pytest.mark.skipif(ISOLATION != "full", reason="with limits only, the kernel reads the checkout and grading works")
def test_a_kernel_that_cannot_import_course_stops_the_batch_with_the_cause(tmp_path):
    clone = course_with_a_student(tmp_path / "clone")
    ignore = shutil.ignore_patterns("__pycache__")
    for pkg in ("autograder", "course"):  # its own copy of the project, not the one the environment installed
        shutil.copytree(ROOT / pkg, clone / pkg, ignore=ignore)
    done = grade(clone, cwd=clone)  # `python -m autograder` from there imports the grader from there
    assert done.returncode == 2, done.stderr[-3000:]
    err = done.stderr
    assert f"the source solution of {A} does not get full marks" in err, err
    assert "ModuleNotFoundError: No module named 'course'" in err, err
    assert f"({clone / 'course'})" in err and f"imports `course` from {ROOT / 'course'}" in err, err
    assert "test_linear_backward: 0/3" in err, err
    assert_nobody_graded(clone)


def test_a_source_solution_without_full_marks_stops_the_batch(tmp_path):
    course = course_with_a_student(tmp_path / "course")
    path = course / "source" / A / f"{A}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "reduce_to_shape")
    cell.source = "def reduce_to_shape(grad, shape):\n    return -grad  # the instructor's slip"
    nbformat.write(nb, path)
    done = grade(course, cwd=ROOT)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"the source solution of {A} does not get full marks" in done.stderr, done.stderr
    lines = [ln.strip() for ln in done.stderr.splitlines()]
    assert any(ln.startswith("test_reduce_to_shape: 0/2") for ln in lines), done.stderr
    assert not any(ln.startswith("test_linear_backward:") for ln in lines), done.stderr  # only what failed
    assert_nobody_graded(course)
