"""Finding a class's submissions in each layout, and checking notebooks before anything runs."""

from __future__ import annotations

import json
import os
import shutil
import stat
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import collect
from tools.mutants import ROOT, source_notebook

A = "01_matmul_from_shapes"


@pytest.fixture
def course(tmp_path) -> Path:
    c = tmp_path / "course"
    (c / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", c)
    for name in (A, "00_vjp_contract"):
        shutil.copytree(ROOT / "source" / name, c / "source" / name)
    return c


def write(path: Path, nb=None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb or source_notebook(A), path)
    return path


def test_one_folder_per_student(tmp_path, course):
    subs = tmp_path / "subs"
    write(subs / "alice" / f"{A}.ipynb")
    write(subs / "bob" / "my work (1).ipynb")  # a lone notebook under another name is still bob's
    (subs / "carol").mkdir()  # submitted nothing
    got = collect.collect(A, subs, tmp_path / "staging", course)
    assert [(s.student, s.path is not None, s.problem.split(":")[0]) for s in got] == [
        ("alice", True, ""), ("bob", True, ""), ("carol", False, "missing notebook")]


def test_nbgrader_submitted_layout(tmp_path, course):
    subs = tmp_path / "course-like"
    write(subs / "submitted" / "alice" / A / f"{A}.ipynb")
    write(subs / "submitted" / "bob" / A / f"{A}.ipynb")
    got = collect.collect(A, subs, tmp_path / "staging", course)
    assert [s.student for s in got] == ["alice", "bob"]
    assert all(s.path.name == f"{A}.ipynb" for s in got)


def test_lms_zips(tmp_path, course):
    """A class export named with --lms-export (files named <student>_<ids>_<assignment>.ipynb), and a zip per student."""
    subs = tmp_path / "subs"
    subs.mkdir()
    nb_path = write(tmp_path / "nb.ipynb")
    with zipfile.ZipFile(subs / "canvas-export.zip", "w") as z:
        z.write(nb_path, f"alice_123_456_{A}.ipynb")
        z.write(nb_path, f"Bob Smith_789_{A}.ipynb")  # a space in the name: kept
        z.write(nb_path, "carol_1_2_00_vjp_contract.ipynb")  # another assignment's: not this one's
    with zipfile.ZipFile(subs / "dave.zip", "w") as z:
        z.write(nb_path, f"{A}/{A}.ipynb")
    got = {s.student: s for s in collect.collect(A, subs, tmp_path / "staging", course, exports=["canvas-export.zip"])}
    assert sorted(got) == ["Bob Smith", "alice", "dave"]
    assert all(s.path and s.path.is_file() and not s.problem for s in got.values())
    assert all(s.path.is_relative_to(tmp_path / "staging") for s in got.values())  # read out, never in place


def test_an_export_must_be_named_and_present(tmp_path, course):
    subs = tmp_path / "subs"
    write(subs / "alice" / f"{A}.ipynb")
    with pytest.raises(collect.InstructorError, match="--lms-export export.zip: no such .zip file"):
        collect.collect(A, subs, tmp_path / "staging", course, exports=["export.zip"])
    with pytest.raises(collect.InstructorError, match="name the export with --lms-export"):
        collect.collect(A, subs, tmp_path / "staging", course, student_regexp=r".*/(?P<student_id>\w+)\.ipynb")


def test_instructor_mistakes_are_errors(tmp_path, course):
    with pytest.raises(collect.InstructorError, match="is not a folder"):
        collect.collect(A, tmp_path / "nowhere", tmp_path / "staging", course)
    (tmp_path / "empty").mkdir()
    with pytest.raises(collect.InstructorError, match="no submissions found"):
        collect.collect(A, tmp_path / "empty", tmp_path / "staging", course)
    write(tmp_path / "loose" / f"{A}.ipynb")
    with pytest.raises(collect.InstructorError, match="put each in a folder named after its student"):
        collect.collect(A, tmp_path / "loose", tmp_path / "staging", course)


@pytest.mark.parametrize("content, reason", [
    ("{not json", "malformed notebook: not valid JSON"),
    ("[1, 2, 3]", "malformed notebook: valid JSON, but not a notebook"),
    (json.dumps({"cells": [{"cell_type": "code"}], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}),
     "malformed notebook:"),  # a code cell without source: nbformat rejects it
])
def test_malformed_notebooks(tmp_path, course, content, reason):
    path = tmp_path / "x.ipynb"
    path.write_text(content)
    nb, problem = collect.check_notebook(path, A, collect.assignment_ids(course))
    assert nb is None and problem.startswith(reason), problem


def test_another_assignments_notebook(tmp_path, course):
    path = write(tmp_path / "x.ipynb", source_notebook("00_vjp_contract"))
    nb, problem = collect.check_notebook(path, A, collect.assignment_ids(course))
    assert nb is None and problem == f"wrong assignment: this is the notebook of 00_vjp_contract, not {A}"
    blank = write(tmp_path / "blank.ipynb", nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]))
    nb, problem = collect.check_notebook(blank, A, collect.assignment_ids(course))
    assert problem == f"wrong assignment: the notebook holds none of {A}'s exercises"


