"""The instructor's own mistakes end the command with status 2 and a message saying what to do."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tools.mutants import ROOT


def run(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def course(tmp_path):
    (tmp_path / "course" / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "course")
    shutil.copytree(ROOT / "source" / "01_matmul_from_shapes", tmp_path / "course" / "source" / "01_matmul_from_shapes")
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    return tmp_path / "course"


def test_unknown_assignment(course, tmp_path):
    done = run("grade", "01_matmul", "--submissions", str(tmp_path / "subs"), "--course", str(course))
    assert done.returncode == 2
    assert "unknown assignment '01_matmul'" in done.stderr and "01_matmul_from_shapes" in done.stderr


def test_no_such_submissions_folder(course, tmp_path):
    done = run("grade", "01_matmul_from_shapes", "--submissions", str(tmp_path / "nope"), "--course", str(course))
    assert done.returncode == 2 and "is not a folder" in done.stderr


def test_empty_submissions_folder(course, tmp_path):
    (tmp_path / "empty").mkdir()
    done = run("grade", "01_matmul_from_shapes", "--submissions", str(tmp_path / "empty"), "--course", str(course))
    assert done.returncode == 2 and "no submissions found" in done.stderr


def test_not_a_course(tmp_path):
    done = run("grade", "01_matmul_from_shapes", "--submissions", str(tmp_path), "--course", str(tmp_path))
    assert done.returncode == 2 and "not an nbgrader course" in done.stderr


def test_help_names_the_layouts_and_limits():
    done = run("grade", "--help")
    assert done.returncode == 0
    for words in ("--submissions", "--workers", "--out", "--cell-timeout", "--memory", "LMS"):
        assert words in done.stdout


def test_too_many_workers(course, tmp_path):
    done = run("grade", "01_matmul_from_shapes", "--submissions", str(tmp_path / "subs"), "--course", str(course),
               "--workers", "65")
    assert done.returncode == 2 and "--workers must be between 1 and 64" in done.stderr


def test_a_seed_that_is_not_a_number(course, tmp_path):
    done = run("grade", "01_matmul_from_shapes", "--submissions", str(tmp_path / "subs"), "--course", str(course),
               "--seed", "alice=lucky")
    assert done.returncode == 2 and "a seed is a non-negative integer, not 'lucky'" in done.stderr


def test_a_seed_for_a_student_who_has_no_submission(course, tmp_path):
    done = run("grade", "01_matmul_from_shapes", "--submissions", str(tmp_path / "subs"), "--course", str(course),
               "--seed", "carol=12")
    assert done.returncode == 2 and "--seed names 'carol', who has no submission here (students: alice)" in done.stderr
