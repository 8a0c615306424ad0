"""Find a class's submissions, refuse what must not be opened, and check each notebook before grading.

docs/grading.md, "Input: three layouts" (the layouts, the ids, the caps, what is never opened)
and "How a submission is graded", step 1 (the checks, the instructor's metadata given back).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import unicodedata
import zipfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .nbgrader_cli import assignments

MiB = 1 << 20
MAX_NOTEBOOK_BYTES = 64 * MiB  # a course notebook with its outputs is well under 1 MiB
MAX_FILES = 1000  # files in one submission: a student's folder (hidden entries aside) or the members of their zip
MAX_MEMBER_BYTES = 64 * MiB  # one member of a zip, unpacked
MAX_EXPANDED_BYTES = 256 * MiB  # a student's zip, unpacked, all members together
MAX_ARCHIVE_BYTES = 256 * MiB  # a student's zip file itself
MAX_EXPORT_MEMBERS = 100_000  # an LMS class export
MAX_NAME = 1024  # characters in a zip member's name
MAX_DEPTH = 16  # folders below a student's folder that are looked into
MAX_ID_BYTES = 200  # a student id is a folder name: 255 bytes at most on common file systems

RESERVED = ("submitted", "autograded", "feedback", "release", "source")  # nbgrader's folders, never students


# ---------------------------------------------------------------------------
# Student ids


def _escaped(ch: str) -> str:
    try:
        data = ch.encode("utf-8", "surrogateescape")  # an undecodable byte of a file name comes back as itself
    except UnicodeEncodeError:
        data = ch.encode("utf-8", "surrogatepass")
    return "".join(f"~{b:02X}" for b in data)


def safe_student_id(name: str) -> str:
    """The student id for a folder, zip or LMS name (docs/grading.md, "Student ids"): two different names never
    give one id (NFC variants aside), so a collision is a real one."""
    name = unicodedata.normalize("NFC", name)
    out = [_escaped(ch) if ch in "~%*?[]/" or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") else ch
           for ch in name]
    # nbgrader strips surrounding whitespace and surrounding quotes from --student, and skips hidden folders.
    lead = next((i for i, c in enumerate(out) if not c.isspace()), len(out))
    trail = next((i for i in reversed(range(len(out))) if not out[i].isspace()), -1)
    out = [_escaped(c) if i < lead or i > trail else c for i, c in enumerate(out)]
    if out and out[0] in (".", "'", '"'):
        out[0] = _escaped(out[0])
    sid = "".join(out)
    if len(sid.encode()) > MAX_ID_BYTES:  # no surrogate is left: they were escaped above
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        sid = f"{sid.encode()[:MAX_ID_BYTES - 11].decode('utf-8', 'ignore')}~{digest}"
    return sid


def _shown(text: str, limit: int = 60) -> str:
    """A file or member name as a reason may quote it: letters, digits and ``._-/~ `` only, the rest ``?``."""
    text = "".join(c if c.isalnum() or c in "._-/~ " else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + "…"


_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a named pipe", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _unsafe_file(what: str, mode: int) -> str:
    verb = "followed" if stat.S_ISLNK(mode) else "opened"
    return f"unsafe file: {what} is {_kind(mode)}, not a regular file (never {verb})"


@dataclass
class Submission:
    """One student's submission of one assignment, from where it was found to the seed it is graded with."""

    student: str
    path: Path | None  # the notebook file (a regular file); None when there is none to grade
    problem: str = ""  # why it cannot be graded: the reason its rows get
    origin: str = ""  # where it came from, for messages
    assignment: str = ""
    notebook: nbformat.NotebookNode | None = None  # read and checked (check_notebook): what is graded
    seed: int | None = None  # its hidden inputs' seed (None: it never runs)


class InstructorError(Exception):
    """Something the instructor must fix (the input, the options, the course, shards to merge); the message says what."""


# ---------------------------------------------------------------------------
# Finding the submissions


