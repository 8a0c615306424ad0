"""Grade one submission: the autograde run in the kernel, the checker's re-check of what passed there, the decision.

docs/grading.md, "How a submission is graded", steps 2–4. The typed hand-offs: a
:class:`collect.Submission` in, a :class:`KernelOutcome` per test cell from the kernel, a
:class:`TrustedOutcome` per re-checked cell from the checker, a :class:`StudentResult` out.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import enum
import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import astuple, dataclass, replace
from pathlib import Path

import nbformat

from . import autograde, contract, sandbox
from .collect import InstructorError, Submission, grade_id_of
from .report import KernelOutcome, Row

# A submission's grading takes at most --wall plus this, kernel and hidden checks together (docs/grading.md, "Time"):
# the kernel may take all of --wall, and the hidden checks of what passed there still get this much.
TRUSTED_MARGIN = 60
CHECKER_GRACE = 10  # s past its budget before a checker that did not stop by itself is stopped
PREFLIGHT_STUDENT = "source"  # the preflight's job folder (kept short: it holds Unix sockets); never a row, never recorded
_CHECKER_PRELOAD = ("autograder.check", "autograder.checker")


def fingerprint() -> str:
    """A digest of the grading code (``autograder`` and ``course`` sources): the client's and every worker's must match."""
    h = hashlib.sha256()
    for pkg in ("autograder", "course"):
        root = Path(contract.package_dir(pkg))
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def isolation_for(wanted: str) -> str | None:
    """The sandbox isolation to grade with ("auto": the best this machine allows); None for "full" where it cannot."""
    best = sandbox.available_isolation()
    if wanted == "full" and best != "full":
        return None
    return best if wanted == "auto" else wanted


# ---------------------------------------------------------------------------
# The typed hand-offs


class Status(enum.Enum):
    """How the checker's re-check of one test cell ended (``status`` in checker.py's results file)."""

    OK = "ok"  # a verdict: ``passed``, else ``cls``
    TIMEOUT = "timeout"
    DIED = "died"  # the student's code ended the value worker
    NO_START = "no-start"  # the value worker never started (before any of the student's code ran)
    REFUSED = "refused"  # a reply over the wire format's limits, malformed, out of step, or unmeasured
    CHECKER_ERROR = "checker-error"
    NO_WORKER = "no-worker"  # the value worker was restarted too often
    NO_VERDICT = "no verdict"  # nothing, or nothing this grader knows, came back


@dataclass(frozen=True)
class TrustedOutcome:
    """What the checker found for one test cell, in the grader's own words only (``autograde.grader_words``)."""

    status: Status
    message: str = ""
    cls: str = ""  # a class of the vocabulary, or ""
    passed: bool = False

    @classmethod
    def parse(cls, raw: object) -> TrustedOutcome:
        """One entry of the checker's results file (unknown keys ignored); a missing or unreadable one is no verdict."""
        if not isinstance(raw, dict):
            return cls(Status.NO_VERDICT, "no verdict: the checker returned nothing for this test cell")
        words = autograde.grader_words(raw)
        status = next((s for s in Status if s.value == raw.get("status")), None)
        if status is None:
            return cls(Status.NO_VERDICT, f"{raw.get('status')}: {words['message']}")
        return cls(status, words["message"], words["cls"], raw.get("passed") is True)

    @property
    def graders_fault(self) -> bool:
        """No verdict for a reason of the grader's own: the checker failed, or the worker never started."""
        return self.status in (Status.CHECKER_ERROR, Status.NO_START, Status.NO_WORKER, Status.NO_VERDICT)


@dataclass(frozen=True)
class Exercise:
    """A hidden check call in a test cell: ``autograder.check.<check>(<arg>)``; ``position``: its cell's in a notebook."""

    test_id: str
    check: str
    arg: str
    position: int = -1


@dataclass
class StudentResult:
    student: str
    rows: list[Row]
    seconds: float = 0.0
    autograded: Path | None = None
    submission: Path | None = None
    timestamp: object = None
    note: str = ""
    seed: int | None = None  # the hidden inputs' seed it was graded with (None: it never ran)


# ---------------------------------------------------------------------------
# The assignment, and the checker's job


