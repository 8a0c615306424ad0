"""The Triton kernels and host code of a source notebook, loaded without running its experiments.

``load("05_attention_recompute")`` executes the code cells of
``source/05_attention_recompute/05_attention_recompute.ipynb`` — the instructor notebook, with
its solutions — in a fresh namespace and returns it. Of each cell it keeps only the statements
that define something: imports, function and class definitions (the kernels, the host functions
that launch them, the autograd.Functions), and assignments of a literal or a dotted name to
UPPER_CASE constants (``MAX_PROGRAMS = 4``, ``BLOCK = 32``, ``F64 = torch.float64``). Test cells (nbgrader ``grade: true``) are
left out whole, and so is every statement that computes, plots, checks or launches; a definition
that needs a value one of them computed (05's ``def backward_cost(strategy, N=N)``) fails with a
NameError and is left out too. A constant the notebook computes at run time (05's
``USE_DELTA_KERNEL``, from a check) is the caller's to set.

Each cell is compiled under its own file name, registered with ``linecache``, so that
``@triton.jit`` reads a kernel's source the way it does in Jupyter.

``import course`` turns on Triton's CPU interpreter on a machine without CUDA, even over
TRITON_INTERPRET=0, and the interpreter decides at ``@triton.jit`` time. The loader imports
``course`` first, quietly, and puts TRITON_INTERPRET back as it was, so the notebook's kernels
are defined as ``kernels``' own were: compiled under the compile check, which runs with
TRITON_INTERPRET=0 (``kernels/_device.py``).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import linecache
import os
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "source"


def _import_course_without_interpreter() -> None:
    before = os.environ.get("TRITON_INTERPRET")
    with contextlib.redirect_stdout(io.StringIO()):
        import course  # noqa: F401  (prints where kernels run; here they run nowhere)
    if before is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = before


def _constant(node: ast.expr) -> bool:
    """A literal (``4``, ``-1e-5``, ``"x"``) or a dotted name (``torch.float64``): nothing that computes."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return isinstance(node, ast.Name) or _constant(node.value)
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


def _defines(stmt: ast.stmt) -> bool:
    """Whether a top-level statement only defines something (see the module docstring)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
        return True
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return all(isinstance(t, ast.Name) and t.id.isupper() for t in targets) and _constant(stmt.value)
    return False


def definitions(cell_source: str) -> list[ast.Module]:
    """The statements of one code cell that ``load`` keeps, one module each."""
    return [ast.Module(body=[s], type_ignores=[]) for s in ast.parse(cell_source).body if _defines(s)]


def load(assignment: str) -> dict:
    """The namespace of ``source/<assignment>/<assignment>.ipynb`` after its definitions ran."""
    path = SOURCE / assignment / f"{assignment}.ipynb"
    cells = json.loads(path.read_text())["cells"]
    _import_course_without_interpreter()
    namespace = {"__name__": f"notebook_{assignment}"}
    for number, cell in enumerate(cells):
        if cell["cell_type"] != "code" or cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        source = "".join(cell["source"])
        filename = f"<{path.relative_to(SOURCE.parent)} cell {number}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        for statement in definitions(source):
            try:
                exec(compile(statement, filename, "exec"), namespace)
            except NameError:
                continue  # it needs a value an experiment computed: not host code
    return namespace
