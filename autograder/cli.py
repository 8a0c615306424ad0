"""The instructor's command line.

    python -m autograder grade ASSIGNMENT [ASSIGNMENT ...] --submissions DIR [--workers N] [--out DIR] [--seed N|STUDENT=N]
    python -m autograder merge OUT_DIR SHARD_DIR [SHARD_DIR ...]

``grade`` exits 0 when every submission got its rows (zeros included); 2 for the
instructor's own mistakes (unknown assignment, no such folder, nothing in it, a source
solution that does not get full marks through the grader: the preflight), with a message
saying what to do. ``docs/grading.md`` is the guide.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .nbrunner import ROOT, fast_imports

fast_imports()  # before anything imports nbformat (see autograder/nbrunner.py)

from .worker import GiB, Limits  # noqa: E402


def _course_default() -> Path:
    cwd = Path.cwd()
    return cwd if (cwd / "nbgrader_config.py").is_file() else ROOT


def _add_limits(p: argparse.ArgumentParser) -> None:
    d = Limits()
    g = p.add_argument_group("limits for each submission")
    g.add_argument("--cell-timeout", type=int, default=None, metavar="S",
                   help="seconds per cell (default: Execute.timeout from nbgrader_config.py, else 120)")
    g.add_argument("--wall", type=int, default=d.wall, metavar="S", help=f"seconds for the whole notebook (default {d.wall})")
    g.add_argument("--memory", type=float, default=d.address_space / GiB, metavar="GIB",
                   help=f"address space per process, GiB (default {d.address_space / GiB:g})")
    g.add_argument("--cpu", type=int, default=d.cpu_seconds, metavar="S", help=f"CPU seconds per process (default {d.cpu_seconds})")
    g.add_argument("--processes", type=int, default=d.processes, metavar="N",
                   help=f"processes and threads per sandbox (default {d.processes})")
    g.add_argument("--file-size", type=int, default=d.file_size >> 20, metavar="MIB",
                   help=f"largest file a submission may write, MiB (default {d.file_size >> 20})")


def _config_timeout(course: Path) -> int | None:
    import re

    text = (course / "nbgrader_config.py").read_text() if (course / "nbgrader_config.py").is_file() else ""
    m = re.search(r"^c\.Execute\.timeout\s*=\s*(\d+)", text, re.M)
    return int(m.group(1)) if m else None


def limits_from(args, course: Path) -> Limits:
    return Limits(cell_timeout=args.cell_timeout or _config_timeout(course) or 120, wall=args.wall,
                  address_space=int(args.memory * GiB), cpu_seconds=args.cpu, processes=args.processes,
                  file_size=args.file_size << 20)


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
    _add_limits(g)

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

    warnings.filterwarnings("ignore", module="nbgrader")  # SQLAlchemy chatter from nbgrader.api, not ours
    warnings.filterwarnings("ignore", message=".*not in session.*")
    if args.command == "grade":
        return _grade(args)
    from .merge import main as merge_main

    return merge_main(args)


def _grade(args) -> int:
    from . import seeds
    from .batch import InstructorError, Options, grade_all

    try:
        seed, student_seeds = seeds.parse_options(args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    course = (args.course or _course_default()).resolve()
    several = len(args.assignment) > 1
    options = [Options(
        assignment=a, submissions=args.submissions, course=course,
        out=(args.out / a if several else args.out) if args.out else course / "grades" / a, workers=args.workers,
        limits=limits_from(args, course), isolation=args.isolation, trusted=not args.no_trusted,
        feedback=not args.no_feedback, student_regexp=args.student_regexp,
        lms_exports=tuple(args.lms_export), work=args.work,
        keep_work=args.work is not None, progress=not args.quiet, seed=seed, student_seeds=student_seeds,
        scheduler=args.scheduler,
    ) for a in dict.fromkeys(args.assignment)]
    try:
        grade_all(options)
    except InstructorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the jobs not done were cancelled (on a cluster too); each recorded student is whole
        print("interrupted: the students graded so far are in the gradebook, each whole; the others were not "
              "graded (run the same command again to grade everyone)", file=sys.stderr)
        return 130
    return 0
