"""Grade a class: every submission of one assignment, N at a time, into the instructor's gradebook.

:func:`grade_all` is docs/design.md, "A class, graded" (long form: docs/grading.md, "How a
submission is graded"), in named stages: collect, seeds, prepare, grade each (autograder.grader:
the kernel, the checker, the decision), record, report and feedback. One broken or hostile
submission never stops the batch: it ends as rows with a ``reason``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat

from . import autograde, cluster, collect, gradebook, seeds
from .collect import InstructorError, Submission
from .feedback import prepare_for_feedback, sanitize_folder
from .grader import Grader, Slots, StudentResult, Zygotes, isolation_for
from .nbgrader_cli import assignments, nbgrader
from .report import Row, write_outputs


@dataclass
class Options:
    assignment: str
    submissions: Path
    course: Path
    out: Path
    workers: int = 1
    limits: autograde.Limits = field(default_factory=autograde.Limits)
    isolation: str = "auto"  # "full", "none", or "auto" (the best this machine allows)
    trusted: bool = True
    feedback: bool = True
    student_regexp: str | None = None
    lms_exports: tuple[str, ...] = ()  # zips in ``submissions`` an LMS exported for the class (--lms-export)
    work: Path | None = None  # scratch folder, kept (default: a temporary one, removed at the end)
    progress: bool = True
    seed: int | None = None  # the hidden inputs' seed for every submission (--seed N); None: one drawn per submission
    student_seeds: dict[str, int] = field(default_factory=dict)  # one student's seed (--seed STUDENT=N), before ``seed``
    # A Dask scheduler's address (--scheduler), or a distributed.Client already made (the Python API, for a Dask
    # Gateway cluster): the jobs run on its cluster (autograder.cluster).
    scheduler: object = None


@dataclass
class Part:
    """One assignment's part of a batch."""

    opts: Options
    subs: list[Submission] = field(default_factory=list)
    grader: Grader | None = None
    results: dict[str, StudentResult] = field(default_factory=dict)
    setup_seconds: float = 0.0


