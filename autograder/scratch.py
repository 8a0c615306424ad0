"""Grade notebooks with the real nbgrader, in a scratch copy of the course.

The repository root is the instructor's course directory; tests and ``make grade``
must never write its gradebook. So they copy what nbgrader needs (the config and
the source assignment) into a throw-away folder, generate the assignment there
(which records the locked test cells in a fresh gradebook), drop the submissions
into ``submitted/<student>/<assignment>/``, run ``nbgrader autograde``, and read
back each test cell's score and the ``diagnosis:`` line of its output.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
_DIAGNOSIS = re.compile(r"diagnosis: (?P<cls>[a-z-]+) — (?P<sentence>.*)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class CellGrade:
    student: str
    grade_id: str
    score: float
    max_score: float
    diagnosis: str  # the class, or "" when the cell passed or failed without one
    message: str  # the diagnosis sentence, or the error's first line


def nbgrader_env() -> dict[str, str]:
    """This interpreter's bin first on PATH: nbgrader runs `alembic` by name."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("MPLBACKEND", "Agg")
    # Checks run many tiny ops; one thread per kernel is faster and lets workers share cores.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def nbgrader(course_dir: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run one nbgrader command in ``course_dir``; raise with its log when it fails."""
    done = subprocess.run(  # autograder.nbrunner is `nbgrader` without a 4 s import (see its docstring)
        [sys.executable, "-m", "autograder.nbrunner", *args], cwd=course_dir, env=nbgrader_env(),
        capture_output=True, text=True, timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def make_course(course_dir: Path, assignment: str, root: Path = ROOT, hidden_tests: bool = True) -> Path:
    """A scratch course holding one assignment of the course at ``root``, generated with a fresh gradebook.

    ``hidden_tests=False``: the gradebook records each test cell without its hidden tests, so
    ``nbgrader autograde`` puts back only the visible checks (the sandboxed grader runs the
    hidden ones in its trusted checker instead: ``autograder.trusted``); ``source/`` keeps the
    instructor's notebook as it is.
    """
    course_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "nbgrader_config.py", course_dir / "nbgrader_config.py")
    target = course_dir / "source" / assignment
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(root / "source" / assignment, target, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    notebook = target / f"{assignment}.ipynb"
    original = notebook.read_bytes()
    if not hidden_tests:
        nbformat.write(without_hidden_tests(nbformat.reads(original.decode(), as_version=4)), notebook)
    try:
        nbgrader(course_dir, "generate_assignment", assignment, "--force")
    finally:
        notebook.write_bytes(original)
    return course_dir


def without_hidden_tests(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with every ``### BEGIN HIDDEN TESTS`` block removed, by nbgrader's own preprocessor."""
    from nbgrader.preprocessors import ClearHiddenTests

    nb, _ = ClearHiddenTests().preprocess(copy.deepcopy(nb), {})
    return nb


def submit(course_dir: Path, assignment: str, student: str, nb: nbformat.NotebookNode) -> Path:
    folder = course_dir / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{assignment}.ipynb"
    nbformat.write(nb, path)
    return path


def autograde(course_dir: Path, assignment: str, submissions: dict[str, nbformat.NotebookNode]) -> list[CellGrade]:
    """Autograde every submission (student -> notebook) and return one row per student and test cell."""
    for student, nb in submissions.items():
        submit(course_dir, assignment, student, nb)
    nbgrader(course_dir, "autograde", assignment, "--force")
    return read_grades(course_dir, assignment, list(submissions))


def read_grades(course_dir: Path, assignment: str, students: list[str]) -> list[CellGrade]:
    from nbgrader.api import Gradebook

    rows = []
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        for student in students:
            nb_path = course_dir / "autograded" / student / assignment / f"{assignment}.ipynb"
            outputs = _test_cell_messages(nb_path)
            submission = gb.find_submission(assignment, student)
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    if not grade.cell.name.startswith("test_"):
                        continue
                    cls, message = outputs.get(grade.cell.name, ("", ""))
                    score = grade.score if grade.score is not None else 0.0
                    rows.append(CellGrade(student, grade.cell.name, float(score), float(grade.max_score), cls, message))
    return sorted(rows, key=lambda r: (r.student, r.grade_id))


def _test_cell_messages(nb_path: Path) -> dict[str, tuple[str, str]]:
    """grade_id -> (diagnosis class, message) read from each failing test cell's error output."""
    nb = nbformat.read(nb_path, as_version=4)
    found = {}
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if not grade_id.startswith("test_") or not errors:
            continue
        text = _ANSI.sub("", "\n".join([errors[0].get("evalue", "")] + list(errors[0].get("traceback", []))))
        m = _DIAGNOSIS.search(text)
        if m:
            found[grade_id] = (m.group("cls"), m.group("sentence").strip())
        else:
            found[grade_id] = ("", f"{errors[0].get('ename', 'Error')}: {errors[0].get('evalue', '')}".strip())
    return found


def score_table(rows: list[CellGrade]) -> str:
    """A plain-text table: one line per student and test cell, then totals per student."""
    lines = [f"{'student':<28} {'test cell':<34} {'score':>9}  diagnosis"]
    totals: dict[str, list[float]] = {}
    for r in rows:
        lines.append(f"{r.student:<28} {r.grade_id:<34} {r.score:>4g}/{r.max_score:<4g}  {r.diagnosis or ('' if r.score == r.max_score else r.message[:60])}")
        t = totals.setdefault(r.student, [0.0, 0.0])
        t[0] += r.score
        t[1] += r.max_score
    lines.append("")
    lines += [f"{s:<28} total {t[0]:g}/{t[1]:g}" for s, t in totals.items()]
    return "\n".join(lines)
