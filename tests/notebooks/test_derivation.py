"""Exercises ask; they do not tell. Read every release notebook as a student does.

For each graded exercise (a solution cell ``<name>`` and its test cell ``test_<name>``):

- the cells between the two are one markdown cell of progressive hints, each a collapsed
  ``<details><summary>Hint N — …</summary>`` block, numbered 1, 2, … — at least two;
- none of the exercise's *answer forms* appears before its solution cell (the whole notebook
  above it), in the stub, or in any hint — the last one included: hints ask and give partial
  steps, they never hand over the result;
- no code span or code block of a hint holds an arithmetic expression of the exercise's
  solution (:func:`solution_expressions`, compared as syntax trees, so spacing, parentheses
  and ``.mT`` versus ``.T`` change nothing);
- at least one form does appear in the recap after the test cell, inside a collapsed
  ``<details>`` block the student opens once the check passes, so the forms are the notebook's
  own notation and the story still ends with the result;
- ``course/``, which students receive with its source, spells no exercise's answer form.

The answer forms live in ``tests/notebooks/answers/<assignment>.toml``, one table per exercise:
``forms = [...]``, the key expressions of the answer in the notebook's LaTeX and code, or
``exempt = "why"`` for a wiring exercise with nothing to derive. :func:`normalise` makes the
comparison blind to spacing, braces, case and the usual LaTeX spacing commands.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from autograder.nbgrader_cli import ROOT

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
def test_no_answer_before_the_exercise_or_in_its_stub_or_any_hint(assignment, name):
    forms = forms_or_skip(assignment, name)
    nb, ex = release(assignment), _exercise(assignment, name)
    for i, cell in enumerate(nb.cells[:ex.solution]):
        leaked = found(forms, cell.source)
        assert not leaked, f"{name}: {leaked} already stated in cell {cell.get('id', i)} above the exercise"
    leaked = found(forms, nb.cells[ex.solution].source)
    assert not leaked, f"{name}: the stub states {leaked}"
    for n, title, body in hints(nb, ex):
        leaked = found(forms, title + body)
        assert not leaked, f"{name}: Hint {n} states {leaked}; the answer goes in the recap after the check"


DETAILS = re.compile(r"<details>\s*<summary>([^<]+)</summary>(.*?)</details>", re.S)


@pytest.mark.parametrize("assignment, name", CASES)
def test_the_collapsed_recap_states_the_answer(assignment, name):
    forms = forms_or_skip(assignment, name)
    nb, ex = release(assignment), _exercise(assignment, name)
    text = recap(nb, ex)
    assert not re.search(r"<details[^>]*\bopen\b", text), f"{name}: the recap renders collapsed (no `open`)"
    collapsed = "\n".join(body for _, body in DETAILS.findall(text))
    assert found(forms, collapsed), \
        f"{name}: none of {forms} appears in a collapsed <details> recap after the test cell"


# --- hints hold no expression of the solution -------------------------------------------------

SOLUTION_REGION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
# `.mT`, `.T`, `.mH` and `.H` transpose alike: a hint that swaps one for the other still gives it away.
_TRANSPOSES = {"mT": "T", "mH": "T", "H": "T"}


class _Canonical(ast.NodeTransformer):
    def visit_Attribute(self, node):
        self.generic_visit(node)
        node.attr = _TRANSPOSES.get(node.attr, node.attr)
        return node


def _index_like(node: ast.expr) -> bool:
    """A constant, a block size (`BLOCK`) or a base pointer (`X_ptr`): what index and address
    arithmetic is made of."""
    return isinstance(node, ast.Constant) or (isinstance(node, ast.Name) and (node.id.isupper() or node.id.endswith("_ptr")))


def _trivial(node: ast.BinOp) -> bool:
    """Index arithmetic (`i + 1`, `start + BLOCK`, `n - 1`): a constant or a block size added to or
    subtracted from a name says nothing about a derivation (`dy - s` does, and is not trivial)."""
    simple = (ast.Constant, ast.Name)
    return (isinstance(node.op, (ast.Add, ast.Sub)) and isinstance(node.left, simple) and isinstance(node.right, simple)
            and (_index_like(node.left) or _index_like(node.right)))


def arithmetic(code: str) -> set[str]:
    """Every binary operation in ``code`` that is not index arithmetic, as a canonical dump."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        try:
            tree = ast.parse(textwrap.dedent(code).strip(), mode="eval")
        except SyntaxError:
            return set()  # prose, LaTeX or a shape such as (..., N): the answer forms cover those
    tree = _Canonical().visit(tree)
    return {ast.dump(n) for n in ast.walk(tree) if isinstance(n, ast.BinOp) and not _trivial(n)}


