"""Regenerate the student notebooks in release/ from source/ with nbgrader.

``python -m tools.release [ASSIGNMENT ...]`` writes release/<assignment>/ for each
assignment (default: every folder in source/). ``--check`` generates into a scratch
folder instead and exits 1, naming the files, when the committed release/ differs —
a student must never receive a notebook that lags behind its source.

nbgrader runs with ``--no-db``: generating a release needs no gradebook, and the
course's real gradebook is the instructor's, not the repository's.

Each graded test cell of a release is tagged ``raises-exception``: JupyterLab's Run All then
goes on past an unsolved check (the kernel is asked not to stop on its error), so a new
student's later demonstrations still run. Only release/ carries the tag: nbval honours it too,
and on source/ it would let a failing check pass. Grading ignores it: nbgrader scores a cell
from its error output, whatever its tags.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder.nbgrader_cli import ROOT, copy_course, nbgrader
from autograder.nbgrader_cli import assignments as course_assignments

RUN_ALL_GOES_ON = "raises-exception"  # the tag JupyterLab's Run All does not stop at


def assignments(requested: list[str]) -> list[str]:
    available = course_assignments()
    unknown = sorted(set(requested) - set(available))
    if unknown:
        raise SystemExit(f"no source/{unknown[0]}/; available: {', '.join(available)}")
    return requested or available


def generate(course_dir: Path, names: list[str]) -> None:
    """Generate release/<name>/ inside ``course_dir`` (which must hold nbgrader_config.py and source/)."""
    for name in names:
        nbgrader(course_dir, "generate_assignment", name, "--force", "--no-db")
        for path in sorted((course_dir / "release" / name).glob("*.ipynb")):
            tag_test_cells(path)


def is_test_cell(cell) -> bool:
    nbgrader_meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and nbgrader_meta.get("grade", False) and not nbgrader_meta.get("solution", False)


def tag_test_cells(path: Path) -> None:
    """Tag every graded test cell of the notebook at ``path`` so that Run All goes on past it."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if is_test_cell(cell) and RUN_ALL_GOES_ON not in tags:
            tags.append(RUN_ALL_GOES_ON)
        if not tags:
            del cell.metadata["tags"]
    path.write_text(nbformat.writes(nb) + "\n")  # nbgrader's own layout: nbformat's, one newline at the end


def differences(names: list[str]) -> list[str]:
    """Paths under release/ that differ from what nbgrader makes of source/ now."""
    with tempfile.TemporaryDirectory(prefix="release-check-") as tmp:
        scratch = copy_course(Path(tmp), names)
        generate(scratch, names)
        stale = []
        for name in names:
            fresh, committed = scratch / "release" / name, ROOT / "release" / name
            fresh_files = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
            committed_files = {p.relative_to(committed) for p in committed.rglob("*") if p.is_file()} if committed.exists() else set()
            for rel in sorted(fresh_files | committed_files):
                a, b = fresh / rel, committed / rel
                if not (a.exists() and b.exists() and filecmp.cmp(a, b, shallow=False)):
                    stale.append(f"release/{name}/{rel}")
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--check", action="store_true", help="report stale release files; write nothing")
    args = parser.parse_args(argv)
    names = assignments(args.assignments)
    if args.check:
        stale = differences(names)
        if stale:
            print("stale (run `make release`): " + ", ".join(stale), file=sys.stderr)
            return 1
        print(f"release/ is up to date for {', '.join(names)}")
        return 0
    for name in names:
        shutil.rmtree(ROOT / "release" / name, ignore_errors=True)
    generate(ROOT, names)
    for name in names:
        print(f"wrote release/{name}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
