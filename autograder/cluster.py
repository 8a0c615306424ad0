"""Grade a class on a Dask cluster: each submission's job is a task, everything single stays here.

``--scheduler ADDRESS`` runs the batch of ``autograder.batch`` with its jobs (autograde, hidden
checks, the decision of each test cell) as tasks on a Dask cluster's workers. This process keeps
what must be single: collecting and checking, the preflight, the one writer of the gradebook, the
outputs and the feedback. The template travels to each worker once per assignment (a task's
result, so the scheduler can compute it again), each task carries the checked notebook, the seed
and the options, and the rows and autograded notebook come back as data. Every worker must run
the same grader (:func:`fingerprint`, checked before anything is submitted) and keeps its own
sandbox machinery (:class:`_WorkerState`). A task that raised runs once more (``retries=1``);
one that fails for good gives its student rows with the reason. Long form: docs/grading.md,
"Beyond one machine".
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import threading
from dataclasses import asdict
from pathlib import Path

import nbformat

RETRIES = 1  # a task that raised runs once more, elsewhere if it can: a worker's trouble is not the student's


def fingerprint() -> str:
    """A digest of the grading code (``autograder`` and ``course`` sources): the client's and every worker's must match."""
    from . import worker

    h = hashlib.sha256()
    for pkg in ("autograder", "course"):
        root = Path(worker._package_dir(pkg))
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def connect(address):
    """A Dask client on the scheduler at ``address``; a clear message when distributed is missing or it is not there.

    ``address`` may also be a client already made (a Dask Gateway cluster's ``get_client()``, whose
    credentials an address alone does not carry): it is used as it is.
    """
    from .batch import InstructorError

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
    from .batch import InstructorError

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


def pack_template(course: Path) -> bytes:
    """The template course folder as a gzipped tar (a few hundred KB): what a worker grades against."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(course, arcname="template")
    return buffer.getvalue()


def grade_all_remote(client, todo: list, options_of: dict, templates: dict[str, bytes], work: Path,
                     on_result) -> None:
    """Run every job of ``todo`` (``(part, student, nb, path, seed)``) as a task; ``on_result(part, res)`` as each ends.

    ``options_of``: assignment -> the task options; ``templates``: assignment -> packed template.
    Called from the batch's thread, which alone writes the gradebook (``on_result``).
    """
    from distributed import as_completed

    # A task that returns the archive, not scattered data: the scheduler can compute it again on another worker
    # when the one holding it is lost (scattered data it could not).
    shipped = {a: client.submit(_template, data, key=f"template-{a}-{hashlib.sha256(data).hexdigest()[:16]}")
               for a, data in templates.items()}
    futures = {}
    for part, student, nb, path, seed in todo:
        a = part.opts.assignment
        task = {"assignment": a, "template": hashlib.sha256(templates[a]).hexdigest()[:16], "student": student,
                "notebook": nbformat.writes(nb), "seed": seed, "options": options_of[a]}
        # pure=False: a student graded twice (another seed) is two tasks, never one result reused
        fut = client.submit(grade_task, task, shipped[a], retries=RETRIES, pure=False, key=f"grade-{a}-{student}-{seed}")
        futures[fut] = (part, student, path, seed)
    try:
        for fut in as_completed(list(futures)):
            part, student, path, seed = futures.pop(fut)
            try:
                got = fut.result()
                res = _result(got, work / "cluster" / part.opts.assignment, part.opts.assignment)
            except Exception as exc:  # noqa: BLE001 — lost twice, or raised twice: that student's rows say so
                res = part.grader.failed(student, f"the cluster could not grade it ({type(exc).__name__}: {exc})", seed)
            res.submission = path
            on_result(part, res)
    except BaseException:  # Ctrl-C (or anything else): nothing more runs for this batch on the cluster
        client.cancel(list(futures))
        raise


def _template(data: bytes) -> bytes:
    return data


def _result(got: dict, folder: Path, assignment: str):
    from .batch import StudentResult
    from .report import Row

    rows = [Row(**r) for r in got["rows"]]
    autograded = None
    if got.get("autograded") is not None:
        folder.mkdir(parents=True, exist_ok=True)
        autograded = folder / f"{got['student']}.ipynb"
        autograded.write_text(got["autograded"], encoding="utf-8")
    return StudentResult(got["student"], rows, got["seconds"], autograded, None, got.get("timestamp"),
                         got.get("note", ""), got.get("seed"))


# ---------------------------------------------------------------------------
# On a worker


def grade_task(task: dict, template: bytes) -> dict:
    """One submission, graded on this worker as the local pool grades it (``Grader.grade_one``); the result as data."""
    state = _WorkerState.get(task["options"])
    grader = state.grader(task["assignment"], task["template"], template, task["options"])
    nb = nbformat.reads(task["notebook"], as_version=4)
    slot = state.slots.get()
    try:
        res = grader.grade_safely(task["student"], nb, slot, task["seed"])
    finally:
        state.slots.put(slot)
    text = res.autograded.read_text(encoding="utf-8") if res.autograded and res.autograded.is_file() else None
    job = state.work / "jobs" / task["assignment"] / task["student"]
    shutil.rmtree(job, ignore_errors=True)  # no byte of a submission stays on the worker
    return {"student": res.student, "rows": [asdict(r) for r in res.rows], "seconds": res.seconds,
            "autograded": text, "timestamp": res.timestamp, "note": res.note, "seed": res.seed}


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
        import queue

        from distributed import get_worker

        from . import batch, sandbox, worker

        wanted = options["isolation"]
        self.isolation = sandbox.available_isolation() if wanted == "auto" else wanted
        if self.isolation == "full" and sandbox.available_isolation() != "full":
            raise RuntimeError("this worker cannot run the full sandbox (no root, or no namespaces): grade with "
                               "--isolation none, or run the workers as root")
        self.nthreads = max(1, get_worker().state.nthreads)
        self.work = Path(tempfile.mkdtemp(prefix="autograde-worker-"))
        self.block = worker.SandboxSlots() if self.isolation == "full" else None
        self.slots: queue.Queue[int] = queue.Queue()
        for i in range(self.nthreads):
            self.slots.put(self.block.slot(i) if self.block else i)
        # A zygote dies with the thread that started it: this one lives as long as the worker process.
        self._owner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="autograder-zygotes")
        threads = max(1, (os.cpu_count() or 1) // self.nthreads)
        self.zygotes = self._owner.submit(self._start_zygotes, batch, threads, options["trusted"]).result()
        self.templates: dict[str, object] = {}
        self.graders: dict[tuple, object] = {}

    def _start_zygotes(self, batch, threads: int, trusted: bool):
        zygotes = batch.Zygotes(self.work, trusted, threads)
        zygotes.wait_ready()
        return zygotes

    def grader(self, assignment: str, key: str, packed: bytes, options: dict):
        from . import batch, worker

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
                self.templates[key] = worker.Template(assignment, course, config, options["hidden_in_kernel"])
            gkey = (key, json.dumps(options, sort_keys=True, default=str))
            if gkey not in self.graders:
                opts = batch.Options(assignment, submissions=self.work, course=self.templates[key].course, out=self.work,
                                     workers=self.nthreads, limits=options["limits"], isolation=self.isolation,
                                     trusted=options["trusted"], feedback=False, progress=False)
                self.graders[gkey] = batch.Grader(opts, self.templates[key], self.work, self.isolation, self.zygotes)
            return self.graders[gkey]
