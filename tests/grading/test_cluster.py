"""Grading on a Dask cluster (``--scheduler``): the same grades as the local pool, and a lost worker costs nothing.

A real scheduler and two real worker processes (``dask scheduler``, ``dask worker``) on
127.0.0.1, started from this environment; no mock. A class — honest students, a sample
mutant, the untouched release, and hostile fixtures that break the trusted checker's reply
or the kernel's error reporting — is graded once with the local pool and once through the
cluster, into two copies of the course: the rows (scores, diagnoses, reasons, seeds) and the
gradebooks must be the same. Then a worker is killed, process group and all, while it grades,
and every student still gets every row.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from autograder import cluster as dask_cluster
from autograder import sandbox
from autograder.nbgrader_cli import BIN, with_bin
from tests.grading import fixtures
from tools.mutants import ROOT, build_submission, mutants, source_notebook

pytest.importorskip("distributed", reason="the cluster extra is not installed (pip install '.[cluster]')")
pytestmark = pytest.mark.nbgrader

A = "01_matmul_from_shapes"
ISOLATION = os.environ.get("AUTOGRADER_TEST_ISOLATION") or sandbox.available_isolation()
HOSTILE = ("patched_checks", "stride0_tensor", "fake_reasons")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A scheduler and N single-threaded workers, each its own process group (a lost machine is a killpg)."""

    def __init__(self, tmp: Path, workers: int = 2):
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs = tmp / "cluster-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self._start("scheduler", [os.path.join(BIN, "dask"), "scheduler", "--host", "127.0.0.1",
                                  "--port", self.address.rsplit(":", 1)[1], "--no-dashboard"])
        for i in range(workers):
            self._start(f"w{i}", [os.path.join(BIN, "dask"), "worker", self.address, "--nworkers", "1", "--nthreads", "1",
                                  "--no-dashboard", "--name", f"w{i}", "--death-timeout", "60"])
        self.wait_for(workers)

    def _start(self, name: str, argv: list[str]) -> None:
        env = with_bin(os.environ)
        with open(self.logs / f"{name}.log", "w") as log:
            self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                                start_new_session=True)

    def client(self):
        from distributed import Client

        return Client(self.address, timeout="30s")

    def wait_for(self, n: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with self.client() as c:
                    if len(c.scheduler_info()["workers"]) >= n:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"the cluster did not get {n} workers: see {self.logs}")

    def kill(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.stop()


def make_class(tmp: Path) -> Path:
    """The submissions folder: three honest students (solved, a sample mutant, the untouched release) and HOSTILE."""
    subs = tmp / "submissions"
    course = make_course(tmp / "layout")
    for student, nb in {"alice": source_notebook(A), "carol": nbformat.read(ROOT / "release" / A / f"{A}.ipynb", 4),
                        "bob": nbformat.from_dict(build_submission(A, mutants(A)[0].cells))}.items():
        (subs / student).mkdir(parents=True)
        nbformat.write(nb, subs / student / f"{A}.ipynb")
    for h in fixtures.fixtures():
        if h.name in HOSTILE:
            fixtures.deliver(h, subs, course)
    return subs


def make_course(where: Path) -> Path:
    course = where / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "source" / A, course / "source" / A)
    return course


def grade(course: Path, subs: Path, out: Path, *extra: str, background: bool = False):
    argv = [sys.executable, "-m", "autograder", "grade", A, "--submissions", str(subs), "--course", str(course),
            "--out", str(out), "--isolation", ISOLATION, "--cell-timeout", "30", "--quiet", "--no-feedback", *extra]
    if background:
        # Ctrl-C as at a terminal: a test run started in the background (`cmd &` in a script) ignores SIGINT,
        # and a child would inherit that and never see the signal this test sends.
        return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)


def rows(out: Path) -> dict[tuple[str, str], tuple]:
    with open(out / "grades.csv", newline="") as f:
        return {(r["student"], r["grade_id"]): (r["score"], r["max_score"], r["diagnosis"], r["reason"], r["seed"])
                for r in csv.DictReader(f)}


def gradebook(course: Path) -> dict[tuple[str, str], tuple]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {(s.student.id, g.name): (g.auto_score, g.max_score)
                for s in gb.find_assignment(A).submissions for nb in s.notebooks for g in nb.grades}