def test_duplicated_grade_ids_keep_the_last_copy(tmp_path, course):
    nb = source_notebook(A)
    i = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "linear_backward")
    twin = nbformat.from_dict(json.loads(json.dumps(nb.cells[i])))
    twin.source = "def linear_backward(x, w, dy):\n    return None"
    twin["id"] = "twin"
    nb.cells.insert(i, twin)
    checked, problem = collect.check_notebook(write(tmp_path / "x.ipynb", nb), A, collect.assignment_ids(course))
    assert problem == ""
    copies = [c for c in checked.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "linear_backward"]
    assert len(copies) == 1 and "BEGIN SOLUTION" in copies[0].source  # the last copy keeps the id
    assert "nbgrader" not in checked.cells[i].metadata  # the earlier one is a plain cell now


# ---------------------------------------------------------------------------
# Student ids: Unicode kept, what nbgrader cannot take written %XX, never two names for one id


@pytest.mark.parametrize("name, sid", [
    ("李雷", "李雷"),  # Unicode kept
    ("Bob Smith", "Bob Smith"),  # a space is fine for nbgrader
    ("ünïcode@uni.edu", "ünïcode@uni.edu"),
    ("o'brien, ann (2)", "o'brien, ann (2)"),
    ("star*", "star~2A"),  # --student is a glob: * ? [ ] would match other folders, or none
    ("a[1]?", "a~5B1~5D~3F"),
    ("100%", "100~25"),  # the gradebook's URL holds the job's path: %XX there is decoded
    ("a~2A", "a~7E2A"),  # ~ itself, so that no two names give one id
    (".hidden", "~2Ehidden"),  # a hidden folder: nbgrader's globs skip it
    ("'quoted'", "~27quoted'"),  # nbgrader's command line strips surrounding quotes
    (" padded ", "~20padded~20"),  # ... and surrounding whitespace
    ("line\nbreak", "line~0Abreak"),  # control characters
    ("alice\u202e", "alice~E2~80~AE"),  # a right-to-left override (a format character): shown, not obeyed
    ("Zoe\u0308", "Zoë"),  # NFC: the same name typed on two systems is one id
    ("../../etc", "~2E.~2F..~2Fetc"),  # a path from a regexp's group never leaves its folder
])
def test_student_ids(name, sid):
    assert collect.safe_student_id(name) == sid