def _entries(folder: Path) -> list[os.DirEntry]:
    with os.scandir(folder) as it:
        return sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)


def collect(assignment: str, submissions: Path, staging: Path, course: Path,
            student_regexp: str | None = None, exports: tuple[str, ...] | list[str] = ()) -> list[Submission]:
    """Every student's submission in ``submissions`` (any layout), sorted by student; ``exports``: the LMS class
    exports among its zips (every other zip is one student's). Notebooks read out of zips go under ``staging``."""
    if not submissions.is_dir():
        raise InstructorError(f"--submissions {submissions} is not a folder. Give the folder that holds one entry per "
                              "student (DIR/<student>/<assignment>.ipynb, nbgrader's submitted/ layout, or .zip files).")
    export_names = set()
    for name in exports:
        path = submissions / Path(name).name
        if not (os.path.isfile(path) and not os.path.islink(path) and path.name.lower().endswith(".zip")):
            raise InstructorError(f"--lms-export {name}: no such .zip file in {submissions} (name a class export "
                                  "that lies in the --submissions folder).")
        export_names.add(path.name)
    if student_regexp and not export_names:
        raise InstructorError("--student-regexp reads the file names inside an LMS class export: name the export "
                              "with --lms-export FILE (a zip per student is always that student's).")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    others = set(assignments(course)) - {assignment}
    found: dict[str, list[Submission]] = defaultdict(list)
    submitted = submissions / "submitted"
    base = submitted if os.path.isdir(submitted) and not os.path.islink(submitted) else submissions
    for folder in dict.fromkeys((base, submissions)):  # students' folders lie in base, zips in DIR
        for entry in _entries(folder):
            mode = entry.stat(follow_symlinks=False).st_mode
            if folder == submissions and entry.name.lower().endswith(".zip") and not stat.S_ISDIR(mode):
                if entry.name in export_names:
                    for sid, sub in _from_export(Path(entry.path), assignment, student_regexp, staging).items():
                        found[sid].append(sub)
                    continue
                name, origin = entry.name[:-4], f"'{_shown(entry.name)}'"
                path, problem = ((None, _unsafe_file("the submission", mode)) if not stat.S_ISREG(mode)
                                 else _from_student_zip(Path(entry.path), assignment, others, staging))
            elif folder != base or entry.name in RESERVED:
                continue
            elif stat.S_ISDIR(mode):
                name, origin = entry.name, f"the folder '{_shown(entry.name)}'"
                path, problem = _from_folder(Path(entry.path), assignment, others)
            elif stat.S_ISLNK(mode) and os.path.isdir(entry.path):  # looked at, never entered
                name, origin = entry.name, f"the link '{_shown(entry.name)}'"
                path, problem = None, _unsafe_file("the submission", mode)
            else:
                continue
            sid = safe_student_id(name)
            found[sid].append(Submission(sid, path, problem, origin))
    if not found:
        loose = [e for e in _entries(submissions) if e.name.endswith(".ipynb") and e.is_file(follow_symlinks=False)]
        hint = (f" It holds {len(loose)} notebook(s) directly; put each in a folder named after its student "
                f"({submissions}/<student>/{assignment}.ipynb).") if loose else ""
        raise InstructorError(f"no submissions found in {submissions}.{hint}")
    out = []
    for sid, subs in sorted(found.items()):
        origins = ", ".join(s.origin for s in subs[:3]) + (", …" if len(subs) > 3 else "")
        out.append(subs[0] if len(subs) == 1 else Submission(
            sid, None, f"duplicate student: {len(subs)} submissions have the id '{_shown(sid)}' ({origins}); none is "
                       "graded: rename all but one", origins))
    return out


