"""Shards graded on different machines merge into one grade table (and one gradebook)."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import autograde, gradebook
from autograder.report import Row, write_csv
from tools.mutants import ROOT

A = "01_matmul_from_shapes"
TESTS = {"test_linear_backward": 3, "test_linear_bias_backward": 2, "test_reduce_to_shape": 2}


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("template")
    return autograde.make_template(ROOT, A, where, hidden_in_kernel=True).gradebook


def shard(path: Path, template: Path, students: dict[str, dict[str, float]], manual: dict | None = None) -> Path:
    path.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", path)
    gradebook.install_assignment(path, template, A)
    rows = []
    with gradebook.opened(path) as gb:
        for student, scores in students.items():
            gradebook.record(gb, A, student, scores, seed=1000 + len(student))  # the seed it was graded with
            rows += [Row(student, A, t, s, TESTS[t], "" if s else "sign", seed=1000 + len(student))
                     for t, s in scores.items()]
        for (student, test_id), score in (manual or {}).items():
            gb.find_grade(test_id, A, A, student).manual_score = score
            gb.db.commit()
    (path / "grades" / A).mkdir(parents=True)
    write_csv(path / "grades" / A / "grades.csv", rows)
    return path


def merge(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", "merge", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_two_shards_make_one_table(tmp_path, template):
    one = shard(tmp_path / "one", template, {"alice": {"test_linear_backward": 3, "test_linear_bias_backward": 2,
                                                        "test_reduce_to_shape": 2}})
    two = shard(tmp_path / "two", template, {"bob": {"test_linear_backward": 0, "test_linear_bias_backward": 2,
                                                      "test_reduce_to_shape": 0}},
                manual={("bob", "test_reduce_to_shape"): 1.0})
    done = merge(tmp_path / "merged", one, two)
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "merged" / "grades.csv", newline="") as f:  # nbgrader export's format
        table = {r["student_id"]: r for r in csv.DictReader(f) if r["assignment"] == A}
    assert set(table) == {"alice", "bob"}
    assert float(table["alice"]["score"]) == 7.0
    assert float(table["bob"]["score"]) == 3.0  # 2 automatic + 1 given by hand on the second machine
    with open(tmp_path / "merged" / A / "grades.csv", newline="") as f:
        cells = list(csv.DictReader(f))
    assert len(cells) == 6 and {r["student"] for r in cells} == {"alice", "bob"}
    assert {(r["student"], r["seed"]) for r in cells} == {("alice", "1005"), ("bob", "1003")}
    with gradebook.opened(tmp_path / "merged") as gb:  # the seeds travel with the grades
        assert (gradebook.seed_of(gb, A, "alice"), gradebook.seed_of(gb, A, "bob")) == (1005, 1003)
    assert "1 of 2: sign in linear_backward" in (tmp_path / "merged" / A / "report.md").read_text()


def test_a_student_in_two_shards_is_an_error(tmp_path, template):
    one = shard(tmp_path / "one", template, {"alice": {"test_linear_backward": 3}})
    two = shard(tmp_path / "two", template, {"alice": {"test_linear_backward": 0}})
    done = merge(tmp_path / "merged", one, two)
    assert done.returncode == 2 and "student 'alice' is in two shards" in done.stderr
