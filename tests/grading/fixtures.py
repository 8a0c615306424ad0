"""Hostile submissions: notebooks built from ``tests/submissions/hostile/*.py``, each with its expected rows.

A fixture file reads like a mutant (``tools.mutants``) with more ways to bend the
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
    # %% metadata:linear_backward     that cell's nbgrader metadata becomes the JSON below (any type)
    # %% cell-after:test_x            a new code cell after that one; a first line
                                      # nbgrader: {JSON} gives it that nbgrader metadata
    # %% raw                          the file's text is what follows, verbatim

The base is the assignment's source notebook (a student who solved everything), so every
exercise a fixture leaves alone must score full marks. In code, ``@@COURSE@@`` and
``@@ASSIGNMENT@@`` become the course folder being graded and the assignment: an attack that
knows exactly where the instructor's files are.

How the submission reaches the submissions folder (the attacks on the intake), in the header:

    # name: 李雷                        the student's folder (or zip, without .zip); default: the file's stem
    # student: <id>                     the id its rows must have; default: the name
    # delivery: folder                  (default) DIR/<name>/<ASSIGNMENT>.ipynb, the notebook
    # delivery: fifo                    ... that path is a named pipe
    # delivery: device                  ... that path is a character device (/dev/zero's); needs root
    # delivery: symlink TARGET          ... that path is a symbolic link to TARGET
    # delivery: folder-symlink TARGET   DIR/<name> is a symbolic link to TARGET
    # delivery: zip                     DIR/<name>.zip, holding the members below (default: the notebook
                                        as <ASSIGNMENT>.ipynb)
    # member: PATH                      the notebook, at PATH in the zip
    # member: PATH text WORDS           the text WORDS
    # member: PATH zeros BYTES          BYTES zero bytes, deflated (a zip bomb)
    # member: PATH files N              N empty members, PATH with {i} numbered 0..N-1
    # needs: root (why)                 only graded where the test runs as root

TARGET and PATH take the same placeholders. Several fixtures may name the same student (a
collision): each states the rows that one student gets.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from tools.mutants import ROOT

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
    folder: str = ""  # the student's folder or zip name (default: name)
    student_id: str = ""  # the id its rows must have (default: the folder)
    delivery: tuple[str, str] = ("folder", "")  # (kind, argument)
    members: list[tuple[str, str, str]] = field(default_factory=list)  # a zip's (path, kind, argument)
    needs_root: bool = False

    @property
    def student(self) -> str:
        return self.student_id or self.folder or self.name

    def expected(self, test_ids: list[str]) -> dict[str, Expect]:
        out = {}
        for e in self.expects:
            for t in test_ids if e.test == "*" else [e.test]:
                out[t] = e
        return {t: out.get(t, Expect(t, True)) for t in test_ids}


def read(path: Path) -> Hostile:
    description, assignment, expects, blocks, needs_full = "", "", [], [], False
    intake = {"folder": "", "student_id": "", "delivery": ("folder", ""), "members": [], "needs_root": False}
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
        elif line.startswith("# needs: root"):
            intake["needs_root"] = True
        elif line.startswith("# name:"):
            intake["folder"] = line.removeprefix("# name:").strip()
        elif line.startswith("# student:"):
            intake["student_id"] = line.removeprefix("# student:").strip()
        elif line.startswith("# delivery:"):
            kind, _, arg = line.removeprefix("# delivery:").strip().partition(" ")
            if kind not in ("folder", "fifo", "device", "symlink", "folder-symlink", "zip"):
                raise ValueError(f"{path}: unknown delivery {kind!r}")
            intake["delivery"] = (kind, arg.strip())
        elif line.startswith("# member:"):
            member, kind, arg = (line.removeprefix("# member:").strip().split(" ", 2) + ["notebook", ""])[:3]
            if kind not in ("notebook", "text", "zeros", "files"):
                raise ValueError(f"{path}: unknown member kind {kind!r}")
            intake["members"].append((member, kind, arg))
        elif line.startswith("# assignment:"):
            assignment = line.removeprefix("# assignment:").strip()
        elif (e := _EXPECT.match(line)):
            cls = e.group("cls") or ""
            expects.append(Expect(e.group("test"), e.group("score") == "full", "" if cls == "-" else cls,
                                  (e.group("reason") or "").strip()))
    if not assignment or not expects:
        raise ValueError(f"{path}: a hostile fixture needs '# assignment:' and '# expect:' lines")
    if intake["members"] and intake["delivery"][0] != "zip":
        raise ValueError(f"{path}: '# member:' lines need '# delivery: zip'")
    return Hostile(path.stem, assignment, description, expects, [(w, "\n".join(c)) for w, c in blocks], needs_full,
                   **intake)


def fixtures() -> list[Hostile]:
    return [read(p) for p in sorted(HOSTILE_DIR.glob("*.py"))]


def _source(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)


def _index(nb, grade_id: str) -> int:
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader")
        if isinstance(meta, dict) and meta.get("grade_id") == grade_id:
            return i
    raise KeyError(grade_id)


def _filler(h: Hostile, course: Path):
    def fill(code: str) -> str:
        return code.replace("@@COURSE@@", str(course)).replace("@@ASSIGNMENT@@", h.assignment)
    return fill


def write(h: Hostile, path: Path, course: Path) -> None:
    """Write the fixture's notebook to ``path``, with its placeholders filled in for ``course``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text(h, course), encoding="utf-8")


