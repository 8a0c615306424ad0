"""The rules the course teaches, enforced where the student's code cannot reach the instruments.

Each hostile fixture of ``tests/submissions/hostile/`` for an assignment other than the
batch's (``test_grade_command.py`` grades 01's through the real command) breaks a rule with
every value right, in a way the checks' in-process instruments do not see: a Jacobian built
in NumPy or with the dispatch modes off, autograd reached through the engine's own entry
point after the course's guard was replaced, autograd in a thread, a T×T P kept in NumPy or
two levels down on ``ctx`` with torch's own softmax backward. Re-checked by the trusted
checker, the value worker measures each call itself (``autograder/worker_instruments.py``)
and the same checks reach the rule's class (``course.witness``); a measurement the student's
code switched off is refused (``tampering`` in the row). Then all of them again, through the
real command beside an honest student of each assignment, one attack per rule of each assignment: the rows a
class would get.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder import checker, seeds
from autograder.autograde import Limits
from autograder.grader import exercises_of, trusted_job
from tests.grading import fixtures
from tests.grading.conftest import ISOLATION
from tools.mutants import ROOT, source_notebook

SEED = seeds.parse(os.environ.get(seeds.SEED_ENV, "0"))
BATCH_ASSIGNMENT = "01_matmul_from_shapes"
ATTACKS = [h for h in fixtures.fixtures() if h.assignment != BATCH_ASSIGNMENT and h.delivery[0] == "folder"]


def test_there_are_attacks_on_every_rule():
    kinds = {e.diagnosis for h in ATTACKS for e in h.expects if not e.full}
    assert {"materialized-jacobian", "autograd-in-backward", "saved-quadratic-tensor", "tampering"} <= kinds, kinds


@pytest.mark.parametrize("attack", ATTACKS, ids=[h.name for h in ATTACKS])
def test_the_rechecked_verdict_names_the_rule(attack, zygote, slot, tmp_path):
    source = source_notebook(attack.assignment)
    tests = [c.metadata["nbgrader"]["grade_id"] for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")]
    nb = nbformat.reads(fixtures.text(attack, tmp_path), as_version=4)
    job = trusted_job(tmp_path, nb, exercises_of(attack.assignment, source), set(tests), isolation=ISOLATION, zygote=zygote,
                      limits=Limits(cell_timeout=60), slot=slot, seed=SEED)
    results = checker.run(job)
    problems = []
    for test_id, e in attack.expected(tests).items():
        r = results.get(test_id, {})
        if e.full:
            ok = r.get("status") == "ok" and r.get("passed") is True
        elif e.diagnosis == "tampering":  # the worker's measurement was switched off: the reply is refused
            ok = r.get("status") == "refused" and "measurements" in r.get("message", "")
        else:
            ok = r.get("status") == "ok" and r.get("passed") is False and r.get("cls") == e.diagnosis
        if not ok:
            problems.append(f"{test_id}: expected {'a pass' if e.full else e.diagnosis}, got {r}")
    assert not problems, "\n".join(problems)


def _one_per_rule(attacks):
    """The first attack of each (assignment, class) pair: every rule each assignment grades, once. Each attack's own
    verdict is held by the test above; the real command is the same checker behind the batch, so a second attack on
    one rule would add a notebook run (about 7 s) and no path."""
    kept = {}
    for h in attacks:
        for cls in sorted({e.diagnosis for e in h.expects if not e.full}):
            kept.setdefault((h.assignment, cls), h)
    names = {h.name for h in kept.values()}
    return [h for h in attacks if h.name in names]


BATCH = _one_per_rule(ATTACKS)


def _rules(attacks):
    return {(h.assignment, e.diagnosis) for h in attacks for e in h.expects if not e.full}


def test_the_batch_keeps_every_rule_of_every_assignment():
    assert _rules(BATCH) == _rules(ATTACKS) and len(BATCH) < len(ATTACKS)


@pytest.mark.nbgrader
def test_through_the_real_command_beside_honest_students(tmp_path):
    assignments = sorted({h.assignment for h in BATCH})
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    subs = tmp_path / "submissions"
    for a in assignments:
        shutil.copytree(ROOT / "source" / a, course / "source" / a)
        (subs / "honest").mkdir(parents=True, exist_ok=True)
        nbformat.write(source_notebook(a), subs / "honest" / f"{a}.ipynb")
    for h in BATCH:
        fixtures.deliver(h, subs, course)
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", *assignments, "--submissions", str(subs), "--course", str(course),
         "--out", str(tmp_path / "out"), "--workers", "2", "--isolation", ISOLATION, "--quiet", "--no-feedback"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {}
    for a in assignments:
        with open(tmp_path / "out" / a / "grades.csv", newline="") as f:
            rows.update({(r["student"], r["grade_id"]): r for r in csv.DictReader(f)})
    problems = []
    for key, r in rows.items():
        if key[0] == "honest" and float(r["score"]) != float(r["max_score"]):
            problems.append(f"honest/{key[1]}: {dict(r)}")
    for h in BATCH:
        tests = [c.metadata["nbgrader"]["grade_id"] for c in source_notebook(h.assignment).cells
                 if c.metadata.get("nbgrader", {}).get("grade")]
        for test_id, e in h.expected(tests).items():
            r = rows.get((h.student, test_id))
            if r is None:
                problems.append(f"{h.student}/{test_id}: no row")
            elif e.full != (float(r["score"]) == float(r["max_score"])) or (
                    not e.full and (float(r["score"]) != 0 or r["diagnosis"] != e.diagnosis)):
                problems.append(f"{h.student}/{test_id}: expected {'full' if e.full else e.diagnosis}, got {dict(r)}")
    assert not problems, "\n".join(problems)
