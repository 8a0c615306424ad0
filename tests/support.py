"""Shared test helpers: a notebook's solutions, its release stubs and its mutants as plain Python functions."""

from __future__ import annotations

import functools
import math

import nbformat
import pytest
import torch

import course
from tools.mutants import ROOT, Mutant
from course.diagnose import GradingFailure
from tools.build_notebooks import TEXT_DIR, parse

# Cells a notebook gives the student (not exercises) that its solutions call: they run first.
GIVEN = {"04_layernorm": ("def layernorm_fwd_kernel",)}


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


def solutions(slug: str) -> dict:
    """The notebook's solution cells executed in order (after its given cells)."""
    return run_notebook_code(slug, solution_cells(slug), "solution")


def releases(slug: str) -> dict:
    """The release notebook's stubs executed in order, as a student who has not started has them."""
    return run_notebook_code(slug, release_cells(slug), "release")


def mutant_functions(mutant: Mutant) -> dict:
    """The source solutions with the mutant's cells in place of theirs, as a submission holds them."""
    cells = {**solution_cells(mutant.assignment), **mutant.cells}  # a replaced cell keeps its place
    return run_notebook_code(mutant.assignment, cells, f"mutant {mutant.name}")


@functools.cache
def mutant_named(assignment: str, name: str) -> dict:
    """``mutant_functions`` of the sample mutant ``name``, built once per test process."""
    from tools.mutants import mutants

    return mutant_functions(next(m for m in mutants(assignment) if m.name == name))


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


def failure_of(check, fn) -> GradingFailure:
    """The failure a check must raise for ``fn``."""
    with pytest.raises(GradingFailure) as info:
        check(fn)
    return info.value