def exercises_of(assignment: str, source_nb: nbformat.NotebookNode) -> list[Exercise]:
    """The hidden check of each test cell of the source notebook, as the course's registry lists the assignment's
    exercises: ``test_<name>`` runs ``autograder.check.<name>(<name>)`` (docs/design.md, the grading contract)."""
    names = {e.name for e in contract.registry.EXERCISES if e.notebook == assignment}
    tests = [c.metadata["nbgrader"]["grade_id"] for c in source_nb.cells
             if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]
    return [Exercise(t, t.removeprefix("test_"), t.removeprefix("test_")) for t in tests if t.removeprefix("test_") in names]


def positioned(nb: nbformat.NotebookNode, exercises: list[Exercise]) -> list[Exercise]:
    """Each exercise with the position of its test cell in ``nb``, in that order; a missing test cell goes where
    nbgrader puts it back, after the cell that precedes it in the source (else at the end)."""
    where = {grade_id_of(c): i for i, c in enumerate(nb.cells) if grade_id_of(c)}

    def position(e: Exercise) -> int:
        stem = e.test_id.removeprefix("test_")
        return where.get(e.test_id, where[stem] + 1 if stem in where else len(nb.cells))

    return sorted((replace(e, position=position(e)) for e in exercises), key=lambda e: e.position)


def trusted_job(job_dir: Path, nb: nbformat.NotebookNode, exercises: list[Exercise], test_ids: set[str], *,
                isolation: str, zygote: str, limits: autograde.Limits, slot: int = 0, threads: int = 1,
                mpl_cache: Path | None = None, seed: int | None = None) -> dict:
    """What ``autograder.checker`` needs to re-check ``exercises`` of the notebook ``nb`` (inputs from ``seed``)."""
    private = "/tmp" if isolation == "full" else str(job_dir / "vw-private")
    course_pkg = contract.package_dir("course")
    root = job_dir / "vw-root"
    root.mkdir(parents=True, exist_ok=True)
    spec = autograde.spec_for(
        isolation=isolation, root=root, uid=autograde.SANDBOX_UID_BASE + slot, limits=limits,
        cwd=f"{private}/home", binds=[(course_pkg, course_pkg, False)],
        hide=[p for p in (contract.package_dir("autograder"), contract.package_dir("kernels")) if p],
        env=autograde.student_env(private, threads), mpl_cache=mpl_cache)
    return {
        "dir": str(job_dir), "isolation": isolation, "spec": spec, "zygote": zygote,
        # What the value worker runs: every code cell in order, test cells left out.
        "cells": [(i, c.source if isinstance(c.source, str) else "".join(c.source)) for i, c in enumerate(nb.cells)
                  if c.cell_type == "code" and grade_id_of(c) not in test_ids],
        "exercises": [astuple(e) for e in positioned(nb, exercises)],
        # The instructor's grade ids of the cells (collect put the source's metadata back): how a reason names one.
        "cell_ids": {str(i): grade_id_of(c) for i, c in enumerate(nb.cells) if grade_id_of(c)},
        "timeout": limits.cell_timeout, "startup_timeout": max(60, limits.cell_timeout),
        "results": str(job_dir / "trusted.json"), "seed": seed,
    }


def checker_results(path: Path, tests: list[str], code: int | None, last_log_line: str = "") -> dict[str, TrustedOutcome]:
    """What a checker found for each of ``tests``, from its results file (written as it goes); ``code``: its exit
    status, None when it was stopped from outside at the end of its time (docs/grading.md, "Time")."""
    try:
        found = json.loads(path.read_text())
        results, in_flight = dict(found["results"]), found.get("in_flight")
    except (OSError, ValueError, KeyError, TypeError):
        results, in_flight = {}, None
    out = {}
    for t in tests:
        if isinstance(results.get(t), dict):
            out[t] = TrustedOutcome.parse(results[t])
        elif code is None:
            out[t] = TrustedOutcome(Status.TIMEOUT, "the student's code was still running when the submission's time "
                                    "ran out" if t == in_flight else "not checked: the submission's time ran out "
                                    "before its hidden checks reached this part")
        else:
            why = last_log_line[:200] if last_log_line else f"exit status {code}"
            out[t] = TrustedOutcome(Status.CHECKER_ERROR, f"the trusted checker failed: {why}")
    return out