def test_the_cluster_grades_as_the_local_pool_does(tmp_path, cluster):
    subs = make_class(tmp_path)
    local, remote = make_course(tmp_path / "local"), make_course(tmp_path / "remote")
    done = grade(local, subs, tmp_path / "out-local", "--workers", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    done = grade(remote, subs, tmp_path / "out-remote", "--scheduler", cluster.address)
    assert done.returncode == 0, done.stderr[-3000:]
    here, there = rows(tmp_path / "out-local"), rows(tmp_path / "out-remote")
    assert len(here) == 6 * 5 and here == there, {k: (here.get(k), there.get(k)) for k in set(here) | set(there)
                                                  if here.get(k) != there.get(k)}
    assert gradebook(local) == gradebook(remote)
    assert (remote / "autograded" / "alice" / A / f"{A}.ipynb").is_file()  # the notebooks came back as data
    # Something hostile did reach the checker and was refused, on a worker as here.
    assert there[("stride0_tensor", "test_linear_backward")][2] == "tampering"


def test_a_worker_lost_mid_batch_costs_no_row(tmp_path, cluster):
    subs = make_class(tmp_path)
    course = make_course(tmp_path / "remote")
    proc = grade(course, subs, tmp_path / "out", "--scheduler", cluster.address, background=True)
    try:
        with cluster.client() as c:  # wait until w1 is grading someone, then take its machine away
            deadline = time.monotonic() + 300
            while not any(str(key).startswith("grade-") for w, keys in c.processing().items()
                          if c.scheduler_info()["workers"].get(w, {}).get("name") == "w1" for key in keys):
                assert proc.poll() is None and time.monotonic() < deadline, "no task ever reached w1"
                time.sleep(0.2)
        cluster.kill("w1")
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    got = rows(tmp_path / "out")
    assert len(got) == 6 * 5
    assert all(score == max_score for (student, _), (score, max_score, *_) in got.items() if student == "alice"), got
    assert not [r for r in got.values() if r[3].startswith("grading failed")], got


def test_ctrl_c_cancels_the_cluster_s_tasks_and_leaves_the_gradebook_whole(tmp_path, cluster):
    from nbgrader.api import Gradebook

    subs = make_class(tmp_path)
    course = make_course(tmp_path / "remote")
    proc = grade(course, subs, tmp_path / "out", "--scheduler", cluster.address, background=True)
    try:
        with cluster.client() as c:
            deadline = time.monotonic() + 300
            while not any(str(k).startswith("grade-") for keys in c.processing().values() for k in keys):
                assert proc.poll() is None and time.monotonic() < deadline, "no task ever started"
                time.sleep(0.2)
            assert proc.poll() is None, "the batch ended before it could be interrupted"
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 130, err[-3000:]
            deadline = time.monotonic() + 60  # the tasks left are cancelled, not left to run for no one
            while any(str(k).startswith("grade-") for keys in c.processing().values() for k in keys):
                assert time.monotonic() < deadline, c.processing()
                time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "interrupted" in err
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:  # each student recorded is whole
        for submission in gb.find_assignment(A).submissions:
            grades = [g for nb in submission.notebooks for g in nb.grades]
            assert len(grades) == 5 and all(g.auto_score is not None for g in grades), submission.student.id


class _Cluster:
    """What check_workers asks of a client: each worker's answer to fingerprint()."""

    def __init__(self, answers: dict[str, str]):
        self.answers = answers

    def run(self, fn):
        return dict(self.answers)


def test_workers_running_another_grader_are_refused_by_name():
    from autograder import cluster
    from autograder.collect import InstructorError

    mine = cluster.fingerprint()
    assert cluster.check_workers(_Cluster({"tcp://a:1": mine, "tcp://b:1": mine})) == 2
    with pytest.raises(InstructorError, match=r"1 of 2 Dask workers run another version.*tcp://b:1"):
        cluster.check_workers(_Cluster({"tcp://a:1": mine, "tcp://b:1": "0123456789abcdef"}))
    with pytest.raises(InstructorError, match="no workers"):
        cluster.check_workers(_Cluster({}))


def test_a_killed_workers_scratch_is_removed_by_the_next_worker(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"autograde-worker-{int(ended.stdout)}-x1"  # a worker killed mid-batch: its zygotes' logs
    (stale / "checker").mkdir(parents=True)
    live = tmp_path / f"autograde-worker-{os.getppid()}-x2"  # a worker still running
    live.mkdir()
    unnamed = tmp_path / "autograde-worker-04tt3kvy"  # no process id in its name: not this grader's to judge
    unnamed.mkdir()
    mine = dask_cluster.scratch_folder()
    assert not stale.exists() and live.is_dir() and unnamed.is_dir()
    assert mine.parent == tmp_path and mine.name.startswith(f"autograde-worker-{os.getpid()}-")
