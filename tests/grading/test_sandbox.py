"""The sandbox holds: what code inside it can see, do and use, probed from the inside.

A probe script runs where the value worker would (``sandbox.py``'s ``valueworker``
target, forked by a real zygote) and reports what it finds; each test asserts one
promise of ``docs/grading.md``. They need root and Linux namespaces (``isolation:
full``); elsewhere they are skipped, and the docs say what is left without them.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder import autograde, contract, sandbox

pytestmark = pytest.mark.skipif(sandbox.available_isolation() != "full",
                                reason="needs root and Linux namespaces (isolation 'full')")

PROBE = textwrap.dedent('''
    import json, os, resource, socket, sys
    out = int(sys.argv[2])  # the worker's write pipe
    report = {"uid": os.getuid(), "gid": os.getgid(), "root_listing": sorted(os.listdir("/")),
              "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
              "home": os.environ.get("HOME"), "cwd": os.getcwd(),
              "limits": {name: resource.getrlimit(getattr(resource, name))[0]
                         for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_FSIZE")}}
    def attempt(name, fn):
        try:
            fn()
            report[name] = "allowed"
        except BaseException as exc:
            report[name] = type(exc).__name__
    attempt("import_autograder", lambda: __import__("autograder.check"))
    attempt("import_kernels", lambda: __import__("kernels"))
    attempt("import_course", lambda: __import__("course"))
    attempt("import_torch", lambda: __import__("torch"))
    attempt("read_source", lambda: open("@@SECRET@@").read())
    attempt("read_gradebook", lambda: open("@@GRADEBOOK@@", "rb").read(1))
    attempt("write_venv", lambda: open(os.path.join(sys.prefix, "pwned"), "w"))
    attempt("write_home", lambda: open(os.path.join(os.environ["HOME"], "note"), "w").write("x"))
    attempt("write_tmp", lambda: open("/tmp/note", "w").write("x"))
    attempt("network", lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))
    attempt("chroot_escape", lambda: os.chroot("/tmp"))
    attempt("setuid_root", lambda: os.setuid(0))
    attempt("big_file", lambda: open("/tmp/big", "wb").write(b"x" * (80 << 20)))
    attempt("mount", lambda: __import__("subprocess").run(["mount", "-t", "tmpfs", "x", "/tmp"], check=True,
                                                            capture_output=True))
    attempt("read_own_folder", lambda: open("@@OWN@@/data.txt").read())
    attempt("write_own_folder", lambda: open("@@OWN@@/figure.png", "w").write("saved inside"))
    attempt("overwrite_own_file", lambda: open("@@OWN@@/data.txt", "w").write("changed inside"))
    attempt("symlink_in_own_folder", lambda: os.symlink("@@GRADEBOOK@@", "@@OWN@@/nb.ipynb"))
    os.write(out, json.dumps(report).encode())
''')


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """Run the probe once in a full sandbox, as the value worker would be run; return its report."""
    tmp = tmp_path_factory.mktemp("sandbox")
    course = tmp / "course"
    (course / "source" / "a").mkdir(parents=True)
    secret = course / "source" / "a" / "a.ipynb"
    secret.write_text('{"the": "solution"}')
    gradebook = course / "gradebook.db"
    gradebook.write_bytes(b"SQLite format 3\0")
    own = tmp / "job" / "autograded" / "alice" / "a"  # the notebook's own folder, as the kernel gets it
    own.mkdir(parents=True)
    (own / "data.txt").write_text("as submitted")
    zygote = sandbox.Zygote(str(tmp / "zygote"), str(tmp / "zygote.log"))
    slots = autograde.SandboxSlots()  # a uid no batch running beside this test uses
    try:
        limits = autograde.Limits(address_space=3 << 30, cpu_seconds=60, processes=32, file_size=64 << 20)
        course_pkg = contract.package_dir("course")
        spec = autograde.spec_for(
            isolation="full", root=tmp / "root", uid=autograde.SANDBOX_UID_BASE + slots.slot(7), limits=limits, cwd="/tmp/home",
            binds=[(course_pkg, course_pkg, False)],
            hide=[contract.package_dir("autograder"), contract.package_dir("kernels")],
            env=autograde.student_env("/tmp", 1), overlays=[str(own)],
            write_files={"probe.py": PROBE.replace("@@SECRET@@", str(secret)).replace("@@GRADEBOOK@@", str(gradebook))
                         .replace("@@OWN@@", str(own))})
        (tmp / "root").mkdir()
        r, w = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        lifeline = sandbox.spawn(zygote.socket, spec, "valueworker", [null, null, null, null, w],
                                 script=f"{sandbox.SANDBOX_DIR}/probe.py", cwd="/tmp")
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        lifeline.close()
        report = json.loads(data)
        report["_secret"], report["_gradebook"] = str(secret), str(gradebook)
        report["_own_after"] = sorted(p.name for p in own.iterdir())
        report["_own_data"] = (own / "data.txt").read_text()
        report["_uid"] = autograde.SANDBOX_UID_BASE + slots.slot(7)
        return report
    finally:
        zygote.stop()
        slots.close()


def test_runs_as_an_unprivileged_uid(probed):
    assert probed["uid"] == probed["_uid"] >= autograde.SANDBOX_UID_BASE and probed["gid"] == probed["uid"]
    assert probed["setuid_root"] == "PermissionError"
    assert probed["chroot_escape"] == "PermissionError"
    assert probed["mount"] != "allowed"


def test_sees_only_its_own_processes(probed):
    assert len(probed["pids"]) <= 3, probed["pids"]  # the namespace's init, the probe, perhaps `mount`


def test_the_grading_code_and_the_instructor_files_do_not_exist(probed):
    assert probed["import_autograder"] == "ModuleNotFoundError"
    assert probed["import_kernels"] == "ModuleNotFoundError"
    assert probed["read_source"] == "FileNotFoundError"
    assert probed["read_gradebook"] == "FileNotFoundError"
    assert "root" in probed["root_listing"] and "home" not in probed["root_listing"]


def test_the_course_package_and_torch_are_there(probed):
    assert probed["import_course"] == "allowed"
    assert probed["import_torch"] == "allowed"


def test_writes_only_to_its_private_dirs(probed):
    assert probed["write_venv"] in ("OSError", "PermissionError")  # read-only bind mount
    assert probed["write_home"] == "allowed" and probed["write_tmp"] == "allowed"
    assert probed["home"] == "/tmp/home"


def test_its_own_folder_is_readable_and_writes_stay_inside(probed):
    """The notebook's folder: what is there can be read; writes (a figure saved beside the notebook,
    a symlink planted for nbgrader to write through) land in a private layer, never in the real folder."""
    assert probed["read_own_folder"] == "allowed"
    assert probed["write_own_folder"] == "allowed" and probed["symlink_in_own_folder"] == "allowed"
    assert probed["overwrite_own_file"] in ("allowed", "PermissionError")  # either way, not in the real folder
    assert probed["_own_after"] == ["data.txt"] and probed["_own_data"] == "as submitted"


def test_no_network(probed):
    assert probed["network"] in ("OSError", "TimeoutError", "ConnectionRefusedError"), probed["network"]


def test_resource_limits_are_set(probed):
    limits = probed["limits"]
    assert limits["RLIMIT_AS"] == 3 << 30
    assert limits["RLIMIT_CPU"] == 60
    assert limits["RLIMIT_NPROC"] == 32
    assert limits["RLIMIT_FSIZE"] == 64 << 20
    assert probed["big_file"] in ("OSError",), probed["big_file"]  # SIGXFSZ is ignored by Python: EFBIG


def test_sandbox_py_imports_nothing_of_the_project():
    """sandbox.py and the worker's files run where ``autograder`` is hidden: stdlib and torch (the worker: and the
    course's measuring modules, bound read-only), never the grader's package."""
    for name in ("sandbox.py", "valueworker.py", "wire.py", "worker_instruments.py"):
        nodes = list(ast.walk(ast.parse((Path(autograde.__file__).parent / name).read_text())))
        imported = {a.name.split(".")[0] for n in nodes if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] if n.level == 0 and n.module else "." for n in nodes
                     if isinstance(n, ast.ImportFrom)}
        allowed = {"course"} if name in ("valueworker.py", "worker_instruments.py") else set()
        assert not imported & ({"autograder", "kernels", ".", "course"} - allowed), (name, imported)
    done = subprocess.run([sys.executable, "-I", "-S", str(Path(sandbox.__file__)), "--help"], capture_output=True,
                          text=True)
    assert "usage:" in done.stderr
