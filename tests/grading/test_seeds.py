"""Reproducible grades: each submission's seed is drawn, recorded, handed to its kernel and checker, and replayable.

Through the real command: ``--seed alice=4711`` grades alice with 4711, bob gets a seed drawn
for him. Each seed must be in grades.csv, in the gradebook, in the kernel's environment
(the notebook prints it) and in the trusted checker's job, and nowhere in the value
worker's environment. Graded again into the same output folder with ``--seed bob=<his>``,
bob is graded with the same seed, and the preflight is not paid twice (its result is cached
with the calibration).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder import gradebook, sandbox
from tools.mutants import ROOT, source_notebook

pytestmark = pytest.mark.nbgrader

ISOLATION = os.environ.get("AUTOGRADER_TEST_ISOLATION") or sandbox.available_isolation()
A = "01_matmul_from_shapes"


def grade(course: Path, work: Path, *seeds: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_SEED"}  # a seed drawn for whoever has none
    return subprocess.run(
        [sys.executable, "-m", "autograder", "grade", A, "--submissions", str(course / "subs"), "--course", str(course),
         # A generous cell limit: this test is about seeds, and a loaded CI machine once took a solved cell past 10 s.
         "--out", str(course / "out"), "--workers", "2", "--cell-timeout", "60", "--isolation", ISOLATION, "--quiet",
         "--no-feedback", "--work", str(work), *(arg for s in seeds for arg in ("--seed", s))],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def seeds_in(out: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    with open(out / "grades.csv", newline="") as f:
        for r in csv.DictReader(f):
            assert float(r["score"]) == float(r["max_score"]), r  # both solved it
            found.setdefault(r["student"], set()).add(r["seed"])
    return found


def kernel_printed(course: Path) -> str:
    nb = nbformat.read(course / "autograded" / "alice" / A / f"{A}.ipynb", as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


@pytest.fixture
def work():
    """A short scratch path: the jobs' Unix sockets live under it, and a socket's path has at most 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ag-seeds-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_each_seed_is_recorded_passed_on_and_replayed(tmp_path, work):
    from nbgrader.api import Gradebook

    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "source" / A, course / "source" / A)
    alice = source_notebook(A)
    solution = next(c for c in alice.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "linear_backward")
    solution.source = 'import os\nprint("seed in the kernel:", os.environ.get("AUTOGRADER_SEED"))\n' + solution.source
    for student, nb in {"alice": alice, "bob": source_notebook(A)}.items():
        (course / "subs" / student).mkdir(parents=True)
        nbformat.write(nb, course / "subs" / student / f"{A}.ipynb")

    done = grade(course, work / "1", "alice=4711")
    assert done.returncode == 0, done.stderr[-3000:]
    found = seeds_in(course / "out")
    assert found["alice"] == {"4711"}, found
    assert len(found["bob"]) == 1 and next(iter(found["bob"])).isdigit(), found
    bob = int(next(iter(found["bob"])))
    # The hidden checks run in the trusted checker, and only it has the seed: never the student's code.
    assert "seed in the kernel: None" in kernel_printed(course)
    job = work / "1" / "jobs" / A / "bob"
    assert "AUTOGRADER_SEED" not in json.loads((job / "kernel-spec.json").read_text())["env"]
    checker = json.loads((job / "trusted-job.json").read_text())
    assert checker["seed"] == bob and "AUTOGRADER_SEED" not in checker["spec"]["env"]  # the value worker never has it
    with Gradebook(gradebook.db_url(course)) as gb:
        assert (gradebook.seed_of(gb, A, "alice"), gradebook.seed_of(gb, A, "bob")) == (4711, bob)
    assert (work / "1" / "preflight" / A).is_dir()
    cache = (course / "out" / ".calibration.json").read_text()
    assert json.loads(cache)["preflight"] == "passed"

    # Bob again, with his seed; alice gets a fresh one. The preflight's result comes from the cache.
    done = grade(course, work / "2", f"bob={bob}")
    assert done.returncode == 0, done.stderr[-3000:]
    again = seeds_in(course / "out")
    assert again["bob"] == {str(bob)}, again
    alice_now = int(next(iter(again["alice"])))
    assert "seed in the kernel: None\n" in kernel_printed(course)
    with Gradebook(gradebook.db_url(course)) as gb:
        assert (gradebook.seed_of(gb, A, "alice"), gradebook.seed_of(gb, A, "bob")) == (alice_now, bob)
    # (In a working tree being edited, a change to autograder/ or course/ between the two runs changes the key.)
    assert not (work / "2" / "preflight").exists(), ("the preflight ran again", json.loads(cache)["key"],
                                                     json.loads((course / "out" / ".calibration.json").read_text())["key"])
    assert (course / "out" / ".calibration.json").read_text() == cache
