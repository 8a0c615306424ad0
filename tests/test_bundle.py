"""The student bundle holds the release notebooks and `course`, and no solution of any kind."""

import re
import zipfile

import pytest

from tests.test_student_side import solution_lines, student_text
from tools.bundle import TOP, write_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = write_bundle(tmp_path_factory.mktemp("dist") / "student-bundle.zip")
    with zipfile.ZipFile(path) as zf:
        yield {name: zf.read(name).decode() for name in zf.namelist()}


def test_bundle_holds_notebooks_course_and_an_environment(bundle):
    names = set(bundle)
    assert f"{TOP}/00_vjp_contract/00_vjp_contract.ipynb" in names
    assert f"{TOP}/course/__init__.py" in names
    assert {f"{TOP}/pyproject.toml", f"{TOP}/environment.yml", f"{TOP}/README.md"} <= names
    assert "torch==2.13.0" in bundle[f"{TOP}/pyproject.toml"]


def test_bundle_holds_no_instructor_folder(bundle):
    for name in bundle:
        parts = name.split("/")[1:]
        assert parts[0] not in {"source", "kernels", "autograder", "tests", "notebooks", "tools"}, name


def test_bundle_holds_no_solution_region_hidden_test_or_solution_import(bundle):
    for name, text in bundle.items():
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
            assert marker not in text, f"{name} holds {marker}"
        assert not re.search(r"^\s*(import|from)\s+(kernels|autograder)\b", text, re.M), f"{name} imports a solution package"
        assert not re.search(r'"\s*(import|from) (kernels|autograder)\b', text), f"{name} imports a solution package"


def test_bundle_holds_no_line_of_any_solution(bundle):
    lines = solution_lines()
    for name, text in bundle.items():
        text = student_text(name, text)
        leaked = [ln for ln in lines if ln in text]
        assert not leaked, f"{name} contains solution lines: {leaked[:3]}"
