"""Autograde ONE submission with the real nbgrader, in a course folder of its own, its kernel sandboxed.

docs/grading.md, "How a submission is graded", step 2. The job's course folder holds the
instructor's config (plus this job's settings), a copy of the template's gradebook, an empty
``source/<assignment>/`` (no solution notebook anywhere in the job) and the one submission; the
instructor's gradebook is never opened here. What comes back, per test cell: nbgrader's score,
the cell's diagnosis (its record, ``course.vocabulary``), and a ``reason`` when the run, not a wrong answer,
cost the points.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import contract, sandbox
from .contract import package_dir
from .nbgrader_cli import BIN, copy_course, nbgrader, with_bin
from .report import KernelOutcome

# The ename of the error output autograder.nbexec writes where execution stopped, and in every later cell.
STOPPED = "GradingStopped"
NOT_RUN = "NotRun"

GiB, MiB = 1 << 30, 1 << 20
SANDBOX_UID_BASE = int(os.environ.get("AUTOGRADER_SANDBOX_UID", "61000"))  # uid = base + slot, owning no file
SLOTS_PER_BATCH = 64  # the most workers one batch may have: its block of uids
_UID_BLOCKS = 64  # batches that may run at once on one machine


class SandboxSlots:
    """The worker slots (so the sandbox uids) one batch holds alone while it runs, under an flock.

    RLIMIT_NPROC counts every process of a uid on the machine: two batches sharing uids would
    share it, and one student's fork bomb would starve the other batch's kernels.
    """

    def __init__(self, lock_dir: Path | None = None):
        lock_dir = lock_dir or Path(tempfile.gettempdir()) / "autograder-sandbox-slots"
        lock_dir.mkdir(mode=0o700, exist_ok=True)
        for block in range(_UID_BLOCKS):
            fd = os.open(lock_dir / f"block{block}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._fd, self.first = fd, block * SLOTS_PER_BATCH
            return
        raise RuntimeError(f"{_UID_BLOCKS} grading batches already run on this machine (locks in {lock_dir})")

    def slot(self, i: int) -> int:
        if not 0 <= i < SLOTS_PER_BATCH:
            raise ValueError(f"worker {i}: a batch has at most {SLOTS_PER_BATCH} workers")
        return self.first + i

    def close(self) -> None:
        os.close(self._fd)


@dataclass
class Limits:
    """What one submission may use. ``cell_timeout`` is nbgrader's Execute.timeout."""

    cell_timeout: int = 120  # s per cell
    wall: int = 900  # s for the whole autograde of one submission, then the sandbox is killed
    address_space: int = 4 * GiB  # per process (RLIMIT_AS)
    cpu_seconds: int = 900  # per process (RLIMIT_CPU)
    processes: int = 64  # per sandbox uid, threads included (RLIMIT_NPROC)
    file_size: int = 64 * MiB  # largest file a process may write (RLIMIT_FSIZE)
    open_files: int = 1024
    tmp_size: str = "1g"  # the sandbox's private /tmp (a tmpfs in memory)

    def rlimits(self) -> dict:
        return {k: getattr(self, k) for k in ("address_space", "cpu_seconds", "processes", "file_size", "open_files")}


@dataclass
class Template:
    """A generated copy of one assignment: its gradebook, release notebook and test cells."""

    assignment: str
    course: Path  # holds nbgrader_config.py, source/, release/, gradebook.db
    config_text: str
    # The gradebook's test cells hold the hidden tests, which the kernel then runs and must be able to
    # import (--no-trusted); else they hold the visible checks only, and autograder stays out of the kernel.
    hidden_in_kernel: bool = False

    @property
    def gradebook(self) -> Path:
        return self.course / "gradebook.db"

    @property
    def source_notebook(self) -> Path:
        return self.course / "source" / self.assignment / f"{self.assignment}.ipynb"


