"""Autograde the sample submissions with the real nbgrader and print a score table (``make grade``).

For each assignment the samples are: the source notebook itself (``solution``, must
score full marks), the untouched release notebook (``untouched-release``, must score
zero everywhere with ``not-implemented``), and every mutant under
``tests/submissions/<assignment>/`` (each must lose exactly the test cells it names,
with the diagnosis it names). Everything runs in a scratch course folder generated as the
class grader generates its template (``autograder.autograde.make_template``, hidden tests
kept), graded by one plain ``nbgrader autograde`` and read back into the class grader's
rows (``autograder.autograde.read_outcomes``); the repository's own gradebook is never touched.

Usage: python -m tools.samples [ASSIGNMENT ...] [--keep DIR] [--cover]
Exit status 1 when any sample was graded other than expected.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder import autograde
from autograder.nbgrader_cli import ROOT, nbgrader
from autograder.report import Row
from tools.mutants import Mutant, build_submission, covering, mutants, sample_assignments, source_notebook


@dataclass
class Expectation:
    student: str
    grade_id: str
    full_marks: bool
    diagnosis: str = ""  # required diagnosis class when the cell must score zero


def sample_submissions(assignment: str, chosen: list[Mutant] | None = None) -> tuple[dict[str, nbformat.NotebookNode],
                                                                                   list[Expectation]]:
    """The solution, the release and the mutants ``chosen`` (all of the assignment's by default) as notebooks, and
    what their grading must show."""
    src = source_notebook(assignment)
    tests = [c.metadata["nbgrader"]["grade_id"] for c in src.cells if c.metadata.get("nbgrader", {}).get("grade")]
    release = nbformat.read(ROOT / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    subs = {"solution": src, "untouched-release": release}
    expect = [Expectation("solution", t, True) for t in tests]
    expect += [Expectation("untouched-release", t, False, "not-implemented") for t in tests]
    for m in mutants(assignment) if chosen is None else chosen:
        student = f"mutant-{m.name}"
        subs[student] = build_submission(assignment, m.cells)
        expect += [Expectation(student, t, t not in m.expect, m.expect.get(t, "")) for t in tests]
    return subs, expect


def autograde_all(course_dir: Path, assignment: str, submissions: dict[str, nbformat.NotebookNode]) -> list[Row]:
    """Autograde every submission (student -> notebook) in one nbgrader run; one row per student and test cell."""
    for student, nb in submissions.items():
        folder = course_dir / "submitted" / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / f"{assignment}.ipynb")
    nbgrader(course_dir, "autograde", assignment, "--force")
    rows = [r for s in submissions for r in autograde.read_outcomes(course_dir, assignment, s).cells.values()]
    return sorted(rows, key=lambda r: (r.student, r.grade_id))


def mismatches(rows: list[Row], expect: list[Expectation]) -> list[str]:
    """Human-readable lines for every expectation the grading did not meet."""
    by_key = {(r.student, r.grade_id): r for r in rows}
    problems = []
    for e in expect:
        r = by_key.get((e.student, e.grade_id))
        if r is None:
            problems.append(f"{e.student}/{e.grade_id}: no grade recorded")
        elif e.full_marks and r.score != r.max_score:
            problems.append(f"{e.student}/{e.grade_id}: expected full marks, got {r.score:g}/{r.max_score:g} ({r.diagnosis or r.message})")
        elif not e.full_marks and r.score != 0:
            problems.append(f"{e.student}/{e.grade_id}: expected zero, got {r.score:g}/{r.max_score:g}")
        elif not e.full_marks and r.diagnosis != e.diagnosis:
            problems.append(f"{e.student}/{e.grade_id}: expected diagnosis {e.diagnosis!r}, got {r.diagnosis or r.message!r}")
    return problems


def grade_samples(assignment: str, course_dir: Path, chosen: list[Mutant] | None = None) -> tuple[list[Row], list[str],
                                                                                                float]:
    """Grade the solution, the release and the mutants ``chosen`` (every one by default) of one assignment in
    ``course_dir``; return rows, unmet expectations, seconds."""
    subs, expect = sample_submissions(assignment, chosen)
    autograde.make_template(ROOT, assignment, course_dir, hidden_in_kernel=True)
    start = time.perf_counter()
    rows = autograde_all(course_dir, assignment, subs)
    return rows, mismatches(rows, expect), time.perf_counter() - start


def score_table(rows: list[Row]) -> str:
    """A plain-text table: one line per student and test cell, then totals per student."""
    lines = [f"{'student':<28} {'test cell':<34} {'score':>9}  diagnosis"]
    totals: dict[str, list[float]] = {}
    for r in rows:
        why = r.diagnosis or ("" if r.score == r.max_score else r.message[:60])
        lines.append(f"{r.student:<28} {r.grade_id:<34} {r.score:>4g}/{r.max_score:<4g}  {why}")
        t = totals.setdefault(r.student, [0.0, 0.0])
        t[0] += r.score
        t[1] += r.max_score
    lines.append("")
    lines += [f"{s:<28} total {t[0]:g}/{t[1]:g}" for s, t in totals.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="default: every assignment with samples")
    parser.add_argument("--keep", type=Path, help="grade in this folder and keep it (default: a temporary one)")
    parser.add_argument("--cover", action="store_true",
                        help="grade only the mutants that between them declare every class of the assignment")
    args = parser.parse_args(argv)
    failed = False
    for name in args.assignments or sample_assignments():
        with tempfile.TemporaryDirectory(prefix=f"grade-{name}-") as tmp:
            course_dir = args.keep / name if args.keep else Path(tmp)
            rows, problems, seconds = grade_samples(name, course_dir, covering(mutants(name)) if args.cover else None)
            n = len({r.student for r in rows})
            print(f"\n== {name}: {n} submissions autograded in {seconds:.0f} s ({seconds / max(n, 1):.1f} s each)")
            print(score_table(rows))
            for p in problems:
                print(f"UNEXPECTED: {p}")
            failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