def choose_notebook(paths: list[str], assignment: str) -> tuple[str | None, str]:
    """The one notebook of ``assignment`` among a submission's notebooks (relative paths), or why there is none
    (the order of preference: docs/grading.md, "Input: three layouts")."""
    target = f"{assignment}.ipynb"
    for candidate in (target, f"{assignment}/{target}"):
        if candidate in paths:
            return candidate, ""
    named = [p for p in paths if p.rsplit("/", 1)[-1] == target or p.endswith("_" + target)]
    for found, what in ((named, f"named {target}"), (paths, f"and none named {target}")):
        if len(found) == 1:
            return found[0], ""
        if found:
            shown = ", ".join(f"'{_shown(p)}'" for p in found[:3])
            return None, f"ambiguous submission: {len(found)} notebooks {what} ({shown}); none is graded"
    return None, f"missing notebook: no {target} in the submission"


def _is_notebook_name(path: str, others: set[str]) -> bool:
    """A notebook that may be this assignment's: not hidden, not a checkpoint, not named after another assignment."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return (bool(parts) and parts[-1].endswith(".ipynb") and not any(p.startswith(".") or p == "__MACOSX" for p in parts)
            and parts[-1][:-len(".ipynb")] not in others)


def _from_folder(folder: Path, assignment: str, others: set[str]) -> tuple[Path | None, str]:
    """The student's notebook in ``folder``, or why there is none; hidden entries skipped, links never entered."""
    notebooks: dict[str, int] = {}  # relative path -> lstat mode
    count, stack = 0, [(str(folder), "", 0)]
    while stack:
        where, rel, depth = stack.pop()
        try:
            it = os.scandir(where)
        except OSError:  # an unreadable folder holds nothing to grade
            continue
        with it:
            for e in it:
                if e.name.startswith("."):
                    continue
                count += 1
                if count > MAX_FILES:
                    return None, f"too many files: more than {MAX_FILES} in the student's folder"
                mode = e.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    if depth < MAX_DEPTH:
                        stack.append((e.path, f"{rel}{e.name}/", depth + 1))
                elif _is_notebook_name(rel + e.name, others):
                    notebooks[rel + e.name] = mode
    chosen, problem = choose_notebook(sorted(notebooks), assignment)
    if chosen is None:
        return None, problem
    if not stat.S_ISREG(notebooks[chosen]):
        return None, _unsafe_file(_shown(chosen), notebooks[chosen])
    return folder / chosen, ""


# ---------------------------------------------------------------------------
# Zips: checked from their directory, the one notebook read out alone


@contextlib.contextmanager
def _open_zip(path: Path, max_members: int, max_bytes: int | None):
    """(the zip at ``path``, "") if it is a regular file (never a link) and a zip within the limits, else (None, why);
    the number of members is read from the end record before zipfile builds an object for each."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        yield None, f"unsafe file: the submission cannot be opened as a file ({exc.strerror})"
        return
    with os.fdopen(fd, "rb") as f:
        zf, problem = None, ""
        try:
            st = os.fstat(fd)
            end = zipfile._EndRecData(f) if stat.S_ISREG(st.st_mode) else None
            if not stat.S_ISREG(st.st_mode):
                problem = _unsafe_file("the submission", st.st_mode)
            elif max_bytes is not None and st.st_size > max_bytes:
                problem = (f"archive too large: the zip is {st.st_size / MiB:.0f} MiB, more than the "
                           f"{max_bytes // MiB} MiB allowed")
            elif end is None:
                problem = "malformed archive: not a zip file"
            elif end[zipfile._ECD_ENTRIES_TOTAL] > max_members:
                problem = (f"too many files: the zip holds {end[zipfile._ECD_ENTRIES_TOTAL]} members, more than the "
                           f"{max_members} allowed")
            else:
                zf = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError, EOFError, OSError) as exc:
            problem = f"malformed archive: not a readable zip file ({type(exc).__name__})"
        with contextlib.nullcontext() if zf is None else zf:
            yield zf, problem


def _member_problem(info: zipfile.ZipInfo) -> str:
    """Why this member makes its zip unsafe or too large, from the zip's directory alone; "" when it is fine."""
    name = info.filename
    if len(name) > MAX_NAME:
        return f"unsafe archive: a member's name is longer than {MAX_NAME} characters"
    parts = re.split(r"[/\\]", name)
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return f"unsafe archive: a member has an absolute path ('{_shown(name)}'); nothing was unpacked"
    if ".." in parts:
        return f"unsafe archive: a member's path leaves the archive ('{_shown(name)}'); nothing was unpacked"
    mode = info.external_attr >> 16
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        return f"unsafe archive: the member '{_shown(name)}' is {_kind(mode)}; nothing was unpacked"
    if info.file_size > MAX_MEMBER_BYTES:
        return (f"archive too large: '{_shown(name)}' unpacks to {info.file_size / MiB:.0f} MiB, more than the "
                f"{MAX_MEMBER_BYTES // MiB} MiB allowed for one file; nothing was unpacked")
    return ""