def make_template(course_root: Path, assignment: str, where: Path, cache: Path | None = None,
                  hidden_in_kernel: bool = False) -> Template:
    """Generate ``assignment`` from ``course_root``'s source in the scratch folder ``where``, with a fresh gradebook.

    Unless ``hidden_in_kernel``, the gradebook's test cells lose their hidden tests (nbgrader's
    ClearHiddenTests). With ``cache``, a template of the same source, config and choice is reused.
    """
    config = (course_root / "nbgrader_config.py").read_text()
    h = hashlib.sha256(config.encode() + (b"hidden in kernel" if hidden_in_kernel else b"visible only"))
    for p in sorted((course_root / "source" / assignment).rglob("*")):
        if p.is_file() and ".ipynb_checkpoints" not in p.parts:
            h.update(str(p.relative_to(course_root)).encode() + p.read_bytes())
    key = h.hexdigest()[:16]
    if cache is not None and (cache / key / "gradebook.db").is_file():
        if where.exists():
            shutil.rmtree(where)
        shutil.copytree(cache / key, where)
        return Template(assignment, where, config, hidden_in_kernel)
    notebook = copy_course(where, [assignment], course_root) / "source" / assignment / f"{assignment}.ipynb"
    original = notebook.read_bytes()
    if not hidden_in_kernel:
        from nbgrader.preprocessors import ClearHiddenTests

        nb, _ = ClearHiddenTests().preprocess(nbformat.reads(original.decode(), as_version=4), {})
        nbformat.write(nb, notebook)
    try:
        nbgrader(where, "generate_assignment", assignment, "--force")
    finally:
        notebook.write_bytes(original)
    if cache is not None:
        if cache.exists():
            shutil.rmtree(cache)
        shutil.copytree(where, cache / key)
    return Template(assignment, where, config, hidden_in_kernel)


@dataclass
class InKernel:
    """The result of one sandboxed autograde."""

    cells: dict[str, KernelOutcome] = field(default_factory=dict)  # grade_id -> the test cell as the in-kernel run graded it
    log: str = ""
    autograded: Path | None = None  # the executed notebook, when nbgrader wrote one
    timestamp: object = None
    failed: bool = False  # nbgrader gave no grades, and the wall time did not stop it


# ---------------------------------------------------------------------------
# Sandbox specs


def spec_for(*, isolation: str, root: Path, uid: int, limits: Limits, cwd: str,
             binds: list[tuple[str, str, bool]], hide: list[str], env: dict[str, str], mpl_cache: Path | None = None,
             **extra) -> dict:
    """A sandbox spec for ``sandbox.py``: what is bound where, the limits, the uid, the environment."""
    # The system, the Python installation and the virtual environment, read-only.
    system = ["/usr", "/etc", sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix]
    all_binds = [(p, p, False) for p in dict.fromkeys(map(os.path.realpath, system)) if os.path.isdir(p)] + binds
    if mpl_cache is not None:
        all_binds.append((str(mpl_cache), str(mpl_cache), False))
    return {
        "isolation": isolation, "root": str(root), "uid": uid, "binds": all_binds, "hide": hide,
        "limits": limits.rlimits(), "tmp_size": limits.tmp_size, "env": env, "cwd": cwd,
        "mpl_cache": str(mpl_cache) if mpl_cache else None, **extra,
    }


def student_env(private: str, threads: int) -> dict[str, str]:
    """The environment student code runs with: private dirs, no secrets, no seed (the kernel gets its own)."""
    return {
        "PATH": BIN + ":/usr/local/bin:/usr/bin:/bin",
        "HOME": f"{private}/home", "TMPDIR": f"{private}/tmp", "TRITON_CACHE_DIR": f"{private}/home/.triton",
        "MPLCONFIGDIR": f"{private}/home/.matplotlib", "IPYTHONDIR": f"{private}/home/.ipython",
        "MPLBACKEND": "Agg", "USER": "student", "LOGNAME": "student", "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
        contract.RECORDS_ENV: "1",  # a failing check shows its diagnosis as typed JSON too (course.vocabulary)
    }


_EXTRA_CONFIG = '''

# ---- added by autograder.autograde for one sandboxed job ----
c.CourseDirectory.root = "."
c.Execute.timeout = {cell_timeout}
c.Execute.shutdown_kernel = "immediate"
c.OverwriteCells.add_missing_cells = True  # a deleted test cell is put back and graded
c.Autograde.autograde_preprocessors = [
    "autograder.nbexec.SandboxExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "autograder.nbexec.SaveCheckedGrades",  # nbgrader's SaveAutoGrades without partial credit
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# The kernel lives in its own network namespace: it talks to nbgrader through Unix sockets
# in a folder bound into its sandbox.
c.KernelManager.transport = "ipc"
c.KernelManager.ip = {ipc!r}
'''