def test_student_ids_are_what_nbgrader_reads_back():
    """Each id passes nbgrader's --student, its folder regexp and its gradebook URL unchanged, and globs only itself."""
    import glob
    import re as re_

    from nbgrader.apps.autogradeapp import AutogradeApp
    from nbgrader.coursedir import CourseDirectory
    from sqlalchemy.engine import make_url

    for name in ("李雷", "Bob Smith", "star*", "a[1]?", "'quoted'", " padded ", "line\nbreak", ".hidden", "12345",
                 "100%41", "a~b"):
        sid = collect.safe_student_id(name)
        app = AutogradeApp()
        app.parse_command_line([A, f"--student={sid}"])
        assert CourseDirectory(config=app.config).student_id == sid, name
        assert not glob.has_magic(sid) and not sid.startswith(".") and re_.fullmatch(r"(?P<s>.*)", sid), name
        db = f"/course/jobs/{sid}/gradebook.db"
        assert make_url(f"sqlite:///{db}").database == db, name  # nbgrader's gradebook URL holds the job's path


def test_student_ids_are_distinct_and_bounded():
    names = ["a*", "a?", "a~2A", "a~3F", "a%2A", "a-", "a_", "a ", " a", "a", "'a'", "a'", "~27a'"]
    ids = [collect.safe_student_id(n) for n in names]
    assert len(set(ids)) == len(names), ids
    long1, long2 = "学" * 100 + "x", "学" * 100 + "y"  # 301 bytes each, as UTF-8
    a, b = collect.safe_student_id(long1), collect.safe_student_id(long2)
    assert a != b and len(a.encode()) <= collect.MAX_ID_BYTES and a == collect.safe_student_id(long1)


def test_unicode_folders_are_two_students(tmp_path, course):
    subs = tmp_path / "subs"
    write(subs / "李雷" / f"{A}.ipynb")
    write(subs / "韩梅梅" / f"{A}.ipynb")
    got = collect.collect(A, subs, tmp_path / "staging", course)
    assert [(s.student, s.problem) for s in got] == [("李雷", ""), ("韩梅梅", "")]


def test_a_collision_is_refused_for_both(tmp_path, course):
    """A folder and a zip of one name, or one name in two Unicode forms: one id, no grade, never merged."""
    subs = tmp_path / "subs"
    write(subs / "twin" / f"{A}.ipynb")
    make_zip(subs / "twin.zip", {f"{A}.ipynb": nb_bytes()})
    write(subs / "Zo\u00eb" / f"{A}.ipynb")  # NFC
    write(subs / "Zoe\u0308" / f"{A}.ipynb")  # NFD: another folder on Linux, the same name to a person
    write(subs / "alice" / f"{A}.ipynb")
    got = {s.student: s for s in collect.collect(A, subs, tmp_path / "staging", course)}
    assert sorted(got) == ["Zoë", "alice", "twin"]
    assert got["twin"].path is None and got["twin"].problem == (
        "duplicate student: 2 submissions have the id 'twin' (the folder 'twin', 'twin.zip'); none is graded: "
        "rename all but one")
    assert got["Zoë"].path is None and got["Zoë"].problem.startswith("duplicate student: 2 submissions")
    assert got["alice"].path and not got["alice"].problem


def test_a_students_zip_gives_rows_for_that_student_only(tmp_path, course):
    """Member names never choose the student: mallory.zip is mallory's, whatever it calls its files."""
    subs = tmp_path / "subs"
    write(subs / "solution" / f"{A}.ipynb")
    make_zip(subs / "mallory.zip", {f"victim_1_{A}.ipynb": nb_bytes()})
    # This member name once made nbgrader's zip_collect fail on solution's folder.
    make_zip(subs / "collider.zip", {f"solution._x_{A}.ipynb": nb_bytes()})
    make_zip(subs / "trudy.zip", {f"submitted/victim/{A}/{A}.ipynb": nb_bytes()})
    got = {s.student: s for s in collect.collect(A, subs, tmp_path / "staging", course)}
    assert sorted(got) == ["collider", "mallory", "solution", "trudy"]
    assert all(s.path and not s.problem for s in got.values())
    assert got["solution"].path == subs / "solution" / f"{A}.ipynb"


