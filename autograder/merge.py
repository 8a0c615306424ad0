"""``python -m autograder merge OUT COURSE...``: one grade table from sections graded apart, each in its own
copy of the course (docs/grading.md, "Beyond one machine", last paragraph).
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

from . import gradebook
from .collect import InstructorError
from .gradebook import Gradebook
from .nbgrader_cli import nbgrader
from .report import formula_safe, read_csv, write_outputs


def merge_gradebooks(shards: list[Path], target: Path) -> dict[str, str]:
    """Copy every shard's assignments and submissions into the course folder ``target``; student -> shard."""
    owner: dict[str, str] = {}
    for shard in shards:
        db = shard / "gradebook.db"
        if not db.is_file():
            raise InstructorError(f"{shard} has no gradebook.db: give the course folder each machine graded in.")
        with Gradebook(f"sqlite:///{db}") as src:
            for a in src.assignments:
                gradebook.install_assignment(target, db, a.name)
            with gradebook.opened(target) as dst:
                for a in src.assignments:
                    for sub in a.submissions:
                        student = sub.student.id
                        if owner.get(student, str(shard)) != str(shard):
                            raise InstructorError(f"student {student!r} is in two shards: {owner[student]} and {shard}.")
                        owner[student] = str(shard)
                        scores = {g.cell.name: g.auto_score for nb in sub.notebooks for g in nb.grades
                                  if g.auto_score is not None}
                        gradebook.record(dst, a.name, student, scores, sub.timestamp,
                                         gradebook.seed_of(src, a.name, student))
                        for nb in sub.notebooks:
                            for g in nb.grades:
                                if g.manual_score is not None or g.extra_credit is not None:
                                    held = dst.find_grade(g.cell.name, nb.notebook.name, a.name, student)
                                    held.manual_score, held.extra_credit = g.manual_score, g.extra_credit
                        dst.db.commit()
    return owner


def merge_cell_tables(shards: list[Path], out: Path) -> list[str]:
    """OUT/<assignment>/grades.csv, report.md and diagnoses.png from every shard's grades/<assignment>/."""
    tables = defaultdict(list)
    for shard in shards:
        for csv_path in sorted(shard.glob("grades/*/grades.csv")):
            tables[csv_path.parent.name].extend(read_csv(csv_path))
    for assignment, rows in tables.items():
        write_outputs(out / assignment, rows, {"assignment": assignment, "supported": None})
    return sorted(tables)


def main(args) -> int:
    out: Path = args.out
    shards = [s.resolve() for s in args.shards]
    out.mkdir(parents=True, exist_ok=True)
    target = out / "merged-course"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir()
    shutil.copy(shards[0] / "nbgrader_config.py", target / "nbgrader_config.py")
    owner = merge_gradebooks(shards, target)
    shutil.copy(target / "gradebook.db", out / "gradebook.db")
    nbgrader(target, "export", f"--to={out / 'grades.csv'}")
    formula_safe(out / "grades.csv")  # nbgrader writes a student id such as "=HYPERLINK(…)" as it is
    assignments = merge_cell_tables(shards, out)
    if args.course is not None:
        merge_gradebooks([target], args.course.resolve())
    print(f"merged {len(owner)} students from {len(shards)} shards: {out / 'grades.csv'} (nbgrader export)"
          + (f"; per test cell: {', '.join(str(out / a / 'grades.csv') for a in assignments)}" if assignments else ""))
    return 0
