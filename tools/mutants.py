"""Sample submissions: mutants of the source solutions, each carrying one known bug per exercise.

A mutant lives in ``tests/submissions/<assignment>/<name>.py``:

    # Mutant: dw placed transposed and db summed over the wrong axis.
    # expect: test_linear_backward transpose
    # expect: test_linear_bias_backward broadcast-axis
    # %% linear_backward
    def linear_backward(x, w, dy):
        ...
    # %% TritonLayerNorm layernorm_bwd_kernel
    @triton.jit
    def layernorm_bwd_kernel(...):
        ...

A ``# %% <grade_id>`` block replaces that solution cell of the source notebook; a
``# %% <grade_id> <name>`` block replaces only the top-level definition ``<name>`` (a
function, a class or an assignment, decorators included) inside that cell, so a mutant
of a long cell holds its one bug and nothing else. Every other exercise keeps its correct
solution. Each ``expect`` line names a test
cell that must score zero and the diagnosis class its output must show. One file may
break several exercises (one bug each), which keeps the number of notebooks to grade small.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS_DIR = ROOT / "tests" / "submissions"
SOURCE_DIR = ROOT / "source"

_EXPECT = re.compile(r"^# expect: (?P<test>\S+) (?P<cls>\S+)\s*$")
_CELL = re.compile(r"^# %% (?P<grade_id>\S+)(?: (?P<name>[A-Za-z_]\w*))?\s*$")


@dataclass
class Mutant:
    path: Path
    assignment: str
    name: str
    description: str
    expect: dict[str, str]  # test grade_id -> diagnosis class
    cells: dict[str, str]  # solution grade_id -> the cell's code with the mutant's blocks in place
    replaced: dict[str, tuple[str, ...]] = field(default_factory=dict)  # solution grade_id -> the definitions a block replaces (() = the whole cell)


def read_mutant(path: Path) -> Mutant:
    description, expect, blocks, current = "", {}, {}, None
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
            current = (m.group("grade_id"), m.group("name"))
            if current in blocks:
                raise ValueError(f"{path}: two blocks replace {' '.join(filter(None, current))}")
            blocks[current] = []
        elif current is not None:
            blocks[current].append(line)
        elif line.strip():
            raise ValueError(f"{path}: unexpected line before the first '# %%' block: {line!r}")
    if not expect or not blocks:
        raise ValueError(f"{path}: a mutant needs at least one '# expect:' line and one '# %%' block")
    assignment = path.parent.name
    cells: dict[str, str] = {}
    replaced: dict[str, tuple[str, ...]] = {}
    for (grade_id, name), lines in blocks.items():
        code = "\n".join(lines).strip("\n")
        if name is None:
            if grade_id in cells:
                raise ValueError(f"{path}: {grade_id} is replaced whole and in parts")
            cells[grade_id], replaced[grade_id] = code, ()
            continue
        if replaced.get(grade_id) == ():
            raise ValueError(f"{path}: {grade_id} is replaced whole and in parts")
        original = cells.get(grade_id) or solution_cell(assignment, grade_id)
        cells[grade_id] = replace_definition(original, name, code, where=f"{path.name}: {grade_id}")
        replaced[grade_id] = (*replaced.get(grade_id, ()), name)
    return Mutant(path, assignment, path.stem, description, expect, cells, replaced)


def replace_definition(cell: str, name: str, code: str, where: str = "") -> str:
    """``cell`` with its top-level definition of ``name`` (decorators included) replaced by ``code``."""
    for node in ast.parse(cell).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defines = node.name == name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defines = any(isinstance(t, ast.Name) and t.id == name for t in targets)
        else:
            defines = False
        if defines:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            lines = cell.splitlines()
            return "\n".join(lines[:first - 1] + code.splitlines() + lines[node.end_lineno:])
    raise ValueError(f"{where}: the cell defines no {name!r} at its top level")


def mutants(assignment: str) -> list[Mutant]:
    return [read_mutant(p) for p in sorted((SUBMISSIONS_DIR / assignment).glob("*.py"))]


def sample_assignments() -> list[str]:
    """Assignments with sample mutants: the folders of ``tests/submissions/`` named after one in ``source/``
    (``tests/submissions/hostile/`` holds the grader's attack fixtures, not mutants)."""
    return sorted(p.name for p in SUBMISSIONS_DIR.iterdir() if p.is_dir() and (SOURCE_DIR / p.name).is_dir())


def source_notebook(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(SOURCE_DIR / assignment / f"{assignment}.ipynb", as_version=4)


def solution_cell(assignment: str, grade_id: str) -> str:
    """The code of one solution cell of the source notebook."""
    for cell in source_notebook(assignment).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id") == grade_id and meta.get("solution"):
            return cell.source
    raise KeyError(f"{assignment} has no solution cell {grade_id!r}")


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