@functools.cache
def source(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)


def given_expressions(assignment: str) -> set[str]:
    """The binary operations of the release notebook's code: handed out on purpose (a forward the
    exercise states, a kernel's prologue), so a hint may show them too."""
    return {d for c in release(assignment).cells if c.cell_type == "code" for d in arithmetic(c.source)}


def solution_expressions(assignment: str, name: str) -> dict[str, str]:
    """The exercise's solution region's binary operations that the release does not already give:
    canonical dump -> the code as written."""
    cell = next(c for c in source(assignment).cells if _grade_id(c) == name and c.cell_type == "code")
    found_ = {}
    for region in SOLUTION_REGION.findall(cell.source):
        for line in textwrap.dedent(region).splitlines():
            code = line.split("#")[0].strip()
            for dump in arithmetic(code.removeprefix("return ").strip()) if code else ():
                found_.setdefault(dump, code)
        try:
            tree = _Canonical().visit(ast.parse(textwrap.dedent(region)))
        except SyntaxError:
            continue  # a region that is not a whole block: its lines were read one by one above
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and not _trivial(node):
                found_.setdefault(ast.dump(node), ast.unparse(node))
    given = given_expressions(assignment)
    return {d: code for d, code in found_.items() if d not in given}


CODE_IN_MARKDOWN = re.compile(r"```[a-z]*\n(.*?)```|``(.+?)``|`([^`\n]+)`", re.S)


def code_in(markdown: str) -> list[str]:
    """The code blocks and code spans of a markdown text."""
    return [next(g for g in groups if g) for groups in CODE_IN_MARKDOWN.findall(markdown) if any(groups)]


@pytest.mark.parametrize("assignment, name", CASES)
def test_no_hint_holds_an_expression_of_the_solution(assignment, name):
    solved = solution_expressions(assignment, name)
    nb, ex = release(assignment), _exercise(assignment, name)
    for n, title, body in hints(nb, ex):
        for code in code_in(title + body):
            given = sorted(solved[d] for d in arithmetic(code) & solved.keys())
            assert not given, f"{name}: Hint {n} holds `{code.strip()}`, which computes {given} of the solution"


def test_an_expression_is_found_however_it_is_spaced_or_transposed():
    solved = arithmetic("dx = dy @ w.mT  # the comment says nothing")
    assert arithmetic("`dy@w.T`".strip("`")) <= solved
    assert arithmetic("(dy) @ (w.mT)") <= solved
    assert not arithmetic("dy @ ...") & solved  # a partial step leaves the operand to find
    assert not arithmetic("i + 1") and not arithmetic("(..., N)") and not arithmetic("x̄ = ȳ Wᵀ")
    assert arithmetic("dy - s") and not arithmetic("start + BLOCK") and not arithmetic("X_ptr + offs")
    assert code_in("ask `a @ b`, then\n```python\nc = a * b\n```") == ["a @ b", "c = a * b\n"]


# --- the package students receive ---------------------------------------------------------------


COURSE_FILES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "course").rglob("*.py"))


@pytest.mark.parametrize("path", COURSE_FILES)
def test_the_course_package_spells_no_answer_form(path):
    """`course/` ships with its source: no docstring, comment or line of it may state an exercise's answer."""
    text = normalise((ROOT / path).read_text())
    leaks = [f"{assignment} {name}: {form!r}" for assignment in ASSIGNMENTS
             for name, entry in answer_table(assignment).items()
             for form in entry.get("forms", []) if normalise(form) in text]
    assert not leaks, f"{path} states answers a student receives with it:\n" + "\n".join(leaks)


def test_normalise_ignores_layout_but_not_symbols():
    assert normalise(r"$\bar W = x^{\top}\,\bar z$") == normalise(r"\bar W=x^\top \bar z")
    assert normalise("`dz @ W.T`") == normalise("dz@w.t")
    assert normalise("y − e_t") == normalise("y - e_t")
    assert normalise(r"x^\top \bar z") != normalise(r"\bar z x^\top")

