"""How the grader runs nbgrader, and the one place that knows where the course and this environment are.

``python -m autograder.nbgrader_cli ARGS`` is the ``nbgrader`` command, four seconds faster to
start: nbformat validates notebooks with jsonschema, which imports ``rfc3987_syntax`` when
it is installed; that module builds a Lark grammar at import time (about 4 s of CPU on the
course's machines) for URI formats no notebook schema uses. Every nbgrader process the
grader starts — one per submission — would pay it. Blocking the import leaves those format
checks out, and nothing else. So this module imports nothing heavy itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import contract

ROOT = Path(__file__).resolve().parent.parent  # the checkout: the course directory, tools/ and tests/
BIN = os.path.dirname(sys.executable)  # this environment's bin: nbgrader runs `alembic` by name, from PATH


def fast_imports() -> None:
    """Keep jsonschema from loading rfc3987_syntax (call before anything imports nbformat)."""
    sys.modules.setdefault("rfc3987_syntax", None)


def with_bin(env) -> dict[str, str]:
    """``env`` with this environment's bin first on PATH."""
    return dict(env, PATH=BIN + os.pathsep + env.get("PATH", ""))


def assignments(course: Path = ROOT) -> list[str]:
    """The course's assignments: every ``source/<name>/<name>.ipynb``."""
    return sorted(p.parent.name for p in course.glob("source/*/*.ipynb") if p.stem == p.parent.name)


def copy_course(where: Path, names, root: Path = ROOT) -> Path:
    """A course folder at ``where``: ``root``'s nbgrader_config.py and the source folders of the assignments ``names``."""
    (where / "source").mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "nbgrader_config.py", where / "nbgrader_config.py")
    for name in names:
        if (where / "source" / name).exists():
            shutil.rmtree(where / "source" / name)
        shutil.copytree(root / "source" / name, where / "source" / name,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return where


def nbgrader(course_dir: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run one nbgrader command in ``course_dir``; raise with its log when it fails."""
    env = with_bin(os.environ)
    env.setdefault("MPLBACKEND", "Agg")
    # Checks run many tiny ops; one thread per kernel is faster and lets workers share cores.
    env.setdefault("OMP_NUM_THREADS", "1")
    env[contract.RECORDS_ENV] = "1"  # a check that fails in a kernel it runs shows its diagnosis as typed JSON too
    done = subprocess.run([sys.executable, "-m", "autograder.nbgrader_cli", *args], cwd=course_dir, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


if __name__ == "__main__":
    fast_imports()
    from nbgrader.apps.nbgraderapp import main

    sys.exit(main())