# ---------------------------------------------------------------------------
# The decision (docs/grading.md, "Scores: all or nothing")


def kernel_passed(cell: KernelOutcome) -> bool:
    """The cell's checks raised nothing in the kernel (whatever it showed): only such a cell can earn points."""
    return cell.passed and cell.max_score > 0


PARTIAL = ("partial score: the test cell raised no error, but its output is not a clean pass (a displayed "
           "number nbgrader reads as partial credit, or text on stderr); this part is not re-checked, so it "
           "scores all or nothing")


def decide(cell: KernelOutcome, trusted: TrustedOutcome | None, rechecked: bool) -> Row:
    """The row of one test cell: all its points or none, as its checks decided (``rechecked``: by the checker too);
    never a fraction read from an output."""
    def row(score: float, diagnosis: str = "", reason: str = "", sentence: str = "") -> Row:
        return Row(cell.student, cell.assignment, cell.grade_id, score, cell.max_score, diagnosis, reason, message=sentence)

    def zero(diagnosis: str, reason: str, sentence: str = "") -> Row:
        return row(0.0, diagnosis, " ".join(reason.split())[:400], " ".join(sentence.split())[:600])

    if not kernel_passed(cell):
        return row(0.0, cell.diagnosis, cell.reason)
    if not rechecked:
        return row(cell.max_score) if cell.score == cell.max_score else row(0.0, cell.diagnosis, cell.reason or PARTIAL)
    trusted = trusted or TrustedOutcome.parse(None)
    status, message, cls = trusted.status, trusted.message, trusted.cls
    if status is Status.OK and trusted.passed:
        return row(cell.max_score)
    if status is Status.OK:
        return zero(cls, "" if cls else f"hidden checks: failed without a diagnosis ({message})",
                    f"The hidden checks (other inputs than the visible ones) found {cls}: {message}" if cls else "")
    if status is Status.REFUSED:
        return zero("tampering", f"tampering: the hidden checks refused the reply of the student's code: {message}")
    if status is Status.TIMEOUT:
        return zero("", f"timeout: in the hidden checks ({message})")
    if status is Status.DIED:
        return zero("", f"kernel died: in the hidden checks ({message})")
    what = message if status is Status.NO_VERDICT else f"{status.value}: {message}"
    return zero("", f"grading failed: the hidden checks gave no verdict ({what})")


# ---------------------------------------------------------------------------
# The machinery: zygotes and slots


class Zygotes:
    """The two zygotes of a batch, started side by side, shared by every assignment graded in it: ``sandboxes`` forks
    kernels and value workers; ``checkers`` forks trusted checkers and holds the hidden checks, which the first must
    never have in its memory."""

    def __init__(self, work: Path, trusted: bool, threads: int):
        self.work, self.threads = work, threads
        self._lock = threading.Lock()
        self.env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_SEED"}
        # torch sizes its thread pool, and OpenMP reads its wait policy, when they are loaded: in
        # the zygote. N workers on N cores each get cores/N threads, which sleep when idle instead
        # of spinning (a spinning OpenMP thread starves the other workers' kernels).
        self.env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
        # Started here, in the batch's main thread (a zygote dies with the thread that started it);
        # they preload side by side while the caller prepares the assignments.
        self.sandboxes = self._start("zygote", wait=False)
        self.checkers = self._start("checker", _CHECKER_PRELOAD, wait=False) if trusted else None
        self._pool = concurrent.futures.ThreadPoolExecutor(1)
        self._cache = self._pool.submit(self._mpl_cache)
        self.mpl_cache: Path | None = None

    def wait_ready(self) -> None:
        """Block until both have preloaded (at the first call only)."""
        if self._cache is None:
            return
        for z in (self.sandboxes, self.checkers):
            if z is not None:
                z.wait_ready()
        self.mpl_cache, self._cache = self._cache.result(), None
        self._pool.shutdown()

    def _start(self, name: str, preload=(), wait: bool = True) -> sandbox.Zygote:
        return sandbox.Zygote(str(self.work / name), str(self.work / f"{name}.log"), env=self.env,
                              preload=list(preload), wait=wait)

    def _mpl_cache(self) -> Path | None:
        path = self.work / "mpl-cache"
        done = subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], capture_output=True,
                              env=dict(os.environ, MPLCONFIGDIR=str(path)), timeout=300)
        return path if done.returncode == 0 and path.is_dir() else None

    def ensure(self) -> None:
        """Start a zygote again if it died (its preload is lost, not the batch)."""
        with self._lock:
            if self.sandboxes.proc.poll() is not None:
                self.sandboxes.stop()
                self.sandboxes = self._start("zygote")
            if self.checkers is not None and self.checkers.proc.poll() is not None:
                self.checkers.stop()
                self.checkers = self._start("checker", _CHECKER_PRELOAD)

    def close(self) -> None:
        self.sandboxes.stop()
        if self.checkers is not None:
            self.checkers.stop()


