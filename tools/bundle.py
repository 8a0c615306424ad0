"""Write dist/student-bundle.zip: what a student needs, and nothing that holds a solution.

The bundle holds the release notebooks, the ``course`` helper package, and a small
project file and environment file that install ``course`` with the libraries the
notebooks use. It never holds ``source/``, ``kernels/``, ``autograder/`` or ``tests/``;
``tests/test_bundle.py`` opens the zip and proves it.

Usage: python tools/bundle.py [--out dist/student-bundle.zip]
"""

from __future__ import annotations

import argparse
import sys
import tomllib
import zipfile
from pathlib import Path

from autograder.nbrunner import ROOT

TOP = "backprop-for-kernel-writers"  # the folder a student gets when unzipping

# What the student side needs at run time: no grading tools.
STUDENT_PACKAGES = ("torch", "triton", "numpy", "matplotlib", "jupyterlab", "ipywidgets")

README = """# Backprop for Kernel Writers — student bundle

Install once, then open the notebooks:

    pip install -e .          # or: mamba env create -f environment.yml && mamba activate backprop-student
    jupyter lab

Start with `00_vjp_contract/00_vjp_contract.ipynb`. Each exercise is a function whose body is
`raise course.todo()`; replace it with your code and run the test cell below it. Without a GPU
the Triton kernels run on the CPU in Triton's interpreter (`import course` arranges it).
Submit the notebooks your instructor asks for.
"""


def student_requirements() -> list[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [d for d in deps if d.split("=")[0].split("<")[0].split(">")[0].strip() in STUDENT_PACKAGES]


def pyproject(requirements: list[str]) -> str:
    listed = "\n".join(f'    "{r}",' for r in requirements)
    return f"""[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "backprop-for-kernel-writers-student"
version = "0.1.0"
requires-python = ">=3.11,<3.12"
dependencies = [
{listed}
]

[tool.setuptools.packages.find]
include = ["course*"]
"""


def environment(requirements: list[str]) -> str:
    listed = "\n".join(f"      - {r}" for r in requirements)
    return f"""name: backprop-student
channels:
  - conda-forge
dependencies:
  - python=3.11
  - pip
  - pip:
{listed}
      - -e .
"""


def files_to_bundle() -> list[Path]:
    notebooks = sorted((ROOT / "release").glob("[0-9][0-9]_*/*.ipynb"))
    course = sorted(p for p in (ROOT / "course").rglob("*.py") if "__pycache__" not in p.parts)
    return notebooks + course


def write_bundle(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    requirements = student_requirements()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in files_to_bundle():
            rel = path.relative_to(ROOT)
            # Notebooks sit at the top of the bundle, as a student's course folder would hold them.
            arcname = rel.relative_to("release") if rel.parts[0] == "release" else rel
            zf.write(path, f"{TOP}/{arcname}")
        zf.writestr(f"{TOP}/pyproject.toml", pyproject(requirements))
        zf.writestr(f"{TOP}/environment.yml", environment(requirements))
        zf.writestr(f"{TOP}/README.md", README)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist" / "student-bundle.zip")
    args = parser.parse_args(argv)
    out = write_bundle(args.out)
    with zipfile.ZipFile(out) as zf:
        print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}: {len(zf.namelist())} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