def prepare_course(job_course: Path, template: Template, student: str, notebook: nbformat.NotebookNode,
                   limits: Limits, ipc_prefix: str) -> Path:
    """The job's own course folder: config, a gradebook copy, no source notebook, the one submission."""
    if job_course.exists():
        shutil.rmtree(job_course)
    (job_course / "source" / template.assignment).mkdir(parents=True)
    (job_course / "nbgrader_config.py").write_text(
        template.config_text + _EXTRA_CONFIG.format(cell_timeout=limits.cell_timeout, ipc=ipc_prefix))
    shutil.copy(template.gradebook, job_course / "gradebook.db")
    os.chmod(job_course / "gradebook.db", 0o600)
    folder = job_course / "submitted" / student / template.assignment
    folder.mkdir(parents=True)
    nbformat.write(notebook, folder / f"{template.assignment}.ipynb")
    return job_course


def autograde(job_dir: Path, template: Template, student: str, notebook: nbformat.NotebookNode, *,
              limits: Limits, isolation: str, slot: int, zygote: str, threads: int = 1,
              mpl_cache: Path | None = None, seed: int | None = None) -> InKernel:
    """Run nbgrader autograde on one submission, its kernel in a sandbox; read back each test cell.

    ``seed``: the submission's AUTOGRADER_SEED, which the kernel gets only with ``--no-trusted``.
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    ipc = ipc_folder(job_dir)
    remove_tree(ipc)  # a folder left by an earlier run of this very job
    ipc.mkdir(mode=0o700)
    try:
        course = prepare_course(job_dir / "course", template, student, notebook, limits, str(ipc / "kernel"))
        root = job_dir / "kernel-root"
        root.mkdir(exist_ok=True)
        private = "/tmp" if isolation == "full" else str(job_dir / "private")
        notebook_dir = course / "autograded" / student / template.assignment
        pid_file = job_dir / "kernel.pids"
        spec = spec_for(
            isolation=isolation, root=root, uid=SANDBOX_UID_BASE + slot, limits=limits, cwd=str(notebook_dir),
            binds=[(package_dir("course"), package_dir("course"), False), (str(ipc), str(ipc), True)]
            # Only where the hidden tests run in the kernel (--no-trusted) may it import the grader's code.
            + ([(package_dir("autograder"), package_dir("autograder"), False)] if template.hidden_in_kernel else []),
            hide=[p for p in (package_dir("kernels"), None if template.hidden_in_kernel else package_dir("autograder")) if p],
            # The seed of the hidden inputs goes where the hidden checks run: the kernel only with --no-trusted.
            env=dict(student_env(private, threads),
                     **({"AUTOGRADER_SEED": str(seed)} if seed is not None and template.hidden_in_kernel else {})),
            mpl_cache=mpl_cache, student_dirs=[str(ipc)], pid_file=str(pid_file),
            overlays=[str(notebook_dir)],  # its own folder: readable, writable into a private layer
        )
        spec_path = job_dir / "kernel-spec.json"
        spec_path.write_text(json.dumps(spec))
        kernels = job_dir / "jupyter" / "kernels" / "python3"
        kernels.mkdir(parents=True, exist_ok=True)
        (kernels / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-I", "-S", os.path.abspath(sandbox.__file__), "launch", zygote, str(spec_path),
                     "{connection_file}"],
            "display_name": "Python 3 (sandboxed)", "language": "python", "interrupt_mode": "message",
        }))
        env = with_bin(dict(os.environ, JUPYTER_PATH=str(job_dir / "jupyter"), JUPYTER_RUNTIME_DIR=str(job_dir / "runtime"),
                            JUPYTER_CONFIG_DIR=str(job_dir / "jupyter-config"), JUPYTER_DATA_DIR=str(job_dir / "jupyter-data")))
        env.pop("AUTOGRADER_SEED", None)
        argv = [sys.executable, "-m", "autograder.nbgrader_cli", "autograde", template.assignment, "--force", f"--student={student}"]
        status, log = run_logged(argv, limits.wall, job_dir / "autograde.log", cwd=str(course), env=env,
                                 extra_pids=pid_file)
        result = read_outcomes(course, template.assignment, student)
        discard_student_files(job_dir, KERNEL_WRITABLE)  # the kernel is gone: nothing it wrote stays on disk
    finally:
        remove_tree(ipc)  # the kernel is gone, however the job ended: nothing it wrote stays on disk
    result.log = log
    if status == "timeout":
        for cell in result.cells.values():
            if cell.score < cell.max_score and not cell.reason:
                cell.reason = f"timeout: grading this submission ran past {limits.wall} s and was stopped"
    elif not result.cells or result.autograded is None:
        result.failed = True
    return result


def ipc_folder(job_dir: Path) -> Path:
    """The kernel's socket folder for a job, ``/tmp/agk-<16 hex>``: a socket path holds at most 107 bytes."""
    return Path(sandbox.short_folder(str(job_dir.resolve()), "agk"))