class Slots:
    """The grading slots of one process (a batch, a Dask worker): ``n`` jobs at a time, each with its own
    sandbox uid, from a block this process holds alone under full isolation (autograde.SandboxSlots)."""

    def __init__(self, n: int, isolation: str):
        self.block = autograde.SandboxSlots() if isolation == "full" else None
        self.free: queue.Queue[int] = queue.Queue()
        for i in range(n):
            self.free.put(self.block.slot(i) if self.block else i)

    @contextlib.contextmanager
    def held(self):
        slot = self.free.get()
        try:
            yield slot
        finally:
            self.free.put(slot)

    def close(self) -> None:
        if self.block is not None:
            self.block.close()


# ---------------------------------------------------------------------------
# One assignment's grader


class Grader:
    """Everything shared by the jobs of one assignment."""

    def __init__(self, template: autograde.Template, limits: autograde.Limits, trusted: bool, work: Path, isolation: str,
                 zygotes: Zygotes):
        self.assignment, self.template, self.limits, self.trusted = template.assignment, template, limits, trusted
        self.work, self.isolation, self.zygotes = work, isolation, zygotes
        source = nbformat.read(template.source_notebook, as_version=4)
        self.exercises = exercises_of(self.assignment, source)
        self.tests = {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"].get("points", 0))
                      for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")}  # test id -> points
        checked = {e.test_id for e in self.exercises}
        # test id -> "" (re-checked) or why not: then the in-kernel result decides alone (see decide)
        self.supported: dict[str, str] = {t: "" if t in checked else "the course's registry lists no exercise of this test cell"
                                          for t in self.tests}

    def rechecked(self, test_id: str) -> bool:
        return self.trusted and not self.supported.get(test_id)

    def rows_for_problem(self, student: str, reason: str) -> list[Row]:
        return [Row(student, self.assignment, t, 0.0, pts, "", reason) for t, pts in self.tests.items()]

    def failed(self, student: str, why: str, seed: int | None = None) -> StudentResult:
        return StudentResult(student, self.rows_for_problem(student, f"grading failed: {why}"[:300]), seed=seed)

    def grade_safely(self, sub: Submission, slots: Slots) -> StudentResult:
        """:meth:`grade_one` in a free slot; what it raises becomes the student's rows: one submission never stops the batch."""
        try:
            with slots.held() as slot:
                res = self.grade_one(sub, slot)
        except Exception as exc:  # noqa: BLE001
            res = self.failed(sub.student, f"{type(exc).__name__}: {exc}", sub.seed)
        res.submission = sub.path
        return res

    def grade_one(self, sub: Submission, slot: int, preflight: bool = False) -> StudentResult:
        """Autograde one notebook in the sandbox, re-check what passed there, decide each test cell's points
        (``preflight``: this is the source solution, in the preflight's job folder)."""
        start = time.perf_counter()
        end = start + self.limits.wall + TRUSTED_MARGIN  # the whole submission: kernel, checker and any retry
        self.zygotes.ensure()
        job_dir = self.work / ("preflight" if preflight else "jobs") / self.assignment / sub.student
        if job_dir.exists():
            shutil.rmtree(job_dir, ignore_errors=True)
        ik = autograde.autograde(job_dir, self.template, sub.student, sub.notebook, limits=self.limits,
                              isolation=self.isolation, slot=slot, zygote=self.zygotes.sandboxes.socket,
                              threads=self.zygotes.threads, mpl_cache=self.zygotes.mpl_cache, seed=sub.seed)
        if ik.failed:
            return replace(self.failed(sub.student, _last_error(ik.log), sub.seed), seconds=time.perf_counter() - start,
                           note=ik.log[-2000:])
        kernel: dict[str, KernelOutcome] = ik.cells
        trusted = self.recheck(job_dir, sub, kernel, slot, end)
        rows = [decide(kernel.get(t) or KernelOutcome(sub.student, self.assignment, t, 0.0, points,
                                                      reason="not graded: the cell is missing"),
                       trusted.get(t), self.rechecked(t)) for t, points in self.tests.items()]
        return StudentResult(sub.student, rows, time.perf_counter() - start, ik.autograded, None, ik.timestamp,
                             seed=sub.seed)

    def recheck(self, job_dir: Path, sub: Submission, kernel: dict[str, KernelOutcome], slot: int,
                end: float) -> dict[str, TrustedOutcome]:
        """The checker's verdicts on the test cells that passed in the kernel: only those can earn points."""
        wanted = [e for e in self.exercises
                  if e.test_id in kernel and kernel_passed(kernel[e.test_id]) and self.rechecked(e.test_id)]
        if not wanted:
            return {}
        found = self.run_checker(job_dir, sub, wanted, slot, end - time.perf_counter())
        # No verdict is never a pass. Only what failed for the grader's own reasons gets one more try, in what is
        # left of the submission's time: retrying the submission's own doing would spend the class's time on it.
        again = [e for e in wanted if found[e.test_id].graders_fault]
        if again and end - time.perf_counter() > 1:
            found.update(self.run_checker(job_dir, sub, again, slot, end - time.perf_counter()))
        return found

    def run_checker(self, job_dir: Path, sub: Submission, exercises: list[Exercise], slot: int,
                    budget: float) -> dict[str, TrustedOutcome]:
        """The hidden checks of ``exercises``, within ``budget`` seconds (the rest of the submission's time)."""
        job = trusted_job(job_dir, sub.notebook, exercises, set(self.tests), isolation=self.isolation,
                          zygote=self.zygotes.sandboxes.socket, limits=self.limits, slot=slot,
                          threads=self.zygotes.threads, mpl_cache=self.zygotes.mpl_cache, seed=sub.seed)
        steps = len(job["cells"]) + 2 * len(exercises)  # every cell and every check may take a cell's time
        job["budget"] = min(job["startup_timeout"] + steps * self.limits.cell_timeout + 60, budget)
        path = job_dir / "trusted-job.json"
        path.write_text(json.dumps(job))
        log_path = job_dir / "trusted.log"
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_SEED"}
            # The checker keeps to its budget by itself; past it and a few seconds more, it is stopped from here.
            code = sandbox.run(self.zygotes.checkers.socket, {"isolation": "host", "env": env, "cwd": str(job_dir)},
                               "call", [null, log, log], job["budget"] + CHECKER_GRACE, module="autograder.checker",
                               args=[str(path)])
        finally:
            os.close(log)
            os.close(null)
            autograde.discard_student_files(job_dir, autograde.WORKER_WRITABLE)  # the value worker has ended
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] if log_path.exists() else []
        return checker_results(Path(job["results"]), [e.test_id for e in exercises], code, tail[0] if tail else "")

    # -- the preflight (docs/grading.md, "Preflight") ---------------------------

    def preflight(self, cache: Path, seed: int, slots: Slots) -> None:
        """Grade the source solution as a student's submission; raise InstructorError unless it gets full marks.
        Cached in ``cache`` under one key."""
        key = self._calibration_key()
        try:
            saved = json.loads(cache.read_text()) if cache.is_file() else {}
        except ValueError:
            saved = {}
        if isinstance(saved, dict) and saved.get("key") == key and saved.get("preflight") == "passed":
            if self.trusted:
                self.supported.update(saved.get("supported") or {})
            return
        source = Submission(PREFLIGHT_STUDENT, None, notebook=nbformat.read(self.template.source_notebook, as_version=4),
                            seed=seed)
        start = time.perf_counter()
        try:
            with slots.held() as slot:
                res = self.grade_one(source, slot, preflight=True)
        except Exception as exc:  # noqa: BLE001 — the grader cannot run at all: the instructor's to fix
            raise InstructorError(f"the preflight could not grade the source solution of {self.assignment}: "
                                  f"{type(exc).__name__}: {exc}"[:1500]) from exc
        short = [r for r in res.rows if r.score < r.max_score]
        if short:
            raise InstructorError(self._preflight_failure(res, short, seed))
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"key": key, "preflight": "passed", "trusted": self.trusted, "seed": seed,
                                     "seconds": round(time.perf_counter() - start, 1), "supported": self.supported}))

    def _preflight_failure(self, res: StudentResult, short: list[Row], seed: int) -> str:
        a = self.assignment
        lines = [f"the source solution of {a} does not get full marks when graded through the sandbox (seed {seed}), "
                 f"so no submission was graded: every student's grade would be wrong too."]
        for r in short:
            why = "; ".join(x for x in (r.diagnosis, r.reason) if x) or "failed without a diagnosis"
            lines.append(f"  {r.grade_id}: {r.score:g}/{r.max_score:g} ({why})"[:400])
        first = _first_error(res.autograded) if res.autograded else ""
        if first:
            lines.append(f"The first cell that raised in the kernel: {first}")
        elif res.note:
            lines.append("nbgrader: " + _last_error(res.note))
        hint = _import_hint(first or res.note)
        if hint:
            lines.append(hint)
        lines.append(f"The job's logs: --work DIR keeps them, in DIR/preflight/{a}/{PREFLIGHT_STUDENT}/.")
        return "\n".join(lines)

    def _calibration_key(self) -> str:
        """The source notebook, the config, the checking code, and where and how it runs."""
        h = hashlib.sha256(self.template.source_notebook.read_bytes())
        h.update(self.template.config_text.encode())
        h.update(fingerprint().encode())  # the grading code
        # Graded from another folder, with another environment, sandbox or limits, or with the hidden checks
        # elsewhere (--no-trusted puts them in the kernel), the preflight runs again.
        where = [sys.executable, sys.prefix, self.isolation, repr(self.limits), self.trusted]
        where += [contract.package_dir(pkg) for pkg in ("autograder", "course", "kernels")]
        h.update(json.dumps(where).encode())
        return h.hexdigest()


