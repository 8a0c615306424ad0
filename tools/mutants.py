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
``# %% <grade_id> <name>`` block replaces only the definition ``<name>`` (a function, a
class or an assignment, decorators included; ``Class.method`` for a method) inside that
cell. A block whose lines all start with ``-`` or ``+`` is an edit instead: each run of
``-`` lines, found exactly once in the cell (or in ``<name>``), becomes the ``+`` lines
after it. So a mutant of a long kernel holds its one bug and nothing else:

    # %% flash_fwd_kernel flash_fwd_kernel
    -        s = tl.dot(q, tl.trans(k)) * scale
    +        s = tl.dot(q, tl.trans(k))

Every other exercise keeps its correct solution. Each ``expect`` line names a test cell
that must score zero and the diagnosis class its output must show. One file may break
several exercises (one bug each), which keeps the number of notebooks to grade small.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.nbgrader_cli import ROOT, assignments

SUBMISSIONS_DIR = ROOT / "tests" / "submissions"
SOURCE_DIR = ROOT / "source"

_EXPECT = re.compile(r"^# expect: (?P<test>\S+) (?P<cls>\S+)\s*$")
_CELL = re.compile(r"^# %% (?P<grade_id>\S+)(?: (?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))?\s*$")


@dataclass
class Mutant:
    path: Path
    assignment: str
    name: str
    description: str
    expect: dict[str, str]  # test grade_id -> diagnosis class
    cells: dict[str, str]  # solution grade_id -> the cell's code with the mutant's blocks in place
    # solution grade_id -> the definitions a block replaces (() = the whole cell)
    replaced: dict[str, tuple[str, ...]] = field(default_factory=dict)


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
        where = f"{path.name}: {' '.join(filter(None, (grade_id, name)))}"
        if name is None and not is_edit(code):
            if grade_id in cells:
                raise ValueError(f"{path}: {grade_id} is replaced whole and in parts")
            cells[grade_id], replaced[grade_id] = code, ()
            continue
        if replaced.get(grade_id) == ():
            raise ValueError(f"{path}: {grade_id} is replaced whole and in parts")
        original = cells.get(grade_id) or solution_cell(assignment, grade_id)
        if name is None:
            cells[grade_id] = apply_edit(original, code, where)
        else:
            cells[grade_id] = replace_definition(original, name, code, where)
        replaced[grade_id] = (*replaced.get(grade_id, ()), name or "(edit)")
    return Mutant(path, assignment, path.stem, description, expect, cells, replaced)


def is_edit(code: str) -> bool:
    """A block whose every line starts with ``-`` or ``+`` edits lines instead of replacing them."""
    lines = [line for line in code.splitlines() if line.strip()]
    return bool(lines) and all(line[0] in "-+" for line in lines) and any(line[0] == "-" for line in lines)


def apply_edit(text: str, edit: str, where: str = "") -> str:
    """``text`` with each run of ``-`` lines (found exactly once) replaced by the ``+`` lines after it."""
    hunks: list[tuple[list[str], list[str]]] = []
    for line in edit.splitlines():
        if not line.strip():
            continue
        sign, body = line[0], line[1:]
        if sign == "-" and (not hunks or hunks[-1][1]):
            hunks.append(([], []))
        if not hunks:
            raise ValueError(f"{where}: an edit starts with the lines it removes ('-')")
        hunks[-1][0 if sign == "-" else 1].append(body)
    lines = text.splitlines()
    for old, new in hunks:
        at = [i for i in range(len(lines) - len(old) + 1) if lines[i:i + len(old)] == old]
        if len(at) != 1:
            raise ValueError(f"{where}: the lines to remove occur {len(at)} times, not once: {old[0]!r}")
        lines[at[0]:at[0] + len(old)] = new
    return "\n".join(lines)


def _defined_by(node: ast.stmt, name: str) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Name) and t.id == name for t in targets)
    return False


def replace_definition(cell: str, name: str, code: str, where: str = "") -> str:
    """``cell`` with its definition of ``name`` replaced by ``code``, or edited by it when ``code`` is an edit.

    ``name`` is top level (``kernel``) or a method (``TritonLayerNorm.backward``); the definition's
    decorators and the indented comments after its last statement (nbgrader's ``### END SOLUTION``)
    belong to it.
    """
    body, node = ast.parse(cell).body, None
    for part in name.split("."):
        node = next((n for n in body if _defined_by(n, part)), None)
        if node is None:
            raise ValueError(f"{where}: the cell defines no {name!r}")
        body = getattr(node, "body", [])
    lines = cell.splitlines()
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    last = node.end_lineno
    while last < len(lines) and lines[last].strip().startswith("#") and \
            len(lines[last]) - len(lines[last].lstrip()) > node.col_offset:
        last += 1
    span = "\n".join(lines[first - 1:last])
    new = apply_edit(span, code, where) if is_edit(code) else code
    return "\n".join(lines[:first - 1] + new.splitlines() + lines[last:])


def mutants(assignment: str) -> list[Mutant]:
    return [read_mutant(p) for p in sorted((SUBMISSIONS_DIR / assignment).glob("*.py"))]


def covering(found: list[Mutant]) -> list[Mutant]:
    """Few mutants that between them declare every diagnosis class the list declares: the one adding the most classes
    not yet covered first (ties in the list's order), until none is missing. In the list's order."""
    wanted = {cls for m in found for cls in m.expect.values()}
    chosen: list[Mutant] = []
    covered: set[str] = set()
    while covered != wanted:
        best = max(found, key=lambda m: len(set(m.expect.values()) - covered))  # max keeps the first of a tie
        chosen.append(best)
        covered |= set(best.expect.values())
    return [m for m in found if m in chosen]


def sample_assignments() -> list[str]:
    """Assignments with sample mutants: the folders of ``tests/submissions/`` named after one in ``source/``
    (``tests/submissions/hostile/`` holds the grader's attack fixtures, not mutants)."""
    return [a for a in assignments() if (SUBMISSIONS_DIR / a).is_dir()]


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