def text(h: Hostile, course: Path) -> str:
    """The fixture's notebook file, as text."""
    fill = _filler(h, course)
    raw = [code for what, code in h.blocks if what == "raw"]
    if raw:
        return fill(raw[0]) + "\n"
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
        elif what.startswith("metadata:"):
            nb.cells[_index(nb, what.split(":", 1)[1])].metadata["nbgrader"] = json.loads(code)
        elif what.startswith("cell-after:"):
            first, _, rest = code.partition("\n")
            meta = {"nbgrader": json.loads(first.removeprefix("# nbgrader:"))} if first.startswith("# nbgrader:") else {}
            nb.cells.insert(_index(nb, what.split(":", 1)[1]) + 1, nbformat.v4.new_code_cell(code, metadata=meta))
        else:
            nb.cells[_index(nb, what)].source = code
    return nbformat.writes(nb)


def deliver(h: Hostile, submissions: Path, course: Path) -> None:
    """Put the fixture's submission into the folder ``submissions`` the way its ``delivery`` says."""
    fill = _filler(h, course)
    kind, arg = h.delivery
    folder = submissions / (h.folder or h.name)
    notebook = folder / f"{h.assignment}.ipynb"
    if kind in ("fifo", "device", "symlink"):
        folder.mkdir(parents=True)
    if kind == "folder":
        write(h, notebook, course)
    elif kind == "fifo":
        os.mkfifo(notebook)
    elif kind == "device":
        os.mknod(notebook, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    elif kind == "symlink":
        notebook.symlink_to(fill(arg))
    elif kind == "folder-symlink":
        submissions.mkdir(parents=True, exist_ok=True)
        folder.symlink_to(fill(arg))
    else:
        submissions.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(folder.with_name(folder.name + ".zip"), "w", zipfile.ZIP_DEFLATED) as z:
            for path, what, value in h.members or [(f"{h.assignment}.ipynb", "notebook", "")]:
                path = fill(path)
                if what == "files":
                    for i in range(int(value)):
                        z.writestr(path.replace("{i}", str(i)), b"")
                    continue
                info = zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0))  # as written: ZipFile.write would clean the path
                info.compress_type = zipfile.ZIP_DEFLATED
                if what == "zeros":
                    with z.open(info, "w", force_zip64=True) as out:
                        for left in range(int(value), 0, -(1 << 20)):
                            out.write(bytes(min(left, 1 << 20)))
                else:
                    z.writestr(info, text(h, course) if what == "notebook" else fill(value))
