"""Shared test helpers: a notebook's solutions, its release stubs and its mutants as plain Python functions."""

from __future__ import annotations

import functools
import linecache
import math

import nbformat
import pytest
import torch

import course
from course.diagnose import GradingFailure
from tools.build_notebooks import TEXT_DIR, parse
from tools.mutants import ROOT, Mutant, apply_edit, replace_definition

# Cells a notebook gives the student (not exercises) that its solutions call: they run first.
GIVEN = {"04_layernorm": ("def layernorm_fwd_kernel",), "06_topk_routing": ("def softmax_backward_02",),
         "07_fused_linear_cross_entropy": ("import triton",),
         "08_mixed_precision_backward": ("BF16, F16 = torch.bfloat16", "def softmax_backward_by_kernel"),
         "09_matmul_backward_triton": ("import triton",), "10_attention_as_trained": ("import triton",),
         "11_mlp_and_rope": ("import triton",)}


def _namespace(label: str) -> dict:
    return {"torch": torch, "math": math, "course": course, "__name__": label}


@functools.cache
def _cells(slug: str) -> tuple:
    return tuple(parse((TEXT_DIR / f"{slug}.py").read_text(), slug))


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _is_solution(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("solution"))


def given_cells(slug: str) -> list[str]:
    """The code of the notebook's given cells that its solutions need, in order."""
    marks = GIVEN.get(slug, ())
    return [c.source for c in _cells(slug) if c.cell_type == "code" and not _is_solution(c)
            and any(m in c.source for m in marks)]


def solution_cells(slug: str) -> dict[str, str]:
    """grade_id -> code of each solution cell in notebooks/<slug>.py."""
    return {_grade_id(c): c.source for c in _cells(slug) if _is_solution(c)}


def edited_solution(slug: str, grade_id: str, edit: str, name: str | None = None) -> str:
    """Solution cell ``grade_id`` with a mutant's edit applied (each run of ``-`` lines, found once, becomes the
    ``+`` lines after it; ``tools.mutants``), inside the definition ``name`` when one is given.

    A test's variant of the solution then differs from it in the lines the test is about, and nowhere else.
    """
    code = solution_cells(slug)[grade_id]
    return replace_definition(code, name, edit) if name else apply_edit(code, edit)


def release_cells(slug: str) -> dict[str, str]:
    """grade_id -> code of each solution cell as the committed release notebook hands it out (the stubs)."""
    nb = nbformat.read(ROOT / "release" / slug / f"{slug}.ipynb", as_version=4)
    return {_grade_id(c): c.source for c in nb.cells if _is_solution(c)}


def run_notebook_code(slug: str, cells: dict[str, str], label: str) -> dict:
    """Execute the given cells, then ``cells`` (grade_id -> code) in order, and return what they define."""
    ns = _namespace(label)
    for i, code in enumerate(given_cells(slug)):
        exec(compile(code, f"<{slug} given cell {i}>", "exec"), ns)
    for grade_id, code in cells.items():
        exec(compile(code, f"<{label} {grade_id}>", "exec"), ns)
    return ns


def with_cells(slug: str, cells: dict[str, str], label: str = "variant") -> dict:
    """The notebook's solutions with ``cells`` (grade_id -> code) in place of theirs, as a student's namespace."""
    return run_notebook_code(slug, {**solution_cells(slug), **cells}, label)  # a replaced cell keeps its place


def solutions(slug: str) -> dict:
    """The notebook's solution cells executed in order (after its given cells)."""
    return run_notebook_code(slug, solution_cells(slug), "solution")


def solution_fixture(slug: str, name: str = "solution"):
    """A test module's fixture ``name``: the notebook's solutions, run once for the module."""
    @pytest.fixture(scope="module", name=name)
    def fixture() -> dict:
        return solutions(slug)
    return fixture


def releases(slug: str) -> dict:
    """The release notebook's stubs executed in order, as a student who has not started has them."""
    return run_notebook_code(slug, release_cells(slug), "release")