def _member_key(name: str) -> str:
    return "/".join(p for p in re.split(r"[/\\]", name) if p not in ("", "."))


def _notebooks(members, others: set[str], max_total: float) -> tuple[dict[str, zipfile.ZipInfo], str]:
    """{path: member} of the notebooks among ``members``, or why they make the zip unsafe or too large."""
    seen, total, notebooks = set(), 0, {}
    for info in members:
        problem = _member_problem(info)
        if problem:
            return {}, problem
        key = _member_key(info.filename)
        if key in seen:
            return {}, f"unsafe archive: two members named '{_shown(key)}'; nothing was unpacked"
        seen.add(key)
        total += info.file_size
        if total > max_total:
            return {}, (f"archive too large: the zip unpacks to more than {max_total // MiB} MiB; "
                        "nothing was unpacked")
        if not info.is_dir() and _is_notebook_name(key, others):
            notebooks[key] = info
    return notebooks, ""


def _read_out(zf: zipfile.ZipFile, notebooks: dict[str, zipfile.ZipInfo], assignment: str, staging: Path,
              where: str) -> tuple[Path | None, str]:
    """Choose the notebook as in a folder and write it, alone, into a new folder of ``staging``, counting its bytes."""
    chosen, problem = choose_notebook(sorted(notebooks), assignment)
    if chosen is None:
        return None, problem.replace("in the submission", where)
    info = notebooks[chosen]
    if info.flag_bits & 0x1:
        return None, f"malformed archive: '{_shown(info.filename)}' is encrypted"
    dest = Path(tempfile.mkdtemp(dir=staging)) / f"{assignment}.ipynb"
    try:
        with zf.open(info) as src, open(dest, "xb") as out:
            written = 0
            while chunk := src.read(MiB):
                written += len(chunk)
                if written > MAX_NOTEBOOK_BYTES:
                    raise OverflowError
                out.write(chunk)
        return dest, ""
    except OverflowError:
        problem = f"archive too large: the notebook unpacks to more than {MAX_NOTEBOOK_BYTES // MiB} MiB"
    except Exception as exc:  # noqa: BLE001 — zlib, bz2, lzma and zipfile raise several kinds for one bad stream
        problem = f"malformed archive: '{_shown(info.filename)}' cannot be unpacked ({type(exc).__name__})"
    dest.unlink(missing_ok=True)
    return None, problem


def _from_student_zip(path: Path, assignment: str, others: set[str], staging: Path) -> tuple[Path | None, str]:
    """One student's zip: every member checked, then its notebook read out."""
    with _open_zip(path, MAX_FILES, MAX_ARCHIVE_BYTES) as (zf, problem):
        if zf is None:
            return None, problem
        notebooks, problem = _notebooks(zf.infolist(), others, MAX_EXPANDED_BYTES)
        return (None, problem) if problem else _read_out(zf, notebooks, assignment, staging, "in the zip")


