"""Hostile submissions: notebooks built from ``tests/submissions/hostile/*.py``, each with its expected rows.

A fixture file reads like a mutant (``autograder.submissions``) with more ways to bend the
notebook:

    # Hostile: what it tries.
    # assignment: 01_matmul_from_shapes
    # expect: test_linear_backward zero tampering        (zero, and the diagnosis class)
    # expect: test_reduce_to_shape zero - kernel died    (zero, no diagnosis, the reason starts so)
    # expect: * full                                      (every test cell)
    # needs: full-isolation (why)                         (only graded where the sandbox has namespaces)
    # %% linear_backward              replace this solution cell's code
    # %% duplicate:linear_backward    paste a copy of that cell above it, with the code below
    # %% delete:test_x                delete that cell
    # %% notebook:00_vjp_contract     start from another assignment's solved notebook
    # %% raw                          the file's text is what follows, verbatim

The base is the assignment's source notebook (a student who solved everything), so every
exercise a fixture leaves alone must score full marks. In code, ``@@COURSE@@`` and
``@@ASSIGNMENT@@`` become the course folder being graded and the assignment: an attack that
knows exactly where the instructor's files are.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.submissions import ROOT

HOSTILE_DIR = ROOT / "tests" / "submissions" / "hostile"
_EXPECT = re.compile(r"^# expect: (?P<test>\S+) (?P<score>full|zero)(?: (?P<cls>\S+))?(?: (?P<reason>.+))?\s*$")
_BLOCK = re.compile(r"^# %% (?P<what>\S+)\s*$")


@dataclass
class Expect:
    test: str  # a test grade_id, or "*"
    full: bool
    diagnosis: str = ""  # "" for none
    reason: str = ""  # the reason must start with this


@dataclass
class Hostile:
    name: str
    assignment: str
    description: str
    expects: list[Expect]
    blocks: list[tuple[str, str]] = field(default_factory=list)  # (what, code)
    needs_full_isolation: bool = False  # the attack holds only against the namespaced sandbox

    def expected(self, test_ids: list[str]) -> dict[str, Expect]:
        out = {}
        for e in self.expects:
            for t in test_ids if e.test == "*" else [e.test]:
                out[t] = e
        return {t: out.get(t, Expect(t, True)) for t in test_ids}


def read(path: Path) -> Hostile:
    description, assignment, expects, blocks, needs_full = "", "", [], [], False
    for line in path.read_text().splitlines():
        m = _BLOCK.match(line)
        if m:
            blocks.append([m.group("what"), []])
        elif blocks:
            blocks[-1][1].append(line)
        elif line.startswith("# Hostile:"):
            description = line.removeprefix("# Hostile:").strip()
        elif line.startswith("# needs: full-isolation"):
            needs_full = True
        elif line.startswith("# assignment:"):
            assignment = line.removeprefix("# assignment:").strip()
        elif (e := _EXPECT.match(line)):
            cls = e.group("cls") or ""
            expects.append(Expect(e.group("test"), e.group("score") == "full", "" if cls == "-" else cls,
                                  (e.group("reason") or "").strip()))
    if not assignment or not expects:
        raise ValueError(f"{path}: a hostile fixture needs '# assignment:' and '# expect:' lines")
    return Hostile(path.stem, assignment, description, expects, [(w, "\n".join(c)) for w, c in blocks], needs_full)


def fixtures() -> list[Hostile]:
    return [read(p) for p in sorted(HOSTILE_DIR.glob("*.py"))]


def _source(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)


def _index(nb, grade_id: str) -> int:
    for i, cell in enumerate(nb.cells):
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return i
    raise KeyError(grade_id)


def write(h: Hostile, path: Path, course: Path) -> None:
    """Write the fixture's submission to ``path``, with its placeholders filled in for ``course``."""
    def fill(code: str) -> str:
        return code.replace("@@COURSE@@", str(course)).replace("@@ASSIGNMENT@@", h.assignment)

    path.parent.mkdir(parents=True, exist_ok=True)
    raw = [code for what, code in h.blocks if what == "raw"]
    if raw:
        path.write_text(fill(raw[0]) + "\n")
        return
    nb = copy.deepcopy(_source(h.assignment))
    for what, code in h.blocks:
        code = fill(code).strip("\n")
        if what.startswith("notebook:"):
            nb = copy.deepcopy(_source(what.split(":", 1)[1]))
        elif what.startswith("delete:"):
            del nb.cells[_index(nb, what.split(":", 1)[1])]
        elif what.startswith("duplicate:"):
            i = _index(nb, what.split(":", 1)[1])
            twin = copy.deepcopy(nb.cells[i])
            twin["id"] = f"{twin.get('id', 'cell')}-copy"
            if code:
                twin.source = code
            nb.cells.insert(i, twin)
        else:
            nb.cells[_index(nb, what)].source = code
    nbformat.write(nb, path)