def mutant_functions(mutant: Mutant) -> dict:
    """The source solutions with the mutant's cells in place of theirs, as a submission holds them."""
    return with_cells(mutant.assignment, mutant.cells, f"mutant {mutant.name}")


@functools.cache
def mutant_named(assignment: str, name: str) -> dict:
    """``mutant_functions`` of the sample mutant ``name``, built once per test process."""
    from tools.mutants import mutants

    return mutant_functions(next(m for m in mutants(assignment) if m.name == name))


def declared_classes(mutants: list[Mutant]) -> set[tuple[str, str]]:
    """(exercise, diagnosis class) for every ``# expect:`` line of ``mutants``: the bugs they show."""
    return {(test.removeprefix("test_"), cls) for m in mutants for test, cls in m.expect.items()}


def replaced_tests(mutant: Mutant) -> set[str]:
    """The test cells of the exercises whose solution cells ``mutant`` replaces."""
    return {f"test_{grade_id}" for grade_id in mutant.cells}


def assert_mutants_cover(mutants: list[Mutant], required: set[tuple[str, str]], most: int) -> set[tuple[str, str]]:
    """Every (exercise, class) of ``required`` is some mutant's expect line, each mutant declares exactly the test
    cells of the cells it replaces, and there are at most ``most`` of them. Returns what they declare."""
    declared = declared_classes(mutants)
    assert required <= declared, f"no mutant shows {sorted(required - declared)}"
    for m in mutants:
        assert replaced_tests(m) == set(m.expect), f"{m.name}: one expect line per replaced cell"
    assert len(mutants) <= most, "each mutant is a full notebook run in `make grade`: keep them few"
    return declared


def student_cell(source: str, name: str, filename: str):
    """``name`` as a student's cell ``source`` defines it, compiled under IPython's kind of file name.

    The source goes into ``linecache`` under that name, as IPython keeps a cell's, so that a failure
    can quote the student's own line.
    """
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {"torch": torch}
    exec(compile(source, filename, "exec"), ns)
    return ns[name]


def assert_crash_quotes_the_line(checks, source: str, name: str, filename: str, line: str) -> None:
    """A student's ``name`` (from the cell ``source``) that raises is an ``error`` to each of ``checks``, and the
    failure quotes the student's own ``line`` ("line N: code")."""
    student = student_cell(source, name, filename)
    for check in checks:
        failure = failure_of(check, student)
        assert failure.cls == "error"
        assert line in str(failure)


def unguarded(helper):
    """A course helper without its delegation tripwire (``course.delegation``), for a test's fake student.

    A fake student function that borrows a course helper to build a wrong answer would otherwise be
    diagnosed ``delegated-to-helper`` before the bug the test is about.
    """
    from course import delegation

    delegation.install()
    key = f"{helper.__module__}.{helper.__qualname__}"
    return delegation.original(key) if key in delegation.guarded() else helper


def diagnosis(check, fn) -> str:
    """The class a check gives ``fn``, or "pass"."""
    try:
        check(fn)
    except GradingFailure as failure:
        return failure.cls
    return "pass"


def assert_diagnosed(fn, checks, cls: str, words, what: str) -> list[GradingFailure]:
    """Each of ``checks`` gives ``fn`` the class ``cls`` (``"pass"``: no failure) in a message holding every one of
    ``words``; ``what`` names the bug in a failed assertion. Returns the failures."""
    failures = []
    for check in checks:
        if cls == "pass":
            assert diagnosis(check, fn) == "pass", what
            continue
        failure = failure_of(check, fn)
        assert failure.cls == cls, f"{what}: {failure}"
        for word in words:
            assert word in str(failure), f"{what}: {word!r} not in {failure}"
        failures.append(failure)
    return failures


def failure_of(check, fn) -> GradingFailure:
    """The failure a check must raise for ``fn``."""
    with pytest.raises(GradingFailure) as info:
        check(fn)
    return info.value
