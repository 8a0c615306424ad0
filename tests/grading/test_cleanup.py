"""No byte of a submission stays on the grader's disk once it is graded.

The proof batch removes its scratch folder at the end, so it cannot show what a job leaves
behind while the class is graded. Here one submission that writes 32 MiB into the
kernel's socket folder (the one folder of the grader's disk its sandbox may write) is
graded with ``--work DIR``, which keeps the scratch folder: the job's logs stay, nothing
the student's code wrote does (its socket folder, outside DIR, goes too). Without ``--work``
the scratch folder goes entirely. DIR is long, as an instructor's may be: past the 107 bytes
of a Unix socket's path.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from autograder import autograde
from tests.grading import fixtures
from tests.grading.test_grade_command import ASSIGNMENT, grade, make_course

pytestmark = pytest.mark.nbgrader


def test_what_the_kernel_wrote_is_gone_when_its_job_ends(tmp_path):
    course = make_course(tmp_path)
    h = next(f for f in fixtures.fixtures() if f.name == "huge_outputs")
    fixtures.write(h, tmp_path / "submissions" / h.name / f"{ASSIGNMENT}.ipynb", course)
    # Long on purpose: a job folder past 107 bytes, where a Unix socket's path no longer fits; the
    # kernel's sockets must live elsewhere (autograde.ipc_folder) for the submission to be graded at all.
    work = Path(tempfile.mkdtemp(prefix="agw-")) / ("a-long-work-folder-" * 5)
    assert len(str(work / "jobs" / ASSIGNMENT / h.name / "ipc" / "kernel-1")) > 107
    try:
        check(course, tmp_path, h, work)
    finally:
        autograde.remove_tree(work.parent)


def check(course, tmp_path, h, work):
    done = grade(course, tmp_path / "submissions", tmp_path / "out", "--work", str(work), "--no-trusted", "--no-feedback")
    assert done.returncode == 0, done.stderr[-3000:]
    job = work / "jobs" / ASSIGNMENT / h.name
    autograded = course / "autograded" / h.name / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert "left 32 MiB in the kernel's socket folder" in autograded.read_text(), "the kernel could not write there"
    assert (job / "autograde.log").is_file(), "--work keeps the job's logs"
    left = [p.name for p in job.iterdir() if p.name in autograde.KERNEL_WRITABLE + autograde.WORKER_WRITABLE]
    assert left == [], f"the student's writable folders stayed: {left}"
    assert list(work.rglob("leftover-*")) == [], "a file the kernel wrote stayed"
    assert not autograde.ipc_folder(job).exists(), "the kernel's socket folder stayed"
    assert autograded.stat().st_size < 6 << 20, "the instructor's record stays, capped"