def grade_all(options: list[Options]) -> list[dict]:
    """Grade every submission of each assignment in one batch (sharing the zygotes and one pool of ``workers`` jobs);
    return a summary per assignment. Raises InstructorError for the instructor's mistakes."""
    first, started = options[0], time.perf_counter()
    course, isolation = validate(options)
    progress = Progress(first.progress)
    parts = [Part(opts) for opts in options]
    with contextlib.ExitStack() as cleanup:
        work = first.work or Path(tempfile.mkdtemp(prefix=f"autograde-{'-'.join(o.assignment[:2] for o in options)}-"))
        work.mkdir(parents=True, exist_ok=True)
        if first.work is None:  # job folders, extracted archives: no byte of a submission stays
            cleanup.callback(autograde.remove_tree, work)
        slots = Slots(first.workers, isolation)  # with limits only, code runs as the grader
        cleanup.callback(slots.close)
        for part in parts:  # the instructor's mistakes first, before anything slow
            collect_submissions(part, course, work)
        batch_seed = assign_seeds(first, parts)
        client = cluster.connect(first.scheduler) if first.scheduler else None
        if client is not None and client is not first.scheduler:  # a client the caller made stays open for the caller
            cleanup.callback(client.close)
        if client is not None:
            progress.say(f"cluster: {cluster.check_workers(client)} Dask worker(s) at {client.scheduler.address}, "
                         "each running this grader")
        where = "on a Dask cluster" if client is not None else f"{first.workers} worker(s)"
        progress.say(f"{sum(len(p.subs) for p in parts)} submissions of {', '.join(o.assignment for o in options)} "
                     f"(sandbox: {isolation}, {where}); preparing")
        zygotes = Zygotes(work, first.trusted, max(1, (os.cpu_count() or 1) // first.workers))
        cleanup.callback(zygotes.close)
        for part in parts:
            prepare(part, course, work, isolation, zygotes, slots, batch_seed, progress)
        setup_done = time.perf_counter()
        progress.total = sum(len(p.subs) for p in parts)
        with gradebook.opened(course) as gb:
            def done(part: Part, res: StudentResult) -> None:
                part.results[res.student] = res
                record(gb, course, part.opts.assignment, res)
                progress.update(res)

            for part in parts:  # what cannot be graded gets its rows first
                for sub in part.subs:
                    if sub.notebook is None:
                        done(part, StudentResult(sub.student, part.grader.rows_for_problem(sub.student, sub.problem),
                                                 submission=sub.path))
            grade_each(parts, slots, client, first, work, done)
            jobs_seconds = time.perf_counter() - setup_done
            rows_of = {p.opts.assignment: held_rows(gb, p) for p in parts}  # a manual grade counts
        notes = feedback(course, [p for p in parts if p.opts.feedback])
        seconds = time.perf_counter() - started
        common = {"seconds": seconds, "workers": first.workers, "isolation": isolation,
                  "scheduler": client.scheduler.address if client is not None else None}
        summaries = [report(part, rows_of[part.opts.assignment], notes, common, jobs_seconds, progress)
                     for part in parts]
        progress.say(f"graded in {seconds:.0f} s")
        return summaries


# ---------------------------------------------------------------------------
# The stages


def validate(options: list[Options]) -> tuple[Path, str]:
    """The course folder and the isolation to grade with; InstructorError when the options cannot work."""
    first = options[0]
    course = first.course.resolve()
    if not (course / "nbgrader_config.py").is_file():
        raise InstructorError(f"{course} is not an nbgrader course (no nbgrader_config.py): run from the course "
                              "directory or pass --course DIR.")
    available = assignments(course)
    for opts in options:
        if opts.assignment not in available:
            raise InstructorError(f"unknown assignment {opts.assignment!r}: the course at {course} has "
                                  f"{', '.join(available) or 'no assignments in source/'}.")
        if not 1 <= opts.workers <= autograde.SLOTS_PER_BATCH:
            raise InstructorError(f"--workers must be between 1 and {autograde.SLOTS_PER_BATCH}.")
    isolation = isolation_for(first.isolation)
    if isolation is None:
        raise InstructorError("--isolation full needs root and Linux namespaces (unshare); this machine has neither. "
                              "Use --isolation none (limits only; see docs/grading.md).")
    return course, isolation


def collect_submissions(part: Part, course: Path, work: Path) -> None:
    """The assignment's submissions, each with its checked notebook or the problem that keeps it from being graded."""
    opts, known = part.opts, collect.assignment_ids(course)
    part.subs = collect.collect(opts.assignment, opts.submissions.resolve(), work / "zip-staging" / opts.assignment,
                                course, opts.student_regexp, opts.lms_exports)
    for sub in part.subs:
        sub.assignment = opts.assignment
        if not sub.problem:
            sub.notebook, sub.problem = collect.check_notebook(sub.path, opts.assignment, known)


def assign_seeds(opts: Options, parts: list[Part]) -> int | None:
    """Each gradable submission's seed; the batch's (``--seed N``, else AUTOGRADER_SEED, else None: one drawn per
    submission) is returned (docs/grading.md, "Seeds")."""
    batch_seed = opts.seed
    if batch_seed is None and os.environ.get(seeds.SEED_ENV, "").strip():
        try:
            batch_seed = seeds.parse(os.environ[seeds.SEED_ENV])
        except ValueError as exc:
            raise InstructorError(f"{seeds.SEED_ENV} in the environment: {exc}.") from None
    students = {sub.student for part in parts for sub in part.subs}
    unknown = sorted(set(opts.student_seeds) - students)
    if unknown:
        raise InstructorError(f"--seed names {', '.join(map(repr, unknown))}, who has no submission here "
                              f"(students: {', '.join(sorted(students)[:20])}{', ...' if len(students) > 20 else ''}).")
    for sub in (s for part in parts for s in part.subs if s.notebook is not None):
        sub.seed = opts.student_seeds.get(sub.student, seeds.draw() if batch_seed is None else batch_seed)
    return batch_seed


def prepare(part: Part, course: Path, work: Path, isolation: str, zygotes: Zygotes, slots: Slots,
            batch_seed: int | None, progress: Progress) -> None:
    """The assignment as nbgrader generates it (cached in OUT/.template), its cells in the course's gradebook, and
    its grader, once the preflight has graded the source solution to full marks."""
    opts, t0 = part.opts, time.perf_counter()
    opts.out.mkdir(parents=True, exist_ok=True)
    try:
        template = autograde.make_template(course, opts.assignment, work / "template" / opts.assignment,
                                        cache=opts.out / ".template", hidden_in_kernel=not opts.trusted)
    except RuntimeError as exc:
        raise InstructorError(f"nbgrader could not generate {opts.assignment} from source/: fix the source "
                              f"notebook first.\n{str(exc)[-1500:]}") from None
    gradebook.install_assignment(course, template.gradebook, opts.assignment)
    zygotes.wait_ready()  # they preloaded while the first template was made
    part.grader = Grader(template, opts.limits, opts.trusted, work, isolation, zygotes)
    progress.say(f"{opts.assignment}: preflight: grading the source solution through the sandbox"
                 + (" (its hidden checks in the trusted checker)" if opts.trusted else ""))
    part.grader.preflight(opts.out / ".calibration.json", seeds.draw() if batch_seed is None else batch_seed, slots)
    if opts.trusted:
        for test_id, why in sorted(part.grader.supported.items()):
            if why:
                progress.say(f"note: {test_id} is not re-checked outside the kernel: {why}")
    part.setup_seconds = time.perf_counter() - t0


def grade_each(parts: list[Part], slots: Slots, client, opts: Options, work: Path, done) -> None:
    """Every submission with a notebook: on the cluster's workers, else ``opts.workers`` at a time here;
    ``done(part, result)`` in this thread as each ends (it alone writes the gradebook)."""
    part_of = {p.opts.assignment: p for p in parts}
    # Longest assignments first: the Triton notebooks take the longest per submission.
    subs = [sub for part in reversed(parts) for sub in part.subs if sub.notebook is not None]
    if client is not None:
        cluster.grade_remote(client, subs, {a: p.grader for a, p in part_of.items()}, opts.isolation, work,
                             lambda sub, res: done(part_of[sub.assignment], res))
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=opts.workers) as pool:
        futures = {pool.submit(part_of[sub.assignment].grader.grade_safely, sub, slots): sub for sub in subs}
        for fut in concurrent.futures.as_completed(futures):
            done(part_of[futures[fut].assignment], fut.result())


def record(gb, course: Path, assignment: str, res: StudentResult) -> None:
    """Write one student into the gradebook and file their notebooks where nbgrader keeps them."""
    gradebook.record(gb, assignment, res.student, {r.grade_id: r.score for r in res.rows}, res.timestamp, res.seed)
    submitted = course / "submitted" / res.student / assignment
    if res.submission is not None and res.submission.is_file():
        dest = submitted / f"{assignment}.ipynb"
        if res.submission.resolve() != dest.resolve():
            submitted.mkdir(parents=True, exist_ok=True)
            shutil.copy(res.submission, dest)
    autograded = course / "autograded" / res.student / assignment
    if autograded.exists():
        shutil.rmtree(autograded)
    if res.autograded is not None and res.autograded.is_file():
        autograded.mkdir(parents=True, exist_ok=True)
        shutil.copy(res.autograded, autograded / f"{assignment}.ipynb")
        explain_in_notebook(autograded / f"{assignment}.ipynb", res.rows)


def explain_in_notebook(path: Path, rows: list[Row]) -> None:
    """Write each zero's reason under its test cell in the autograded notebook, where the feedback shows it
    (docs/grading.md, "Output"); a reason the output already states is not repeated."""
    reasons = {r.grade_id: r.reason or r.message for r in rows if (r.reason or r.message) and r.score < r.max_score}
    if not reasons:
        return
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        reason = reasons.get(collect.grade_id_of(cell))
        if cell.cell_type != "code" or not reason or reason[:60] in json.dumps(cell.get("outputs", []), ensure_ascii=False):
            continue
        cell.outputs.append(nbformat.v4.new_output("stream", name="stderr", text=f"Grader: this part scored 0. {reason}\n"))
        changed = True
    if changed:
        nbformat.write(nb, path)


def held_rows(gb, part: Part) -> list[Row]:
    """The part's rows as the gradebook holds them now: a manual grade counts, and says so."""
    rows = []
    for student in sorted(part.results):
        res = part.results[student]
        held = gradebook.effective_scores(gb, part.opts.assignment, student)
        for r in res.rows:
            score, max_score, manual = held.get(r.grade_id, (r.score, r.max_score, False))
            rows.append(replace(r, score=score, max_score=max_score, seed=res.seed,
                                reason=r.reason + (" (manual grade kept)" if manual and score != r.score else "")))
    return rows


def feedback(course: Path, parts: list[Part]) -> dict[str, str]:
    """nbgrader's feedback for each assignment's autograded students, in one nbgrader process (each start costs
    seconds); made safe to open (autograder.feedback) in the course, then copied to OUT/feedback/<student>/."""
    wanted = {p.opts.assignment: [s for s, r in p.results.items() if r.autograded] for p in parts}
    notes = {a: "no feedback: nothing was autograded" for a, students in wanted.items() if not students}
    wanted = {a: students for a, students in wanted.items() if students}
    if not wanted:
        return notes
    for a, students in wanted.items():  # regenerated below: nbgrader skips what is newer than its notebook
        for student in students:
            shutil.rmtree(course / "feedback" / student / a, ignore_errors=True)
            for notebook in sorted((course / "autograded" / student / a).glob("*.ipynb")):
                prepare_for_feedback(notebook)  # hidden tests (--no-trusted ran them in the kernel) off the page, student content marked
    try:
        nbgrader(course, "generate_feedback", f"--assignment={next(iter(wanted)) if len(wanted) == 1 else '*'}",
                 timeout=3600)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return notes | {a: f"feedback generation failed: {str(exc)[-300:]}" for a in wanted}
    for part in (p for p in parts if p.opts.assignment in wanted):
        a, dest = part.opts.assignment, part.opts.out / "feedback"
        for student in wanted[a]:
            src = course / "feedback" / student / a
            if src.is_dir():
                sanitize_folder(src)  # the course's copy too: nbgrader's release_feedback hands it to the student
                shutil.rmtree(dest / student, ignore_errors=True)
                shutil.copytree(src, dest / student)
        notes[a] = f"feedback for {len(wanted[a])} students in {dest}"
    return notes


def report(part: Part, rows: list[Row], notes: dict[str, str], common: dict, jobs_seconds: float,
           progress: Progress) -> dict:
    """grades.csv, students.csv, report.md and diagnoses.png in the part's OUT; its summary."""
    a, out = part.opts.assignment, part.opts.out
    summary = {"assignment": a, "students": len(part.results), **common,
               "supported": part.grader.supported if part.opts.trusted else None, "feedback": notes.get(a, ""),
               "phases": {"setup": part.setup_seconds, "jobs": jobs_seconds}}
    write_outputs(out, rows, summary)
    progress.say(f"{a}: {len(part.results)} submissions: {out / 'grades.csv'}, {out / 'report.md'}, "
                 f"{out / 'diagnoses.png'}")
    return summary


# ---------------------------------------------------------------------------
# Progress


class Progress:
    """A progress line on stderr: a bar on a terminal, one line per submission otherwise."""

    def __init__(self, enabled: bool):
        self.total, self.done, self.enabled = 0, 0, enabled
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()

    def update(self, result: StudentResult) -> None:
        self.done += 1
        if not self.enabled:
            return
        got = sum(r.score for r in result.rows)
        out_of = sum(r.max_score for r in result.rows)
        elapsed = time.perf_counter() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        filled = int(30 * self.done / max(self.total, 1))
        line = (f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}  {result.student}: {got:g}/{out_of:g} "
                f"({result.seconds:.0f} s)  elapsed {elapsed:.0f} s, about {eta:.0f} s left")
        end = "\n" if not self.tty or self.done == self.total else ""
        sys.stderr.write(("\r\x1b[2K" if self.tty else "") + line + end)
        sys.stderr.flush()

    def say(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
