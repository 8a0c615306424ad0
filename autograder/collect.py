"""Find a class's submissions in the layouts instructors have, and check each notebook before grading.

Three layouts, in one ``--submissions DIR``:

- ``DIR/<student>/<ASSIGNMENT>.ipynb`` (one folder per student);
- nbgrader's ``DIR/submitted/<student>/<ASSIGNMENT>/<ASSIGNMENT>.ipynb`` (or ``DIR`` being
  that ``submitted`` folder itself);
- the zip files an LMS exports: ``DIR/*.zip``, extracted and matched with nbgrader's
  ``zip_collect``: one zip whose files are named ``<student>_<anything>_<ASSIGNMENT>.ipynb``
  (Canvas, Moodle), or a zip per student named ``<student>.zip``. Other namings: pass
  ``--student-regexp`` (nbgrader's ``named_regexp``, matched against each extracted path).

Before grading, each notebook is checked here, by the trusted parent: a file that is not
valid notebook JSON, or a notebook of another assignment, gets its rows with a reason
instead of being run. Student ids are folder or file names made safe for nbgrader.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import scratch

_SAFE = re.compile(r"[^A-Za-z0-9._@+-]+")
MAX_NOTEBOOK_BYTES = 64 << 20  # a course notebook with its outputs is well under 1 MiB


def safe_student_id(name: str) -> str:
    """A student id nbgrader can use as a folder name: unsafe characters become '-'."""
    return _SAFE.sub("-", name).strip("-.") or "student"


@dataclass
class Submission:
    student: str
    path: Path | None  # the notebook file; None when there is none
    problem: str = ""  # why it cannot be graded (no notebook, malformed, wrong assignment)
    origin: str = ""  # where it came from, for messages


class CollectError(Exception):
    """The instructor's input is unusable as a whole (no folder, nothing in it)."""


def _notebook_in(folder: Path, assignment: str) -> Path | None:
    """The submission inside one student's folder: ASSIGNMENT.ipynb, nbgrader's subfolder, or a lone notebook."""
    for candidate in (folder / f"{assignment}.ipynb", folder / assignment / f"{assignment}.ipynb"):
        if candidate.is_file():
            return candidate
    found = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    return found[0] if len(found) == 1 else None


def collect(assignment: str, submissions: Path, staging: Path, course: Path,
            student_regexp: str | None = None) -> list[Submission]:
    """Every student's submission in ``submissions`` (any of the three layouts), sorted by student."""
    if not submissions.is_dir():
        raise CollectError(f"--submissions {submissions} is not a folder. Give the folder that holds one entry per "
                           "student (DIR/<student>/<assignment>.ipynb, nbgrader's submitted/ layout, or LMS .zip files).")
    base = submissions / "submitted" if (submissions / "submitted").is_dir() else submissions
    found: dict[str, Submission] = {}
    for folder in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if folder.name in ("submitted", "autograded", "feedback", "release", "source"):
            continue
        student = safe_student_id(folder.name)
        nb = _notebook_in(folder, assignment)
        problem = "" if nb else f"missing notebook: no {assignment}.ipynb in {folder}"
        found[student] = Submission(student, nb, problem, str(folder))
    zips = sorted(submissions.glob("*.zip"))
    if zips:
        for sub in zip_collect(assignment, zips, staging, course, student_regexp):
            found.setdefault(sub.student, sub)
    loose = sorted(submissions.glob("*.ipynb"))
    if not found:
        hint = (f" It holds {len(loose)} notebook(s) directly; put each in a folder named after its student "
                f"({submissions}/<student>/{assignment}.ipynb).") if loose else ""
        raise CollectError(f"no submissions found in {submissions}.{hint}")
    return [found[s] for s in sorted(found)]


# ---------------------------------------------------------------------------
# LMS zip exports, through nbgrader's zip_collect

DEFAULT_REGEXPS = (
    # .../<student>_<anything>_<assignment>.ipynb : Canvas, Moodle and friends name files so
    r"^.*/(?P<student_id>[^/_]+)_(?:[^/]*_)?(?P<file_id>{assignment}\.ipynb)$",
    # .../extracted/<student>/[...]/<file>.ipynb : a zip per student, named after the student
    r"^.*/extracted/(?P<student_id>[^/]+)/(?:.*/)?(?P<file_id>[^/]+\.ipynb)$",
)

COLLECTOR = '''
import re
from nbgrader.plugins import FileNameCollectorPlugin


class LmsCollector(FileNameCollectorPlugin):
    """Try each pattern in turn; the notebook is always filed as <assignment>.ipynb."""

    def collect(self, submitted_file):
        if not submitted_file.endswith(".ipynb") or "/.ipynb_checkpoints/" in submitted_file:
            return None
        for pattern in PATTERNS:
            m = re.match(pattern, submitted_file)
            if m:
                info = m.groupdict()
                info["file_id"] = ASSIGNMENT + ".ipynb"
                return info
        self.log.warning("no student id found in %s", submitted_file)
        return None
'''