# ---------------------------------------------------------------------------
# What must never be opened or followed


def test_a_named_pipe_or_device_is_never_opened(tmp_path, course):
    """A FIFO where the notebook should be: refused at once (opening it to read would block forever)."""
    import threading

    subs = tmp_path / "subs"
    (subs / "piper").mkdir(parents=True)
    os.mkfifo(subs / "piper" / f"{A}.ipynb")
    (subs / "lone").mkdir()
    os.mkfifo(subs / "lone" / "anything.ipynb")  # the lone notebook of its folder
    os.mkfifo(subs / "piped.zip")
    devices = os.geteuid() == 0
    if devices:
        (subs / "dev").mkdir()
        os.mknod(subs / "dev" / f"{A}.ipynb", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero: never ends
    write(subs / "alice" / f"{A}.ipynb")
    got = {}
    t = threading.Thread(target=lambda: got.update(
        {s.student: s for s in collect.collect(A, subs, tmp_path / "staging", course)}), daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "collect blocked on a named pipe"
    assert got["piper"].problem == f"unsafe file: {A}.ipynb is a named pipe, not a regular file (never opened)"
    assert got["lone"].problem.startswith("unsafe file: anything.ipynb is a named pipe")
    assert got["piped"].problem == "unsafe file: the submission is a named pipe, not a regular file (never opened)"
    assert all(got[s].path is None for s in ("piper", "lone", "piped"))
    if devices:
        assert got["dev"].problem.startswith(f"unsafe file: {A}.ipynb is a character device")
    assert got["alice"].path and not got["alice"].problem
    # check_notebook, handed one anyway, does not open it either
    nb, problem = collect.check_notebook(subs / "piper" / f"{A}.ipynb", A, collect.assignment_ids(course))
    assert nb is None and problem.startswith("unsafe file:")


def test_a_symbolic_link_is_never_followed(tmp_path, course):
    """Links to the instructor's source notebook, to its folder, to a zip: refused; a linked folder is not entered."""
    subs = tmp_path / "subs"
    source = course / "source" / A
    (subs / "linker").mkdir(parents=True)
    (subs / "linker" / f"{A}.ipynb").symlink_to(source / f"{A}.ipynb")
    (subs / "folder-linker").symlink_to(source)
    nb_path = write(tmp_path / "nb.ipynb")
    with zipfile.ZipFile(tmp_path / "real.zip", "w") as z:
        z.write(nb_path, f"{A}.ipynb")
    (subs / "zip-linker.zip").symlink_to(tmp_path / "real.zip")
    (subs / "inside").mkdir()
    (subs / "inside" / A).symlink_to(source)  # nbgrader's layout, the assignment folder a link
    got = {s.student: s for s in collect.collect(A, subs, tmp_path / "staging", course)}
    assert got["linker"].problem == f"unsafe file: {A}.ipynb is a symbolic link, not a regular file (never followed)"
    for student in ("folder-linker", "zip-linker"):
        assert got[student].problem == "unsafe file: the submission is a symbolic link, not a regular file (never followed)"
    assert got["inside"].problem == f"missing notebook: no {A}.ipynb in the submission"
    assert all(s.path is None for s in got.values())
    nb, problem = collect.check_notebook(subs / "linker" / f"{A}.ipynb", A, collect.assignment_ids(course))
    assert nb is None and problem.startswith("unsafe file:")


def test_too_many_files_in_a_folder(tmp_path, course):
    subs = tmp_path / "subs"
    write(subs / "hoarder" / f"{A}.ipynb")
    for i in range(collect.MAX_FILES):
        (subs / "hoarder" / f"{i}.txt").touch()
    (subs / "hoarder" / ".git").mkdir()  # hidden: not looked into, not counted
    got = collect.collect(A, subs, tmp_path / "staging", course)
    assert got[0].path is None and got[0].problem == f"too many files: more than {collect.MAX_FILES} in the student's folder"
    (subs / "hoarder" / "0.txt").unlink()
    assert collect.collect(A, subs, tmp_path / "staging", course)[0].path is not None


# ---------------------------------------------------------------------------
# Zips: members checked from the directory, one notebook read out


def make_zip(path: Path, members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(name) if name.startswith("/") else name, data)
    return path


def nb_bytes(nb=None) -> bytes:
    return nbformat.writes(nb or source_notebook(A)).encode()


def test_a_zip_with_a_second_notebook(tmp_path, course):
    """The assignment's notebook is chosen as in a folder; two others and none of its name: refused, not guessed."""
    subs = tmp_path / "subs"
    right = nb_bytes()
    make_zip(subs / "tidy.zip", {f"{A}.ipynb": right, "notes.ipynb": b"{}", f".ipynb_checkpoints/{A}-checkpoint.ipynb": b"{}",
                                 f"__MACOSX/._{A}.ipynb": b"\0"})
    make_zip(subs / "zipped-folder.zip", {f"ps1/{A}.ipynb": right, "ps1/scratch.ipynb": b"{}"})
    make_zip(subs / "two.zip", {"first.ipynb": right, "second.ipynb": right})
    make_zip(subs / "twice.zip", {f"a/{A}.ipynb": right, f"b/{A}.ipynb": right})
    make_zip(subs / "empty.zip", {"readme.txt": b"hi"})
    got = {s.student: s for s in collect.collect(A, subs, tmp_path / "staging", course)}
    for student in ("tidy", "zipped-folder"):
        assert got[student].path.read_bytes() == right and not got[student].problem
    assert got["two"].problem == (f"ambiguous submission: 2 notebooks and none named {A}.ipynb ('first.ipynb', "
                                  "'second.ipynb'); none is graded")
    assert got["twice"].problem.startswith(f"ambiguous submission: 2 notebooks named {A}.ipynb")
    assert got["empty"].problem == f"missing notebook: no {A}.ipynb in the zip"


@pytest.mark.parametrize("member, reason", [
    ("../escaped.ipynb", "unsafe archive: a member's path leaves the archive ('../escaped.ipynb')"),
    ("ok/../../escaped.ipynb", "unsafe archive: a member's path leaves the archive"),
    ("..\\escaped.ipynb", "unsafe archive: a member's path leaves the archive"),
    ("/tmp/absolute.ipynb", "unsafe archive: a member has an absolute path ('/tmp/absolute.ipynb')"),
    ("C:\\absolute.ipynb", "unsafe archive: a member has an absolute path"),
])
def test_unsafe_members_refuse_the_zip(tmp_path, course, member, reason):
    subs = tmp_path / "subs" / "deep"
    make_zip(subs / "slip.zip", {f"{A}.ipynb": nb_bytes(), member: nb_bytes()})
    before = set(tmp_path.rglob("*"))
    (sub,) = collect.collect(A, subs, tmp_path / "staging", course)
    assert (sub.student, sub.path) == ("slip", None) and sub.problem.startswith(reason), sub.problem
    assert set(tmp_path.rglob("*")) == before | {tmp_path / "staging"}  # nothing unpacked, anywhere


def test_symlink_and_duplicate_members_refuse_the_zip(tmp_path, course):
    subs = tmp_path / "subs"
    link = zipfile.ZipInfo("link.ipynb")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    make_zip(subs / "linky.zip", {f"{A}.ipynb": nb_bytes()})
    with zipfile.ZipFile(subs / "linky.zip", "a") as z:
        z.writestr(link, str(course / "source" / A / f"{A}.ipynb"))
    make_zip(subs / "dup.zip", {f"{A}.ipynb": nb_bytes()})
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(subs / "dup.zip", "a") as z:
        z.writestr(f"{A}.ipynb", b"{}")  # which one would be graded?
    make_zip(subs / "dotted.zip", {f"{A}.ipynb": nb_bytes(), f"./{A}.ipynb": b"{}"})  # the same path, spelled twice
    got = {s.student: s for s in collect.collect(A, subs, tmp_path / "staging", course)}
    assert got["linky"].problem == "unsafe archive: the member 'link.ipynb' is a symbolic link; nothing was unpacked"
    for student in ("dup", "dotted"):
        assert got[student].problem == f"unsafe archive: two members named '{A}.ipynb'; nothing was unpacked"


def test_a_zip_bomb_is_refused_from_its_directory(tmp_path, course):
    """A small zip that unpacks to 200 MiB: refused from the sizes its directory declares, nothing unpacked."""
    subs = tmp_path / "subs"
    subs.mkdir()
    with zipfile.ZipFile(subs / "bomb.zip", "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr(f"{A}.ipynb", nb_bytes())
        with z.open("big.bin", "w", force_zip64=True) as big:
            for _ in range(200):
                big.write(bytes(collect.MiB))
    assert (subs / "bomb.zip").stat().st_size < 400_000
    (sub,) = collect.collect(A, subs, tmp_path / "staging", course)
    assert sub.path is None and sub.problem == ("archive too large: 'big.bin' unpacks to 200 MiB, more than the 64 MiB "
                                                "allowed for one file; nothing was unpacked")
    assert not any(p.is_file() for p in (tmp_path / "staging").rglob("*"))


def test_archive_caps(tmp_path, course, monkeypatch):
    subs = tmp_path / "subs"
    make_zip(subs / "many.zip", {f"{A}.ipynb": nb_bytes(), **{f"junk/{i}.txt": b"" for i in range(collect.MAX_FILES)}})
    monkeypatch.setattr(collect, "MAX_EXPANDED_BYTES", 3 * collect.MiB)
    make_zip(subs / "wide.zip", {f"{A}.ipynb": nb_bytes(), **{f"{i}.bin": bytes(collect.MiB) for i in range(3)}})
    make_zip(subs / "fine.zip", {f"{A}.ipynb": nb_bytes(), "data.bin": bytes(collect.MiB)})
    got = {s.student: s for s in collect.collect(A, subs, tmp_path / "staging", course)}
    assert got["many"].problem == (f"too many files: the zip holds {collect.MAX_FILES + 1} members, "
                                   f"more than the {collect.MAX_FILES} allowed")
    assert got["wide"].problem == "archive too large: the zip unpacks to more than 3 MiB; nothing was unpacked"
    assert got["fine"].path and not got["fine"].problem


def test_a_zip_that_lies_about_its_sizes(tmp_path, course):
    """The directory says 600 bytes, the stream holds 2 MiB: only 600 are read, and the checksum refuses them."""
    subs = tmp_path / "subs"
    path = make_zip(subs / "liar.zip", {f"{A}.ipynb": bytes(2 * collect.MiB)})
    data = bytearray(path.read_bytes())
    true_size = (2 * collect.MiB).to_bytes(4, "little")
    for at in (i for i in range(len(data) - 4) if data[i:i + 4] == true_size):  # local header and directory
        data[at:at + 4] = (600).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    (sub,) = collect.collect(A, subs, tmp_path / "staging", course)
    assert sub.path is None and sub.problem == f"malformed archive: '{A}.ipynb' cannot be unpacked (BadZipFile)"


def test_not_a_zip(tmp_path, course):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "fake.zip").write_bytes(b"PK not really")
    (sub,) = collect.collect(A, subs, tmp_path / "staging", course)
    assert sub.path is None and sub.problem == "malformed archive: not a zip file"


# ---------------------------------------------------------------------------
# Grading metadata: the instructor's, whatever the submission says


def cell_of(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def instructor_structure(nb):
    return [(c.cell_type, dict(c.metadata["nbgrader"])) for c in nb.cells if "nbgrader" in c.metadata]


@pytest.mark.parametrize("value", [
    ["linear_backward"], {"id": "linear_backward"}, 7, None, True, "", "  ",
], ids=["list", "dict", "number", "null", "bool", "empty", "blank"])
def test_grade_ids_of_any_type(tmp_path, course, value):
    """A grade_id that is not a non-empty string claims no cell (it once stopped the class: unhashable type)."""
    nb = source_notebook(A)
    cell_of(nb, "test_linear_backward").metadata.nbgrader["grade_id"] = value
    solution = cell_of(nb, "linear_bias_backward")
    solution.metadata.nbgrader["grade_id"] = value
    known = collect.assignment_ids(course)
    checked, problem = collect.check_notebook(write(tmp_path / "x.ipynb", nb), A, known)
    assert problem == ""
    # the test cell is the instructor's again; the solution cell runs as a plain cell, the answer still in it
    assert instructor_structure(checked) == [s for s in instructor_structure_of_source(known)
                                             if s[1]["grade_id"] != "linear_bias_backward"]
    (plain,) = [c for c in checked.cells if c.source == solution.source]
    assert "nbgrader" not in plain.metadata


@pytest.mark.parametrize("value", [["grade", True], 3, "test_linear_backward", None,
                                   {"grade_id": "test_linear_backward", "points": "lots", "grade": "yes", "locked": []}])
def test_nbgrader_metadata_of_any_type(tmp_path, course, value):
    nb = source_notebook(A)
    cell_of(nb, "test_linear_backward").metadata["nbgrader"] = value
    known = collect.assignment_ids(course)
    checked, problem = collect.check_notebook(write(tmp_path / "x.ipynb", nb), A, known)
    assert problem == "" and instructor_structure(checked) == instructor_structure_of_source(known)


def instructor_structure_of_source(known):
    return [(c["cell_type"], c["nbgrader"]) for c in known[A].values()]


def test_renamed_test_cell_and_an_extra_graded_cell(tmp_path, course):
    """Test cells and their points come from the instructor: a renamed or invented graded cell counts for nothing."""
    nb = source_notebook(A)
    renamed = cell_of(nb, "test_linear_backward")
    renamed.metadata.nbgrader["grade_id"] = "test_linear_backward_mine"
    cell_of(nb, "test_reduce_to_shape").metadata.nbgrader["points"] = 100
    extra = nbformat.v4.new_code_cell("print('all tests passed')", metadata={"nbgrader": {
        "grade": True, "grade_id": "bonus", "locked": True, "points": 100, "schema_version": 3, "solution": False}})
    nb.cells.insert(3, extra)
    known = collect.assignment_ids(course)
    checked, problem = collect.check_notebook(write(tmp_path / "x.ipynb", nb), A, known)
    assert problem == ""
    assert instructor_structure(checked) == instructor_structure_of_source(known)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in checked.cells]
    assert ids.index("test_linear_backward") == ids.index("linear_backward") + 1  # put back where it belongs
    assert cell_of(checked, "test_linear_backward").source == collect.MISSING_TEST  # nbgrader fills it in
    kept = [c for c in checked.cells if c.source in (renamed.source, extra.source)]
    assert len(kept) == 2 and not any("nbgrader" in c.metadata for c in kept)  # still run, as plain cells


def test_a_deleted_solution_and_its_test_cell(tmp_path, course):
    """nbgrader's own restoring needs the cell before; ours puts the test back before the next exercise."""
    nb = source_notebook(A)
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") not in
                ("linear_backward", "test_linear_backward")]
    checked, problem = collect.check_notebook(write(tmp_path / "x.ipynb", nb), A, collect.assignment_ids(course))
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in checked.cells]
    assert problem == "" and ids.index("test_linear_backward") + 1 == ids.index("linear_bias_backward")
    assert "linear_backward" not in ids
