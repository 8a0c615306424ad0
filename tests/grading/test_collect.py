"""Finding a class's submissions in each layout, and checking notebooks before anything runs."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import collect
from autograder.submissions import ROOT, source_notebook

A = "01_matmul_from_shapes"


@pytest.fixture
def course(tmp_path) -> Path:
    c = tmp_path / "course"
    (c / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", c)
    for name in (A, "00_vjp_contract"):
        shutil.copytree(ROOT / "source" / name, c / "source" / name)
    return c


def write(path: Path, nb=None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb or source_notebook(A), path)
    return path


def test_one_folder_per_student(tmp_path, course):
    subs = tmp_path / "subs"
    write(subs / "alice" / f"{A}.ipynb")
    write(subs / "bob" / "my work (1).ipynb")  # a lone notebook under another name is still bob's
    (subs / "carol").mkdir()  # submitted nothing
    got = collect.collect(A, subs, tmp_path / "staging", course)
    assert [(s.student, s.path is not None, s.problem.split(":")[0]) for s in got] == [
        ("alice", True, ""), ("bob", True, ""), ("carol", False, "missing notebook")]


def test_nbgrader_submitted_layout(tmp_path, course):
    subs = tmp_path / "course-like"
    write(subs / "submitted" / "alice" / A / f"{A}.ipynb")
    write(subs / "submitted" / "bob" / A / f"{A}.ipynb")
    got = collect.collect(A, subs, tmp_path / "staging", course)
    assert [s.student for s in got] == ["alice", "bob"]
    assert all(s.path.name == f"{A}.ipynb" for s in got)


def test_lms_zips(tmp_path, course):
    """A class export with files named <student>_<ids>_<assignment>.ipynb, and a zip per student."""
    subs = tmp_path / "subs"
    subs.mkdir()
    nb_path = write(tmp_path / "nb.ipynb")
    with zipfile.ZipFile(subs / "canvas-export.zip", "w") as z:
        z.write(nb_path, f"alice_123_456_{A}.ipynb")
        z.write(nb_path, f"Bob Smith_789_{A}.ipynb")  # a space in the name: made safe
    with zipfile.ZipFile(subs / "dave.zip", "w") as z:
        z.write(nb_path, f"{A}/{A}.ipynb")
    got = {s.student: s for s in collect.collect(A, subs, tmp_path / "staging", course)}
    assert sorted(got) == ["Bob-Smith", "alice", "dave"]
    assert all(s.path and s.path.is_file() and not s.problem for s in got.values())


def test_instructor_mistakes_are_errors(tmp_path, course):
    with pytest.raises(collect.CollectError, match="is not a folder"):
        collect.collect(A, tmp_path / "nowhere", tmp_path / "staging", course)
    (tmp_path / "empty").mkdir()
    with pytest.raises(collect.CollectError, match="no submissions found"):
        collect.collect(A, tmp_path / "empty", tmp_path / "staging", course)
    write(tmp_path / "loose" / f"{A}.ipynb")
    with pytest.raises(collect.CollectError, match="put each in a folder named after its student"):
        collect.collect(A, tmp_path / "loose", tmp_path / "staging", course)


@pytest.mark.parametrize("content, reason", [
    ("{not json", "malformed notebook: not valid JSON"),
    ("[1, 2, 3]", "malformed notebook: valid JSON, but not a notebook"),
    (json.dumps({"cells": [{"cell_type": "code"}], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}),
     "malformed notebook:"),  # a code cell without source: nbformat rejects it
])
def test_malformed_notebooks(tmp_path, course, content, reason):
    path = tmp_path / "x.ipynb"
    path.write_text(content)
    nb, problem = collect.check_notebook(path, A, collect.assignment_ids(course))
    assert nb is None and problem.startswith(reason), problem


def test_another_assignments_notebook(tmp_path, course):
    path = write(tmp_path / "x.ipynb", source_notebook("00_vjp_contract"))
    nb, problem = collect.check_notebook(path, A, collect.assignment_ids(course))
    assert nb is None and problem == f"wrong assignment: this is the notebook of 00_vjp_contract, not {A}"
    blank = write(tmp_path / "blank.ipynb", nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]))
    nb, problem = collect.check_notebook(blank, A, collect.assignment_ids(course))
    assert problem == f"wrong assignment: the notebook holds none of {A}'s exercises"


def test_duplicated_grade_ids_keep_the_last_copy(tmp_path, course):
    nb = source_notebook(A)
    i = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "linear_backward")
    twin = nbformat.from_dict(json.loads(json.dumps(nb.cells[i])))
    twin.source = "def linear_backward(x, w, dy):\n    return None"
    twin["id"] = "twin"
    nb.cells.insert(i, twin)
    checked, problem = collect.check_notebook(write(tmp_path / "x.ipynb", nb), A, collect.assignment_ids(course))
    assert problem == ""
    copies = [c for c in checked.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "linear_backward"]
    assert len(copies) == 1 and "BEGIN SOLUTION" in copies[0].source  # the last copy keeps the id
    assert "nbgrader" not in checked.cells[i].metadata  # the earlier one is a plain cell now


def test_safe_student_ids():
    assert collect.safe_student_id("Bob Smith") == "Bob-Smith"
    assert collect.safe_student_id("../../etc") == "etc"
    assert collect.safe_student_id("ünïcode@uni.edu") == "n-code@uni.edu"