DEFAULT_EXPORT_REGEXP = r"^.*/(?P<student_id>[^/_]+)_(?:[^/]*_)?(?P<file_id>{assignment}\.ipynb)$"


def _from_export(path: Path, assignment: str, regexp: str | None, staging: Path) -> dict[str, Submission]:
    """An LMS class export: {student id: Submission}, each student's notebook chosen among the members whose
    ``extracted/<export name>/<member path>`` ``regexp`` matches with their id; others are left alone, with a note."""
    pattern = regexp or DEFAULT_EXPORT_REGEXP.replace("{assignment}", re.escape(assignment))
    with _open_zip(path, MAX_EXPORT_MEMBERS, None) as (zf, problem):
        if zf is None:
            raise InstructorError(f"--lms-export {path.name}: {problem}")
        mine: dict[str, list[zipfile.ZipInfo]] = defaultdict(list)
        for info in zf.infolist():
            key = _member_key(info.filename)
            if info.is_dir() or not _is_notebook_name(key, set()) or len(info.filename) > MAX_NAME:
                continue
            m = re.match(pattern, f"extracted/{path.name[:-4]}/{key}")
            sid = safe_student_id(m.group("student_id")) if m and m.groupdict().get("student_id") else ""
            if sid:
                mine[sid].append(info)
            elif key.endswith(f"{assignment}.ipynb"):
                print(f"note: {path.name}: no student id in '{_shown(key)}'; not graded", file=sys.stderr)
        out = {}
        for sid, members in mine.items():
            notebooks, problem = _notebooks(members, set(), math.inf)
            dest, problem = (None, problem) if problem else _read_out(zf, notebooks, assignment, staging,
                                                                      f"for this student in {path.name}")
            out[sid] = Submission(sid, dest, problem, f"'{_shown(sid)}' in '{_shown(path.name)}'")
    return out


# ---------------------------------------------------------------------------
# Checking a notebook before it is run


def grade_id_of(cell) -> str | None:
    meta = cell.get("metadata", {}).get("nbgrader") if isinstance(cell.get("metadata"), dict) else None
    grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
    return grade_id if isinstance(grade_id, str) and grade_id else None


def instructor_cells(nb: nbformat.NotebookNode) -> dict[str, dict]:
    """grade_id -> what grading takes from the instructor's cell: its type, its nbgrader metadata, whether it is a test."""
    out = {}
    for cell in nb.cells:
        grade_id = grade_id_of(cell)
        if grade_id and grade_id not in out:
            meta = dict(copy.deepcopy(cell.metadata["nbgrader"]), cell_type=cell.cell_type)
            out[grade_id] = {"cell_type": cell.cell_type, "nbgrader": meta,
                             "test": bool(meta.get("grade")) and not meta.get("solution") and bool(meta.get("locked"))}
    return out


def assignment_ids(course: Path) -> dict[str, dict[str, dict]]:
    """assignment -> its graded and locked cells (``instructor_cells``, by grade_id), from the course's source notebooks."""
    ids = {}
    for a in assignments(course):
        try:
            ids[a] = instructor_cells(nbformat.read(course / "source" / a / f"{a}.ipynb", as_version=4))
        except Exception:  # noqa: BLE001 — a broken source notebook is not this submission's problem
            continue
    return ids


def deduplicate(nb: nbformat.NotebookNode) -> None:
    """Keep the last cell of each grade_id, as nbgrader does; earlier copies and malformed metadata become plain
    cells, without an ``nbgrader`` key (nbgrader's DeduplicateIds leaves an empty dict, which breaks its restoring)."""
    seen = set()
    for cell in reversed(nb.cells):
        meta = cell.get("metadata", {})
        if "nbgrader" not in meta:
            continue
        grade_id = grade_id_of(cell)
        if grade_id is None or grade_id in seen:
            del meta["nbgrader"]
        else:
            seen.add(grade_id)


