"""Shared test helpers: the source solutions and the mutants as plain Python functions."""

from __future__ import annotations

import math

import torch

import course
from autograder.submissions import Mutant
from tools.build_notebooks import TEXT_DIR, parse


def _namespace() -> dict:
    return {"torch": torch, "math": math, "course": course, "__name__": "solution"}


def solution_cells(slug: str) -> dict[str, str]:
    """grade_id -> code of each solution cell in notebooks/<slug>.py."""
    cells = parse((TEXT_DIR / f"{slug}.py").read_text(), slug)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in cells if c.metadata.get("nbgrader", {}).get("solution")}


def solutions(slug: str) -> dict:
    """Execute the notebook's solution cells, in order, and return what they define."""
    ns = _namespace()
    for code in solution_cells(slug).values():
        exec(compile(code, f"<solution {slug}>", "exec"), ns)
    return ns


def mutant_functions(mutant: Mutant) -> dict:
    """The source solutions with the mutant's cells executed on top."""
    ns = solutions(mutant.assignment)
    for grade_id, code in mutant.cells.items():
        exec(compile(code, f"<mutant {mutant.name}:{grade_id}>", "exec"), ns)
    return ns
