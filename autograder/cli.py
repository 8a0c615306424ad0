"""The instructor's command line: ``python -m autograder grade|merge ...``; docs/grading.md is the guide.

``grade`` exits 0 when every submission got its rows (zeros included); 2 for the instructor's
own mistakes, with a message saying what to do.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from .nbgrader_cli import ROOT, fast_imports

fast_imports()  # before anything imports nbformat (see autograder/nbgrader_cli.py)

from .autograde import GiB, Limits, MiB  # noqa: E402

# The limits of each submission but --cell-timeout: option, Limits field, its unit and type on the command line, metavar, help.
_LIMITS = (
    ("--wall", "wall", 1, int, "S", "seconds for the whole notebook"),
    ("--memory", "address_space", GiB, float, "GIB", "address space per process, GiB"),
    ("--cpu", "cpu_seconds", 1, int, "S", "CPU seconds per process"),
    ("--processes", "processes", 1, int, "N", "processes and threads per sandbox"),
    ("--file-size", "file_size", MiB, int, "MIB", "largest file a submission may write, MiB"),
)


def limits_from(args, course: Path) -> Limits:
    config = course / "nbgrader_config.py"
    m = re.search(r"^c\.Execute\.timeout\s*=\s*(\d+)", config.read_text() if config.is_file() else "", re.M)
    return Limits(cell_timeout=args.cell_timeout or (int(m.group(1)) if m else 120),
                  **{name: int(getattr(args, name) * unit) for _, name, unit, *_ in _LIMITS})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m autograder", description="Grade a class of notebooks in a sandbox.")
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grade", help="autograde every submission of one assignment (or several)",
                       description="Autograde every submission of ASSIGNMENT in DIR, N at a time, each in a sandbox; "
                                   "record the grades in the course's gradebook; write grades.csv, report.md, "
                                   "diagnoses.png and feedback to --out. Several assignments share one batch "
                                   "(DIR then holds each student's notebooks; --out gets a folder per assignment).")
    g.add_argument("assignment", nargs="+")
    g.add_argument("--submissions", type=Path, required=True, metavar="DIR",
                   help="DIR/<student>/<ASSIGNMENT>.ipynb, nbgrader's submitted/ layout, or LMS .zip files")
    g.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="submissions graded at once (default: the number of cores)")
    g.add_argument("--out", type=Path, default=None, metavar="DIR", help="default: grades/ASSIGNMENT/")
    g.add_argument("--course", type=Path, default=None, metavar="DIR",
                   help="the nbgrader course directory (default: the current directory if it has "
                        "nbgrader_config.py, else this repository)")
    g.add_argument("--isolation", choices=("auto", "full", "none"), default="auto",
                   help="full: namespaces, a new root and an unprivileged uid (needs root on Linux); "
                        "none: resource limits only (default: the best this machine allows)")
    g.add_argument("--no-trusted", action="store_true",
                   help="run the hidden tests in the student's kernel, as nbgrader does, instead of the trusted "
                        "checker: faster, and the student's code can reach them (a class you trust, or development)")
    g.add_argument("--no-feedback", action="store_true", help="skip nbgrader's feedback generation")
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="run each submission's grading as a task on the Dask cluster whose scheduler is at ADDRESS "
                        "(tcp://host:8786); its workers need this checkout installed with '.[cluster]' "
                        "(docs/grading.md, 'Beyond one machine'). Without it: a local pool of --workers")
    g.add_argument("--lms-export", action="append", default=[], metavar="FILE",
                   help="a zip in DIR that an LMS exported for the whole class (files named "
                        "<student>_<anything>_<ASSIGNMENT>.ipynb); repeatable. Every other zip is one student's, "
                        "named <student>.zip")
    g.add_argument("--student-regexp", default=None, metavar="RE",
                   help="for --lms-export zips: a regexp with (?P<student_id>...) matched against "
                        "extracted/<export name>/<member path>")
    g.add_argument("--work", type=Path, default=None, metavar="DIR", help="scratch folder to use and keep (for debugging)")
    g.add_argument("--quiet", action="store_true", help="no progress on stderr")
    g.add_argument("--seed", action="append", default=[], metavar="N|STUDENT=N",
                   help="replay hidden inputs: N for every submission, STUDENT=N for one (repeatable); by default "
                        "each submission gets a seed drawn for it, recorded in grades.csv's seed column")
    limits = g.add_argument_group("limits for each submission")
    limits.add_argument("--cell-timeout", type=int, default=None, metavar="S",
                        help="seconds per cell (default: Execute.timeout from nbgrader_config.py, else 120)")
    for flag, name, unit, kind, metavar, what in _LIMITS:
        default = kind(getattr(Limits(), name) / unit)
        limits.add_argument(flag, dest=name, type=kind, default=default, metavar=metavar, help=f"{what} (default {default:g})")

    m = sub.add_parser("merge", help="merge the grades of sections graded apart (one course folder each)",
                       description="Merge the gradebooks and grades.csv of course folders graded apart (one per "
                                   "section, each a disjoint set of students) into one gradebook, grades.csv and "
                                   "report.md in OUT. One class on several machines: grade --scheduler instead.")
    m.add_argument("out", type=Path)
    m.add_argument("shards", type=Path, nargs="+", metavar="COURSE")
    m.add_argument("--course", type=Path, default=None, metavar="DIR",
                   help="also record the merged grades in this course's gradebook")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import warnings

    from .collect import InstructorError

    warnings.filterwarnings("ignore", module="nbgrader")  # SQLAlchemy chatter from nbgrader.api, not ours
    warnings.filterwarnings("ignore", message=".*not in session.*")
    try:
        if args.command == "grade":
            return _grade(args)
        from .merge import main as merge_main

        return merge_main(args)
    except InstructorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _grade(args) -> int:
    from . import seeds
    from .batch import Options, grade_all
    from .collect import InstructorError

    try:
        seed, student_seeds = seeds.parse_options(args.seed)
    except ValueError as exc:
        raise InstructorError(str(exc)) from None
    cwd = Path.cwd()
    course = (args.course or (cwd if (cwd / "nbgrader_config.py").is_file() else ROOT)).resolve()
    several = len(args.assignment) > 1
    options = [Options(
        assignment=a, submissions=args.submissions, course=course,
        out=(args.out / a if several else args.out) if args.out else course / "grades" / a, workers=args.workers,
        limits=limits_from(args, course), isolation=args.isolation, trusted=not args.no_trusted,
        feedback=not args.no_feedback, student_regexp=args.student_regexp,
        lms_exports=tuple(args.lms_export), work=args.work, progress=not args.quiet, seed=seed,
        student_seeds=student_seeds, scheduler=args.scheduler,
    ) for a in dict.fromkeys(args.assignment)]
    try:
        grade_all(options)
    except KeyboardInterrupt:  # the jobs not done were cancelled (on a cluster too); each recorded student is whole
        print("interrupted: the students graded so far are in the gradebook, each whole; the others were not "
              "graded (run the same command again to grade everyone)", file=sys.stderr)
        return 130
    return 0
