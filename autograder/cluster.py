"""Grade a class on a Dask cluster: each submission's job is a task, everything single stays here.

docs/grading.md, "Beyond one machine". Every worker runs the same grader (:func:`fingerprint`)
and keeps its own sandbox machinery (:class:`_WorkerState`).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import threading
from pathlib import Path

import nbformat

from . import autograde
from .collect import InstructorError, Submission
from .grader import Grader, Slots, StudentResult, Zygotes, fingerprint, isolation_for

RETRIES = 1  # a task that raised runs once more, elsewhere if it can: a worker's trouble is not the student's


def connect(address):
    """A Dask client on the scheduler at ``address``, or ``address`` itself when it is a client already made (a Dask
    Gateway cluster's, whose credentials an address does not carry); InstructorError when there is none."""
    if not isinstance(address, str):
        return address
    try:
        from distributed import Client
    except ImportError:
        raise InstructorError("--scheduler needs Dask's distributed package: pip install '.[cluster]' "
                              "(make install includes it).") from None
    try:
        return Client(address, timeout="30s")
    except (OSError, TimeoutError) as exc:
        raise InstructorError(f"--scheduler {address}: no Dask scheduler answers there ({type(exc).__name__}: "
                              f"{exc}). Start one (docs/grading.md, 'Beyond one machine').") from None


def check_workers(client) -> int:
    """The number of worker processes, after checking that each runs this very grader; InstructorError otherwise."""
    mine = fingerprint()
    theirs = client.run(fingerprint)
    if not theirs:
        raise InstructorError("the Dask cluster has no workers: start at least one (`dask worker ADDRESS`).")
    odd = sorted(w for w, f in theirs.items() if f != mine)
    if odd:
        raise InstructorError(
            f"{len(odd)} of {len(theirs)} Dask workers run another version of the grader than this one "
            f"(autograder and course differ: {', '.join(odd[:5])}{', ...' if len(odd) > 5 else ''}). Install this "
            "checkout on every worker (pip install -e '.[cluster]'), restart them, and grade again.")
    return len(theirs)


def grade_remote(client, subs: list[Submission], graders: dict[str, Grader], isolation: str, work: Path,
                 on_result) -> None:
    """Grade every submission of ``subs`` as a task; ``on_result(sub, result)`` in this thread as each ends (it alone
    writes the gradebook). ``isolation``: as asked (each worker resolves "auto")."""
    from distributed import as_completed

    digest, shipped = {}, {}
    for a in dict.fromkeys(sub.assignment for sub in subs):  # the template course folder, a gzipped tar of a few hundred KB
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(graders[a].template.course, arcname="template")
        digest[a] = hashlib.sha256(buffer.getvalue()).hexdigest()[:16]
        # A task that returns the archive, not scattered data: the scheduler can compute it again on another worker
        # when the one holding it is lost (scattered data it could not).
        shipped[a] = client.submit(_template, buffer.getvalue(), key=f"template-{a}-{digest[a]}")
    futures = {}
    for sub in subs:
        a, grader = sub.assignment, graders[sub.assignment]
        task = {"assignment": a, "template": digest[a], "student": sub.student, "notebook": nbformat.writes(sub.notebook),
                "seed": sub.seed, "options": {"isolation": isolation, "limits": grader.limits, "trusted": grader.trusted}}
        # pure=False: a student graded twice (another seed) is two tasks, never one result reused
        fut = client.submit(grade_task, task, shipped[a], retries=RETRIES, pure=False,
                            key=f"grade-{a}-{sub.student}-{sub.seed}")
        futures[fut] = sub
    try:
        for fut in as_completed(list(futures)):
            sub = futures.pop(fut)
            try:
                res, text = fut.result()
                if text is not None:
                    folder = work / "cluster" / sub.assignment
                    folder.mkdir(parents=True, exist_ok=True)
                    res.autograded = folder / f"{sub.student}.ipynb"
                    res.autograded.write_text(text, encoding="utf-8")
            except Exception as exc:  # noqa: BLE001 — lost twice, or raised twice: that student's rows say so
                res = graders[sub.assignment].failed(sub.student, f"the cluster could not grade it "
                                                                  f"({type(exc).__name__}: {exc})", sub.seed)
            res.submission = sub.path
            on_result(sub, res)
    except BaseException:  # Ctrl-C (or anything else): nothing more runs for this batch on the cluster
        client.cancel(list(futures))
        raise


def _template(data: bytes) -> bytes:
    return data


# ---------------------------------------------------------------------------
# On a worker


def grade_task(task: dict, template: bytes) -> tuple[StudentResult, str | None]:
    """One submission, graded on this worker as the local pool grades it; the result, and the autograded notebook's text."""
    state = _WorkerState.get(task["options"])
    grader = state.grader(task["assignment"], task["template"], template, task["options"])
    sub = Submission(task["student"], None, assignment=task["assignment"],
                     notebook=nbformat.reads(task["notebook"], as_version=4), seed=task["seed"])
    res = grader.grade_safely(sub, state.slots)
    text = res.autograded.read_text(encoding="utf-8") if res.autograded and res.autograded.is_file() else None
    res.autograded = None
    shutil.rmtree(state.work / "jobs" / task["assignment"] / task["student"], ignore_errors=True)  # no byte of it stays
    return res, text


SCRATCH = "autograde-worker-"


def scratch_folder() -> Path:
    """A new scratch folder for this worker process (``autograde-worker-<pid>-…`` in the temporary folder), after
    removing those of worker processes that ended without removing theirs (killed, or their machine lost power)."""
    base = Path(tempfile.gettempdir())
    for old in base.glob(f"{SCRATCH}*-*"):
        pid = old.name[len(SCRATCH):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH}{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's process
        return True
    except (ProcessLookupError, OverflowError):  # none; a number no process can have
        return False
    return True


class _WorkerState:
    """What one worker process keeps between tasks: a scratch folder, the zygotes, sandbox slots, templates."""

    _lock = threading.Lock()
    _instances: dict[tuple, _WorkerState] = {}  # one per (isolation, trusted): batches of other clients may differ

    @classmethod
    def get(cls, options: dict) -> _WorkerState:
        key = (options["isolation"], bool(options["trusted"]))
        with cls._lock:
            if key not in cls._instances:
                cls._instances[key] = cls(options)
            return cls._instances[key]

    def __init__(self, options: dict):
        from distributed import get_worker

        self.isolation = isolation_for(options["isolation"])
        if self.isolation is None:
            raise RuntimeError("this worker cannot run the full sandbox (no root, or no namespaces): grade with "
                               "--isolation none, or run the workers as root")
        nthreads = max(1, get_worker().state.nthreads)
        self.work = scratch_folder()
        self.slots = Slots(nthreads, self.isolation)
        # A zygote dies with the thread that started it: this one lives as long as the worker process.
        self._owner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="autograder-zygotes")
        threads = max(1, (os.cpu_count() or 1) // nthreads)
        self.zygotes = self._owner.submit(Zygotes, self.work, options["trusted"], threads).result()
        self.zygotes.wait_ready()
        self.templates: dict[str, autograde.Template] = {}
        self.graders: dict[tuple, Grader] = {}
        atexit.register(self.close)  # a worker that ends cleanly; one killed leaves it to the next (scratch_folder)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # at exit: whatever is already gone
            self.zygotes.close()
            self.slots.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def grader(self, assignment: str, key: str, packed: bytes, options: dict) -> Grader:
        with self._lock:  # the class's lock: a worker's threads build one grader at a time
            if key not in self.templates:
                where = self.work / "templates" / key
                if where.exists():
                    shutil.rmtree(where)
                where.mkdir(parents=True)
                with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
                    tar.extractall(where, filter="data")  # our own archive; "data" refuses anything odd anyway
                course = where / "template"
                config = (course / "nbgrader_config.py").read_text()
                self.templates[key] = autograde.Template(assignment, course, config, hidden_in_kernel=not options["trusted"])
            gkey = (key, json.dumps(options, sort_keys=True, default=str))
            if gkey not in self.graders:
                self.graders[gkey] = Grader(self.templates[key], options["limits"], options["trusted"], self.work,
                                            self.isolation, self.zygotes)
            return self.graders[gkey]
