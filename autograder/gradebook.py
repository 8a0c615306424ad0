"""The instructor's gradebook, written by the grading parent only, one transaction per student.

Jobs grade in throw-away gradebooks of their own. The seed of each submission's hidden inputs goes
in a table of the grader's own that nbgrader leaves alone (docs/grading.md, "Seeds").
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import nbgrader.api
from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy import text

from .nbgrader_cli import with_bin

# nbgrader runs `alembic` by name when it opens a gradebook: this environment's bin goes first on PATH.
os.environ["PATH"] = with_bin(os.environ)["PATH"]

# Every Gradebook() runs `alembic heads` in a subprocess (a second or two) to learn the schema
# version, which cannot change while we run: ask once per process.
if not hasattr(nbgrader.api.get_alembic_version, "cache_info"):
    nbgrader.api.get_alembic_version = lru_cache(maxsize=None)(nbgrader.api.get_alembic_version)


def db_url(course: Path) -> str:
    return f"sqlite:///{course / 'gradebook.db'}"


def opened(course: Path) -> Gradebook:
    """The course's gradebook, open: ``with opened(course) as gb`` closes it."""
    return Gradebook(db_url(course))


def install_assignment(course: Path, template_gradebook: Path, assignment: str) -> None:
    """Copy ``assignment``'s notebooks and cells from the template's gradebook into the course's."""
    with Gradebook(f"sqlite:///{template_gradebook}") as src, opened(course) as dst:
        a = src.find_assignment(assignment)
        dst.update_or_create_assignment(assignment, duedate=a.duedate)
        for nb in a.notebooks:
            dst.update_or_create_notebook(nb.name, assignment)
            for cell in nb.source_cells:
                dst.update_or_create_source_cell(cell.name, nb.name, assignment, cell_type=cell.cell_type,
                                                 locked=cell.locked, source=cell.source, checksum=cell.checksum)
            for cell in nb.grade_cells:
                dst.update_or_create_grade_cell(cell.name, nb.name, assignment, max_score=cell.max_score,
                                                cell_type=cell.cell_type)
            for cell in nb.solution_cells:
                dst.update_or_create_solution_cell(cell.name, nb.name, assignment)
            for cell in nb.task_cells:
                dst.update_or_create_task_cell(cell.name, nb.name, assignment, max_score=cell.max_score,
                                               cell_type=cell.cell_type)


SEED_TABLE = "autograder_seed"


def record(gb: Gradebook, assignment: str, student: str, scores: dict[str, float], timestamp=None,
           seed: int | None = None) -> None:
    """Create or update ``student``'s submission, set each test cell's automatic score and the seed it
    was graded with (one commit; a submission that never ran keeps no seed)."""
    gb.update_or_create_student(student)
    kwargs = {"timestamp": timestamp} if timestamp is not None else {}
    submission = gb.update_or_create_submission(assignment, student, **kwargs)
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            if grade.cell.name in scores:
                grade.auto_score = float(scores[grade.cell.name])
                grade.needs_manual_grade = False
    gb.db.execute(text(f"CREATE TABLE IF NOT EXISTS {SEED_TABLE} (assignment TEXT NOT NULL, student TEXT NOT NULL, "
                       "seed TEXT NOT NULL, PRIMARY KEY (assignment, student))"))
    params = {"a": assignment, "s": student}
    if seed is None:
        gb.db.execute(text(f"DELETE FROM {SEED_TABLE} WHERE assignment = :a AND student = :s"), params)
    else:
        gb.db.execute(text(f"INSERT OR REPLACE INTO {SEED_TABLE} (assignment, student, seed) VALUES (:a, :s, :seed)"),
                      dict(params, seed=str(int(seed))))
    gb.db.commit()


def seed_of(gb: Gradebook, assignment: str, student: str) -> int | None:
    """The seed ``student``'s submission of ``assignment`` was last graded with, or None."""
    exists = gb.db.execute(text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :t"),
                           {"t": SEED_TABLE}).first()
    if not exists:  # a gradebook no grader has written to: read it, never change it
        return None
    row = gb.db.execute(text(f"SELECT seed FROM {SEED_TABLE} WHERE assignment = :a AND student = :s"),
                        {"a": assignment, "s": student}).first()
    return int(row[0]) if row else None


def effective_scores(gb: Gradebook, assignment: str, student: str) -> dict[str, tuple[float, float, bool]]:
    """grade_id -> (score that counts, max score, manual?) as the gradebook holds it now."""
    out = {}
    try:
        submission = gb.find_submission(assignment, student)
    except MissingEntry:
        return out
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            out[grade.cell.name] = (float(grade.score or 0.0), float(grade.max_score), grade.manual_score is not None)
    return out
