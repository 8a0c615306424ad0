"""The student bundle holds the release notebooks and `course`, and no solution of any kind; `make bundle` installs nothing."""

import os
import re
import subprocess
import sys
import tomllib
import zipfile

import pytest

from autograder.nbgrader_cli import ROOT
from tests.test_student_side import solution_lines, student_text
from tools.bundle import (
    COLAB_CELL,
    COLAB_VALIDATE,
    CPU_TORCH,
    TOP,
    VALIDATE_COMMAND,
    VENV_STEPS,
    requirement_name,
    write_bundle,
)


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


def test_bundle_project_takes_python_3_10_and_the_repository_pins(bundle):
    """The student side runs on 3.10 (issue 17): no upper bound, each library as the repository pins it, no grading tool."""
    project = tomllib.loads(bundle[f"{TOP}/pyproject.toml"])["project"]
    assert project["requires-python"] == ">=3.10"
    repo = {requirement_name(r): r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    for requirement in project["dependencies"]:
        pinned = repo[requirement_name(requirement)]
        assert requirement == pinned, f"{requirement}: the repository says {pinned}"
    names = {requirement_name(r) for r in project["dependencies"]}
    assert {"torch", "triton", "jupyterlab"} <= names and not names & {"nbgrader", "nbval", "pytest"}, names
    assert "torch==2.13.0" in project["dependencies"]
    environment = bundle[f"{TOP}/environment.yml"]
    for requirement in project["dependencies"]:
        assert f"      - {requirement}\n" in environment, f"environment.yml lacks {requirement}"


def test_bundle_readme_gives_every_step(bundle):
    readme = bundle[f"{TOP}/README.md"]
    for _, command in VENV_STEPS:
        assert f"       {command}\n" in readme, f"the README does not print the step {command!r} as a command line"
    for needed in (CPU_TORCH, VALIDATE_COMMAND, "wsl --install", "mamba env create -f environment.yml",
                   "jupyter lab", "Python 3.10, 3.11, 3.12 or 3.13"):
        assert needed in readme, f"the README does not say {needed!r}"


def test_bundle_and_repository_readmes_give_the_same_colab_start(bundle):
    """One first cell (tests/test_bundle_install.py runs it), what the T4 runs, and Validate there (issue 34)."""
    readme = bundle[f"{TOP}/README.md"]
    section = readme.split("## Run on Colab\n", 1)[1].split("\n## ", 1)[0]
    assert f"```python\n{COLAB_CELL}\n```" in section, "the bundle README does not print the Colab cell as one code block"
    for needed in ("T4", "sm_75", "float16 and\nfloat32: yes", "bfloat16: no", "python -m course validate", COLAB_VALIDATE,
                   "File → Upload notebook", "every notebook, 00 to"):
        assert needed in section, f"the bundle README's Colab section does not say {needed!r}"
    assert "http" not in COLAB_CELL, "the Colab cell names no address: the instructor publishes the zip, if anywhere"
    repository = (ROOT / "README.md").read_text()
    assert "## Run on Colab" in repository and f"```python\n{COLAB_CELL}\n```" in repository


def test_bundle_script_needs_only_the_standard_library(tmp_path, bundle):
    """-S: no site-packages (so no torch, no autograder); -I: no PYTHON* variables, no user site, not the repo on sys.path."""
    out = tmp_path / "student-bundle.zip"
    run = subprocess.run([sys.executable, "-I", "-S", str(ROOT / "tools" / "bundle.py"), "--out", str(out)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    with zipfile.ZipFile(out) as zf:
        assert sorted(zf.namelist()) == sorted(bundle)


def test_make_bundle_installs_nothing():
    """`make -n` prints what the target would run: one call of tools/bundle.py, no venv and no pip, even with a stale .venv stamp."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # `make test` runs us
    run = subprocess.run(["make", "-n", "--no-print-directory", "-W", "pyproject.toml", "bundle"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    commands = [line for line in run.stdout.splitlines() if line.strip()]
    assert len(commands) == 1 and commands[0].endswith("tools/bundle.py"), commands
    assert not re.search(r"\bpip\b|-m venv", run.stdout), run.stdout


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
