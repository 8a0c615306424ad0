"""``python -m tools.bench_grading``: how fast a class is graded, measured on this machine.

For each assignment, in a scratch copy of the course, with copies of the solved (source)
notebook as the submissions and the full pipeline (sandbox, trusted re-check, feedback):

1. one submission, one worker, nothing cached: the first grading of an assignment
   (*cold setup*: generating the template, starting the zygotes, calibrating the trusted
   re-check);
2. ``--copies`` submissions at each worker count: *seconds per submission* and
   *submissions per minute*, from the time spent grading submissions (setup excluded:
   it is paid once per batch, and reported on its own as *warm setup*);
3. then the whole course for one student: every assignment in one batch (one submission
   each, warm), and its wall time.

Prints a table and, with ``--out``, writes the figures as JSON. Nothing here is a test:
the figures depend on the machine and on what else runs on it (the load average is
printed beside them).

Usage: python -m tools.bench_grading [--copies N] [--assignments ...] [--workers 1 2] [--course DIR] [--no-trusted] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import nbformat

from autograder.batch import Options, grade_all
from autograder.nbgrader_cli import ROOT, assignments, copy_course


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _submissions(course: Path, assignment: str, where: Path, copies: int) -> Path:
    nb = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    if where.exists():
        shutil.rmtree(where)
    for i in range(copies):
        (where / f"student{i + 1:02d}").mkdir(parents=True)
        nbformat.write(nb, where / f"student{i + 1:02d}" / f"{assignment}.ipynb")
    return where


def _grade(course: Path, assignment: str, subs: Path, out: Path, workers: int, trusted: bool) -> dict:
    start = time.perf_counter()
    summary = grade_all([Options(assignment=assignment, submissions=subs, course=course, out=out, workers=workers,
                                 trusted=trusted, progress=False)])[0]
    summary["wall"] = time.perf_counter() - start
    full = all(float(line.split(",")[3]) == float(line.split(",")[4])
               for line in (out / "grades.csv").read_text().splitlines()[1:])
    summary["all_full_marks"] = full
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--copies", type=int, default=2, metavar="N", help="copies of the solved notebook per assignment (default 2)")
    p.add_argument("--assignments", nargs="*", default=None, help="default: every assignment in source/")
    p.add_argument("--workers", type=int, nargs="*", default=[1, 2], metavar="N", help="worker counts to compare (default 1 2)")
    p.add_argument("--course", type=Path, default=None, metavar="DIR")
    p.add_argument("--no-trusted", action="store_true")
    p.add_argument("--out", type=Path, default=None, metavar="FILE", help="also write the figures as JSON here")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", module="nbgrader")  # SQLAlchemy chatter from nbgrader.api, as the grader's CLI
    warnings.filterwarnings("ignore", message=".*not in session.*")
    root = (args.course or ROOT).resolve()
    names = args.assignments or assignments(root)
    figures: dict = {"machine": {"cores": os.cpu_count(), "load_before": _load()}, "assignments": {}}
    print(f"bench: {', '.join(names)}; {args.copies} copies; workers {args.workers}; "
          f"load average {_load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="autograder-bench-") as t:
        tmp = Path(t)
        course = copy_course(tmp / "course", names, root)
        for a in names:
            out = tmp / "out" / a
            row: dict = {}
            cold = _grade(course, a, _submissions(course, a, tmp / "subs" / a, 1), out, 1, not args.no_trusted)
            row["cold_setup_s"] = cold["phases"]["setup"]
            row["first_submission_s"] = cold["wall"]
            ok = cold["all_full_marks"]
            subs = _submissions(course, a, tmp / "subs" / a, args.copies)
            for w in args.workers:
                s = _grade(course, a, subs, out, w, not args.no_trusted)
                ok &= s["all_full_marks"]
                row[f"w{w}"] = {"jobs_s": s["phases"]["jobs"], "warm_setup_s": s["phases"]["setup"], "wall_s": s["wall"],
                                "s_per_submission": s["phases"]["jobs"] / args.copies,
                                "per_minute": 60 * args.copies / s["phases"]["jobs"], "load": _load()}
            if len(args.workers) >= 2:
                a1, a2 = row[f"w{args.workers[0]}"], row[f"w{args.workers[1]}"]
                row["speedup"] = a1["jobs_s"] / a2["jobs_s"]
            row["solution_full_marks"] = ok
            row["not_rechecked"] = sorted(t for t, why in (cold.get("supported") or {}).items() if why)
            figures["assignments"][a] = row
            w1 = row[f"w{args.workers[0]}"]
            print(f"{a:28s} cold setup {row['cold_setup_s']:5.1f} s   warm setup {w1['warm_setup_s']:5.1f} s   "
                  + "   ".join(f"{w}w: {row[f'w{w}']['s_per_submission']:5.1f} s/sub {row[f'w{w}']['per_minute']:5.1f}/min"
                             for w in args.workers)
                  + (f"   speedup {row['speedup']:.2f}x" if "speedup" in row else "")
                  + ("" if ok else "   (NOT all full marks!)"), flush=True)
        # The whole course for one student, warm: every assignment in one batch, as
        # `python -m autograder grade 00_... 01_... --submissions DIR` grades it.
        student = tmp / "one-student"
        for a in names:
            nb = nbformat.read(course / "source" / a / f"{a}.ipynb", as_version=4)
            (student / "student01").mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, student / "student01" / f"{a}.ipynb")
        start = time.perf_counter()
        summaries = grade_all([Options(assignment=a, submissions=student, course=course, out=tmp / "out" / a,
                                       workers=max(args.workers), trusted=not args.no_trusted, progress=False)
                               for a in names])
        figures["whole_course_one_student_s"] = time.perf_counter() - start
        figures["whole_course_workers"] = max(args.workers)
        figures["whole_course_not_rechecked"] = {s["assignment"]: sorted(t for t, why in (s["supported"] or {}).items() if why)
                                                 for s in summaries}
    figures["machine"]["load_after"] = _load()
    print(f"whole course ({len(names)} assignments) for one student, warm, one batch at "
          f"{figures['whole_course_workers']} workers: {figures['whole_course_one_student_s']:.0f} s; "
          f"load average {_load()}")
    missing = {a: t for a, t in figures["whole_course_not_rechecked"].items() if t}
    if missing:
        print(f"test cells whose hidden checks are not run in the trusted checker: {missing}")
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