# What of a job folder the student's code can write: with limits-only isolation the private HOME/TMPDIR
# of the kernel and of the value worker; the sandbox roots are mount points. (The kernel's socket folder,
# bound into its sandbox writable, lives outside the job folder: see ipc_folder.) Each goes as soon as
# the process that could write it has ended.
KERNEL_WRITABLE = ("private", "kernel-root")
WORKER_WRITABLE = ("vw-private", "vw-root")


def remove_tree(path: Path) -> bool:
    """Remove ``path`` and all under it, whatever modes its owner set; a link is removed, never followed. Gone?"""
    def retry(func, name, _exc):
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            if not os.path.islink(name):
                os.chmod(name, 0o700)
            func(name)

    for _ in range(2):  # twice: a process that was dying may have written one more file
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, onerror=retry)
            elif os.path.lexists(path):
                os.unlink(path)
    return not os.path.lexists(path)


def discard_student_files(job_dir: Path, names: tuple[str, ...]) -> None:
    """Remove what the student's code could write in ``job_dir`` (see KERNEL_WRITABLE)."""
    for name in names:
        remove_tree(job_dir / name)


def run_logged(argv: list[str], wall: float, log_path: Path, extra_pids: Path | None = None,
               **popen) -> tuple[str, str]:
    """Run a command with a wall-time limit, output to a log; return ("ok" | "timeout" | "error", log tail).

    On timeout the command's process group is killed, and every pid listed in ``extra_pids``
    (kernel launchers, which lead sessions of their own; killing one ends its sandbox).
    """
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, **popen)
        try:
            rc = proc.wait(timeout=wall)
            status = "ok" if rc == 0 else "error"
        except subprocess.TimeoutExpired:
            sandbox.kill_group(proc)
            proc.wait()
            status = "timeout"
    if extra_pids is not None and extra_pids.exists():
        for line in extra_pids.read_text().split():
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.kill(int(line), signal.SIGKILL)
    with open(log_path, "rb") as f:
        f.seek(max(0, os.path.getsize(log_path) - 20000))
        return status, f.read().decode("utf-8", "replace")


# ---------------------------------------------------------------------------
# Reading back what nbgrader recorded


# The execution record autograder.nbexec.SandboxExecute writes in nbgrader's working folder (the job's
# course folder, out of the sandbox's reach): grade_id -> why the cell stopped, timed out or never ran.
EXECUTION_RECORD = "execution-record.json"

# Builtin exceptions: the only exception names a reason may quote. A student's class may borrow one
# of these names, but then it only picks which of the grader's sentences describes its own zero.
_BUILTIN_ERRORS = frozenset(name for name, v in vars(builtins).items()
                            if isinstance(v, type) and issubclass(v, BaseException))


def grade_cell_id(cell) -> str:
    """The grade_id of a test cell (nbgrader metadata with ``grade`` and a string ``grade_id``), else ""."""
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta["grade_id"] if isinstance(meta, dict) and meta.get("grade") and isinstance(meta.get("grade_id"), str) else ""


def _test_cells(nb_path: Path) -> tuple[dict[str, tuple[str, str, str]], set[str]]:
    """grade_id -> (ename, diagnosis class, message) of each test cell with an error output, and the ids with none.

    Outputs are the student's to shape: a class is read only from a diagnosis record (typed JSON,
    ``course.vocabulary.read_record``: a class of the vocabulary or nothing), and stops are read from the
    execution record instead. The first record of the cell wins; without one, the first error speaks.
    """
    found, clean = {}, set()
    for cell in nbformat.read(nb_path, as_version=4).cells:
        grade_id = grade_cell_id(cell)
        outputs = [o for o in cell.get("outputs", []) if isinstance(o, dict)]
        errors = [o for o in outputs if o.get("output_type") == "error"]
        if grade_id and not errors and cell.cell_type == "code":
            clean.add(grade_id)
        if not grade_id or not errors:
            continue
        ename = str(errors[0].get("ename", ""))
        records = (contract.read_record(o.get("data", {}).get(contract.DIAGNOSIS_MIME)) for o in outputs
                   if o.get("output_type") == "display_data" and isinstance(o.get("data"), dict))
        record = next((r for r in records if r), None)
        if record:
            found[grade_id] = (ename, record["cls"], " ".join(record["sentence"].split())[:500])
        else:
            found[grade_id] = (ename, "", f"{ename}: {str(errors[0].get('evalue', ''))}".strip(": ")[:500])
    return found, clean