def zip_collect(assignment: str, zips: list[Path], staging: Path, course: Path,
                student_regexp: str | None) -> list[Submission]:
    """Extract LMS zips with ``nbgrader zip_collect`` in a staging course; one Submission per student found."""
    if staging.exists():
        shutil.rmtree(staging)
    archive = staging / "downloaded" / assignment / "archive"
    archive.mkdir(parents=True)
    for z in zips:
        shutil.copy(z, archive / z.name)
    (staging / "release" / assignment).mkdir(parents=True)
    shutil.copy(course / "nbgrader_config.py", staging / "nbgrader_config.py")
    patterns = [student_regexp] if student_regexp else [p.replace("{assignment}", re.escape(assignment)) for p in DEFAULT_REGEXPS]
    (staging / "lms_collector.py").write_text(f"PATTERNS = {patterns!r}\nASSIGNMENT = {assignment!r}\n" + COLLECTOR)
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "zip_collect", assignment, "--force",
         "--ZipCollectApp.collector_plugin=lms_collector.LmsCollector"],
        cwd=staging, env=dict(scratch.nbgrader_env(), PYTHONPATH=str(staging)), capture_output=True, text=True,
        timeout=600)
    if done.returncode != 0:
        raise CollectError(f"nbgrader zip_collect could not read {', '.join(z.name for z in zips)}:\n{done.stderr[-2000:]}")
    out = []
    submitted = staging / "submitted"
    for folder in sorted(submitted.iterdir()) if submitted.is_dir() else []:
        nb = folder / assignment / f"{assignment}.ipynb"
        student = safe_student_id(folder.name)
        if student != folder.name:
            folder.rename(submitted / student)
            nb = submitted / student / assignment / f"{assignment}.ipynb"
        out.append(Submission(student, nb if nb.is_file() else None,
                              "" if nb.is_file() else f"missing notebook: no {assignment}.ipynb in the zip", "zip"))
    return out


# ---------------------------------------------------------------------------
# Checking a notebook before it is run


def graded_ids(nb: nbformat.NotebookNode) -> set[str]:
    return {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if isinstance(c.get("metadata", {}).get("nbgrader"), dict) and c.metadata["nbgrader"].get("grade_id")}


def assignment_ids(course: Path) -> dict[str, set[str]]:
    """assignment -> grade_ids of its solution and test cells, from the course's source notebooks."""
    ids = {}
    for nb_path in sorted(course.glob("source/*/*.ipynb")):
        if nb_path.stem == nb_path.parent.name:
            try:
                ids[nb_path.stem] = graded_ids(nbformat.read(nb_path, as_version=4))
            except Exception:  # noqa: BLE001 — a broken source notebook is not this submission's problem
                continue
    return ids


def deduplicate(nb: nbformat.NotebookNode) -> None:
    """Keep the last cell of each grade_id, as nbgrader does; the earlier copies become plain cells.

    nbgrader's own DeduplicateIds leaves an empty ``nbgrader`` dict behind, on which its
    restoring of deleted test cells then fails; removing the key avoids that.
    """
    seen = set()
    for cell in reversed(nb.cells):
        meta = cell.get("metadata", {})
        info = meta.get("nbgrader")
        if info is None:
            continue
        grade_id = info.get("grade_id") if isinstance(info, dict) else None
        if not grade_id or grade_id in seen:
            del meta["nbgrader"]
        else:
            seen.add(grade_id)


def check_notebook(path: Path, assignment: str, known: dict[str, set[str]]) -> tuple[nbformat.NotebookNode | None, str]:
    """(notebook, "") when it can be graded, else (None, reason) for a malformed or foreign notebook."""
    try:
        size = path.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            return None, f"malformed notebook: {size >> 20} MiB, larger than the {MAX_NOTEBOOK_BYTES >> 20} MiB allowed"
        raw = path.read_bytes()
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"malformed notebook: not valid JSON ({str(exc)[:120]})"
    except OSError as exc:
        return None, f"malformed notebook: cannot read it ({exc.strerror})"
    if not isinstance(data, dict) or not isinstance(data.get("cells", data.get("worksheets")), list):
        return None, "malformed notebook: valid JSON, but not a notebook (no list of cells)"
    try:
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 — nbformat raises several kinds; all mean the same here
        return None, f"malformed notebook: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    deduplicate(nb)
    mine = known.get(assignment, set())
    theirs = graded_ids(nb)
    if mine and not (theirs & mine):
        others = sorted(((len(theirs & ids), name) for name, ids in known.items() if name != assignment), reverse=True)
        if others and others[0][0] > 0:
            return None, f"wrong assignment: this is the notebook of {others[0][1]}, not {assignment}"
        return None, f"wrong assignment: the notebook holds none of {assignment}'s exercises"
    return nb, ""
