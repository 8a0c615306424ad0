"""Exercises ask; they do not tell. Read every release notebook as a student does.

For each graded exercise (a solution cell ``<name>`` and its test cell ``test_<name>``):

- the cells between the two are one markdown cell of progressive hints, each a collapsed
  ``<details><summary>Hint N — …</summary>`` block, numbered 1, 2, … — at least two;
- none of the exercise's *answer forms* appears before its solution cell (the whole notebook
  above it), in the stub, or in any hint but the last;
- at least one does appear in the last hint or in the recap after the test cell, so the forms
  are the notebook's own notation and the story still ends with the result.

The answer forms live in ``tests/notebooks/answers/<assignment>.toml``, one table per exercise:
``forms = [...]``, the key expressions of the answer in the notebook's LaTeX and code, or
``exempt = "why"`` for a wiring exercise with nothing to derive. :func:`normalise` makes the
comparison blind to spacing, braces, case and the usual LaTeX spacing commands.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from autograder.nbrunner import ROOT

ANSWERS = Path(__file__).resolve().parent / "answers"
ASSIGNMENTS = sorted(p.name for p in (ROOT / "release").iterdir() if p.is_dir() and p.name[:2].isdigit())

HINT = re.compile(r"<details>\s*<summary>\s*Hint (\d+) — ([^<]+?)\s*</summary>(.*?)</details>", re.S)
_DROP = re.compile(
    r"\\(?:(?:left|right|big|Big|bigg|Bigg|mathrm|operatorname|text|textstyle|displaystyle|quad|qquad)(?![A-Za-z])|[,;:!])"
    r"|[\s${}`]"
)
_SAME = {"−": "-", "·": "*", "ᵀ": "^\\top", "×": "*", "⊙": "\\odot", "\\cdot": "*", "\\times": "*", "\\ast": "*"}


def normalise(text: str) -> str:
    """Lowercase ``text`` without spacing, braces, ``$``, backticks or LaTeX spacing/sizing commands."""
    for a, b in _SAME.items():
        text = text.replace(a, b)
    return _DROP.sub("", text).lower()


@dataclass
class Exercise:
    name: str
    solution: int  # cell index of the solution cell (the stub, in release)
    test: int  # cell index of the test cell


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


@functools.cache
def release(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "release" / assignment / f"{assignment}.ipynb", as_version=4)


def exercises(nb) -> list[Exercise]:
    solutions = {_grade_id(c): i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("solution")}
    tests = {_grade_id(c): i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade")}
    return [Exercise(name, i, tests[f"test_{name}"]) for name, i in solutions.items() if f"test_{name}" in tests]


def hints(nb, ex: Exercise) -> list[tuple[int, str, str]]:
    """(number, title, body) of each hint between the exercise's solution cell and its test cell."""
    between = nb.cells[ex.solution + 1:ex.test]
    return [(int(n), title, body) for cell in between for n, title, body in HINT.findall(cell.source)]


def recap(nb, ex: Exercise) -> str:
    """The markdown after the test cell, up to the next exercise's solution cell."""
    following = [e.solution for e in exercises(nb) if e.solution > ex.test]
    end = min(following, default=len(nb.cells))
    return "\n".join(c.source for c in nb.cells[ex.test + 1:end] if c.cell_type == "markdown")


@functools.cache
def answer_table(assignment: str) -> dict:
    path = ANSWERS / f"{assignment}.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


CASES = [pytest.param(a, ex.name, id=f"{a}-{ex.name}") for a in ASSIGNMENTS for ex in exercises(release(a))]


def _exercise(assignment: str, name: str) -> Exercise:
    return next(ex for ex in exercises(release(assignment)) if ex.name == name)


def found(forms: list[str], text: str) -> list[str]:
    norm = normalise(text)
    return [f for f in forms if normalise(f) in norm]


# ---------------------------------------------------------------------------