def reason_for(ename: str, message: str, cls: str = "") -> str:
    """The ``reason`` of a test cell's zero, in the grader's own words: the kernel's error only picks the sentence.

    ``cls``: the cell's diagnosis class, if any.
    """
    if ename == "MemoryError" or "MemoryError" in message:
        return "memory limit: an allocation was refused (address-space limit)"
    if ename == "SystemExit":
        return "error: the code called sys.exit()"
    if ename == "BlockingIOError" or "BlockingIOError" in message or "Resource temporarily unavailable" in message:
        return "process limit: a new process or thread was refused (too many processes)"
    if ename and not cls:
        what = ename if ename in _BUILTIN_ERRORS else "an exception of the submission's own"
        return f"error: the test cell raised {what}, without a diagnosis"
    return ""


def grader_words(trusted: dict) -> dict:
    """A trusted check's verdict with only the grader's words in it (no quoted exception), one line of ≤ 300 characters.

    A failure's class and sentence come from its diagnosis record (typed JSON, ``contract.read_record``).
    """
    out = dict(trusted)
    record = contract.read_record(out.get("record"))
    cls = record["cls"] if record else out.get("cls") if out.get("cls") in contract.CLASSES else ""
    message = " ".join((record["sentence"] if record else str(out.get("message", ""))).split())
    if out.get("status") == "ok" and cls == "error":
        message = "the student's code raised an exception"
    out.update(cls=cls, message=message[:300])
    return out


def read_outcomes(course: Path, assignment: str, student: str) -> InKernel:
    """Each test cell as nbgrader graded it in ``course``: its score from the gradebook, its message from the executed notebook.

    ``passed``: the cell's outputs hold no error. Points are decided from this and the trusted
    re-check (``autograder.grader.decide``); ``score`` counts only where the kernel decides alone.
    """
    from nbgrader.api import MissingEntry

    from . import gradebook

    autograded = course / "autograded" / student / assignment / f"{assignment}.ipynb"
    errors, clean = _test_cells(autograded) if autograded.exists() else ({}, set())
    try:  # grade_id -> reason, as the grader saw the cell stop, time out or never run (autograder.nbexec)
        stops = json.loads((course / EXECUTION_RECORD).read_text())["reasons"]
        stops = {k: v for k, v in stops.items() if isinstance(k, str) and isinstance(v, str)}
    except (OSError, ValueError, LookupError, TypeError, AttributeError):
        stops = {}
    cells: dict[str, KernelOutcome] = {}
    timestamp = None
    with gradebook.opened(course) as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            submission = None
        if submission is not None:
            timestamp = submission.timestamp
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    ename, cls, message = errors.get(grade.cell.name, ("", "", ""))
                    stopped = stops.get(grade.cell.name, "")  # the grader saw it stop: that, not the outputs, says why
                    cls = "" if stopped else cls
                    score = float(grade.auto_score) if grade.auto_score is not None and autograded.exists() else 0.0
                    reason = (stopped or reason_for(ename, message, cls)) if score < grade.max_score else ""
                    cells[grade.cell.name] = KernelOutcome(
                        student, assignment, grade.cell.name, score, float(grade.max_score), cls, reason,
                        message=message, passed=grade.auto_score is not None and grade.cell.name in clean)
        if not cells:  # nbgrader recorded nothing: list the test cells from the assignment itself
            for notebook in gb.find_assignment(assignment).notebooks:
                for gc in notebook.grade_cells:
                    cells[gc.name] = KernelOutcome(student, assignment, gc.name, 0.0, float(gc.max_score))
    return InKernel(cells, autograded=autograded if autograded.exists() else None, timestamp=timestamp)
