"""Sample submissions: mutants of the source solutions, each carrying one known bug per exercise.

A mutant lives in ``tests/submissions/<assignment>/<name>.py``:

    # Mutant: dw placed transposed and db summed over the wrong axis.
    # expect: test_linear_backward transpose
    # expect: test_linear_bias_backward broadcast-axis
    # %% linear_backward
    def linear_backward(x, w, dy):
        ...
    # %% linear_bias_backward
    def linear_bias_backward(x, w, b, dy):
        ...

Each ``# %% <grade_id>`` block replaces that solution cell of the source notebook;
every other exercise keeps its correct solution. Each ``expect`` line names a test
cell that must score zero and the diagnosis class its output must show. One file may
break several exercises (one bug each), which keeps the number of notebooks to grade small.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS_DIR = ROOT / "tests" / "submissions"
SOURCE_DIR = ROOT / "source"

_EXPECT = re.compile(r"^# expect: (?P<test>\S+) (?P<cls>\S+)\s*$")
_CELL = re.compile(r"^# %% (?P<grade_id>\S+)\s*$")


@dataclass
class Mutant:
    path: Path
    assignment: str
    name: str
    description: str
    expect: dict[str, str]  # test grade_id -> diagnosis class
    cells: dict[str, str]  # solution grade_id -> replacement code


def read_mutant(path: Path) -> Mutant:
    description, expect, cells, current = "", {}, {}, None
    for line in path.read_text().splitlines():
        if current is None:
            if line.startswith("# Mutant:"):
                description = line.removeprefix("# Mutant:").strip()
                continue
            m = _EXPECT.match(line)
            if m:
                expect[m.group("test")] = m.group("cls")
                continue
        m = _CELL.match(line)
        if m:
            current = m.group("grade_id")
            cells[current] = []
        elif current is not None:
            cells[current].append(line)
        elif line.strip():
            raise ValueError(f"{path}: unexpected line before the first '# %%' block: {line!r}")
    if not expect or not cells:
        raise ValueError(f"{path}: a mutant needs at least one '# expect:' line and one '# %%' block")
    return Mutant(path, path.parent.name, path.stem, description, expect,
                  {k: "\n".join(v).strip("\n") for k, v in cells.items()})


def mutants(assignment: str) -> list[Mutant]:
    return [read_mutant(p) for p in sorted((SUBMISSIONS_DIR / assignment).glob("*.py"))]


def sample_assignments() -> list[str]:
    """Assignments with sample mutants: the folders of ``tests/submissions/`` named after one in ``source/``
    (``tests/submissions/hostile/`` holds the grader's attack fixtures, not mutants)."""
    return sorted(p.name for p in SUBMISSIONS_DIR.iterdir() if p.is_dir() and (SOURCE_DIR / p.name).is_dir())


def source_notebook(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(SOURCE_DIR / assignment / f"{assignment}.ipynb", as_version=4)


def build_submission(assignment: str, cells: dict[str, str]) -> nbformat.NotebookNode:
    """The source notebook with the given solution cells replaced (a student who got the rest right)."""
    nb = copy.deepcopy(source_notebook(assignment))
    ids = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    for grade_id, code in cells.items():
        cell = ids.get(grade_id)
        if cell is None or not cell.metadata["nbgrader"].get("solution"):
            raise KeyError(f"{assignment} has no solution cell {grade_id!r}")
        cell.source = code
    return nb