MISSING_TEST = "raise AssertionError('this test cell was missing from the submission')  # replaced by nbgrader"


def restore_instructor_cells(nb: nbformat.NotebookNode, theirs: dict[str, dict]) -> None:
    """Make the notebook's grading structure the instructor's (``theirs``: ``instructor_cells`` of the source;
    docs/grading.md, "How a submission is graded", step 1). nbgrader fills in a put-back test cell's source."""
    for cell in nb.cells:
        if "nbgrader" not in cell.metadata:
            continue
        mine = theirs.get(grade_id_of(cell))
        if mine is None:
            del cell.metadata["nbgrader"]
        else:
            cell.metadata["nbgrader"] = nbformat.from_dict(copy.deepcopy(mine["nbgrader"]))
    order = list(theirs)
    for k, grade_id in enumerate(order):
        where = {grade_id_of(c): i for i, c in enumerate(nb.cells)}
        if grade_id in where or not theirs[grade_id]["test"]:
            continue
        before = next((where[g] + 1 for g in reversed(order[:k]) if g in where),
                      next((where[g] for g in order[k + 1:] if g in where), len(nb.cells)))
        cell = nbformat.v4.new_code_cell(MISSING_TEST, metadata={
            "deletable": False, "editable": False, "nbgrader": copy.deepcopy(theirs[grade_id]["nbgrader"])})
        nb.cells.insert(before, cell)


def _read_regular(path: Path, limit: int) -> tuple[bytes | None, str]:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes; never follows a link, never blocks."""
    try:
        before = os.lstat(path)
        if not stat.S_ISREG(before.st_mode):
            return None, _unsafe_file(_shown(path.name), before.st_mode)
        if before.st_size > limit:
            return None, f"malformed notebook: {before.st_size >> 20} MiB, larger than the {limit >> 20} MiB allowed"
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            now = os.fstat(f.fileno())
            if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
                return None, _unsafe_file(_shown(path.name), now.st_mode)
            raw = f.read(limit + 1)
    except OSError as exc:
        return None, f"malformed notebook: cannot read it ({exc.strerror})"
    if len(raw) > limit:
        return None, f"malformed notebook: larger than the {limit >> 20} MiB allowed"
    return raw, ""


def check_notebook(path: Path, assignment: str, known: dict[str, dict[str, dict]]) -> tuple[nbformat.NotebookNode | None, str]:
    """(notebook, "") when it can be graded, else (None, reason); the notebook comes back with the instructor's
    grading structure (see ``restore_instructor_cells``). ``known``: ``assignment_ids`` of the course."""
    raw, problem = _read_regular(path, MAX_NOTEBOOK_BYTES)
    if raw is None:
        return None, problem
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"malformed notebook: not valid JSON ({str(exc)[:120]})"
    except RecursionError:
        return None, "malformed notebook: nested too deeply"
    if not isinstance(data, dict) or not isinstance(data.get("cells", data.get("worksheets")), list):
        return None, "malformed notebook: valid JSON, but not a notebook (no list of cells)"
    try:
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 — nbformat raises several kinds; all mean the same here
        first = str(exc).splitlines()[0] if str(exc) else ""
        return None, f"malformed notebook: {type(exc).__name__}: {_shown(first, 160)}"  # the message quotes the file
    deduplicate(nb)
    mine = known.get(assignment, {})
    theirs = {g for g in map(grade_id_of, nb.cells) if g}  # a grade_id of any other type than str claims nothing
    if mine and not (theirs & set(mine)):
        others = sorted(((len(theirs & set(ids)), name) for name, ids in known.items() if name != assignment),
                        reverse=True)
        if others and others[0][0] > 0:
            return None, f"wrong assignment: this is the notebook of {others[0][1]}, not {assignment}"
        return None, f"wrong assignment: the notebook holds none of {assignment}'s exercises"
    if mine:
        restore_instructor_cells(nb, mine)
    return nb, ""