@pytest.mark.parametrize("assignment, name", CASES)
def test_progressive_collapsed_hints_sit_between_the_exercise_and_its_check(assignment, name):
    nb, ex = release(assignment), _exercise(assignment, name)
    between = nb.cells[ex.solution + 1:ex.test]
    assert between, f"{name}: no hint cell between the exercise and its test cell"
    assert all(c.cell_type == "markdown" for c in between), f"{name}: only hints go between the stub and its check"
    text = "\n".join(c.source for c in between)
    found_hints = hints(nb, ex)
    assert len(found_hints) >= 2, f"{name}: at least two hints, each <details><summary>Hint N — title</summary>"
    assert [n for n, _, _ in found_hints] == list(range(1, len(found_hints) + 1)), f"{name}: hints numbered 1, 2, …"
    assert text.count("<details") == text.count("</details>") == len(found_hints), f"{name}: every <details> is a hint"
    assert not re.search(r"<details[^>]*\bopen\b", text), f"{name}: hints render collapsed (no `open`)"
    for n, title, body in found_hints:
        assert title.strip(), f"{name}: Hint {n} has a title"
        assert body.startswith("\n\n") or body.startswith("\r\n\r\n"), \
            f"{name}: a blank line after </summary> of Hint {n}, or its markdown does not render"


@pytest.mark.parametrize("assignment, name", CASES)
def test_every_exercise_declares_its_answer_forms(assignment, name):
    entry = answer_table(assignment).get(name)
    assert entry is not None, f"tests/notebooks/answers/{assignment}.toml has no [{name}] table"
    if "exempt" in entry:
        assert isinstance(entry["exempt"], str) and len(entry["exempt"].split()) >= 3, \
            f"{name}: an exemption says why in words"
        assert "forms" not in entry
    else:
        forms = entry.get("forms")
        assert isinstance(forms, list) and forms and all(isinstance(f, str) and normalise(f) for f in forms), \
            f"{name}: forms = [...] lists the answer's key expressions"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_answer_files_name_only_exercises_that_exist(assignment):
    names = {ex.name for ex in exercises(release(assignment))}
    assert set(answer_table(assignment)) <= names


def forms_or_skip(assignment: str, name: str) -> list[str]:
    """The exercise's answer forms; a wiring exercise exempt from them has none to look for."""
    forms = answer_table(assignment).get(name, {}).get("forms", [])
    if not forms:
        pytest.skip(f"{name}: exempt, or no forms declared (test_every_exercise_declares_its_answer_forms says which)")
    return forms


@pytest.mark.parametrize("assignment, name", CASES)
def test_no_answer_before_the_exercise_or_in_its_stub_or_early_hints(assignment, name):
    forms = forms_or_skip(assignment, name)
    nb, ex = release(assignment), _exercise(assignment, name)
    for i, cell in enumerate(nb.cells[:ex.solution]):
        leaked = found(forms, cell.source)
        assert not leaked, f"{name}: {leaked} already stated in cell {cell.get('id', i)} above the exercise"
    leaked = found(forms, nb.cells[ex.solution].source)
    assert not leaked, f"{name}: the stub states {leaked}"
    for n, title, body in hints(nb, ex)[:-1]:
        leaked = found(forms, title + body)
        assert not leaked, f"{name}: Hint {n} states {leaked}; only the last hint gives the formula"


@pytest.mark.parametrize("assignment, name", CASES)
def test_the_last_hint_or_the_recap_states_the_answer(assignment, name):
    forms = forms_or_skip(assignment, name)
    nb, ex = release(assignment), _exercise(assignment, name)
    last = hints(nb, ex)[-1][2] if hints(nb, ex) else ""
    assert found(forms, last + "\n" + recap(nb, ex)), \
        f"{name}: none of {forms} appears in the last hint or the recap after the test cell"


def test_normalise_ignores_layout_but_not_symbols():
    assert normalise(r"$\bar W = x^{\top}\,\bar z$") == normalise(r"\bar W=x^\top \bar z")
    assert normalise("`dz @ W.T`") == normalise("dz@w.t")
    assert normalise("y − e_t") == normalise("y - e_t")
    assert normalise(r"x^\top \bar z") != normalise(r"\bar z x^\top")