def _first_error(notebook: Path) -> str:
    """'cell N (first line): Ename: evalue' for the first code cell with an error output in an executed notebook."""
    try:
        nb = nbformat.read(notebook, as_version=4)
    except (OSError, ValueError):
        return ""
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error":
                first = next((ln.strip() for ln in cell.source.splitlines() if ln.strip()), "")
                evalue = str(out.get("evalue", "")).strip().splitlines()[:1]
                return f"cell {i} ({first[:80]}): {out.get('ename', '')}: {evalue[0][:300] if evalue else ''}"
    return ""


def _import_hint(text: str) -> str:
    """Why the kernel cannot import the course's own package, when that is what failed."""
    m = re.search(r"No module named '(course|autograder)[.']", text or "")
    if not m:
        return ""
    pkg = m.group(1)
    held = contract.package_dir(pkg)
    try:
        seen = subprocess.run([sys.executable, "-I", "-c", f"import {pkg}; print(); print({pkg}.__file__)"], cwd="/",
                              capture_output=True, text=True, timeout=120)  # `import course` prints a line of its own
        imports = os.path.dirname(seen.stdout.strip().splitlines()[-1]) if seen.returncode == 0 and seen.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        imports = ""
    return (f"The sandbox holds the `{pkg}` package this grader runs with ({held}); the environment "
            f"({sys.prefix}) imports `{pkg}` from {imports or 'nowhere'}" +
            (", which the sandbox does not hold. " if imports and imports != held else ". ") +
            "Run the grader from the folder this environment was installed from, or install this folder into "
            f"the environment (pip install -e {Path(held).parent if held else 'FOLDER'}).")


def _last_error(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln:
            return ln[:200]
    return lines[-1][:200] if lines else "nbgrader produced no grades"
