"""Write dist/student-bundle.zip: what a student needs, and nothing that holds a solution.

The bundle holds the release notebooks, the ``course`` helper package, a README with the
install steps, and a small project file and environment file that install ``course`` with
the libraries the notebooks use. It never holds ``source/``, ``kernels/``, ``autograder/`` or
``tests/``; ``tests/test_bundle.py`` opens the zip and proves it, and
``tests/test_bundle_install.py`` installs it in a fresh virtual environment by its README.

Only the standard library and the committed files are needed (``make bundle`` installs
nothing); reading pyproject.toml takes ``tomllib``, so Python 3.11 or newer.

Usage: python tools/bundle.py [--out dist/student-bundle.zip]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: say what to run instead of a bare traceback
    sys.exit(f"tools/bundle.py reads pyproject.toml with tomllib, which Python 3.11 added; this is Python "
             f"{sys.version.split()[0]}. Run it with Python 3.11 or newer: make bundle PYTHON=python3.11")

ROOT = Path(__file__).resolve().parent.parent
TOP = "backprop-for-kernel-writers"  # the folder a student gets when unzipping

# What the student side needs at run time: no grading tools.
STUDENT_PACKAGES = ("torch", "triton", "numpy", "matplotlib", "jupyterlab", "ipywidgets")

# The oldest Python the student side runs on: `vermin -t=3.10- course` finds nothing newer in course/,
# and torch 2.13.0 and triton >=3.4 publish wheels for 3.10 to 3.14. No upper bound: no dependency sets one.
STUDENT_PYTHON = ">=3.10"
# The version of the bundle's environment.yml, the one CI installs the bundle with.
TESTED_PYTHON = "3.11"

TORCH_PIN = "torch==2.13.0"
CPU_TORCH = f"pip install {TORCH_PIN} --index-url https://download.pytorch.org/whl/cpu"

# The Linux/macOS steps, in order: the README prints them and tests/test_bundle_install.py runs them.
VENV_STEPS = (
    ("Open a terminal where you unzipped the bundle and go into its folder.", f"cd {TOP}"),
    ("Create a virtual environment. `python3 --version` must say 3.10 or newer: on a Mac, Apple's own python3 "
     "is 3.9, so take one from python.org or Homebrew (`brew install python@3.12`). On Debian/Ubuntu, "
     "`sudo apt install python3-venv` first if this fails.", "python3 -m venv .venv"),
    ("Activate it (again in every new terminal).", "source .venv/bin/activate"),
    ("On Linux (WSL2 included) without an NVIDIA GPU, as on most laptops: take PyTorch's CPU-only build first "
     "(a download of about 200 MB instead of several GB of CUDA libraries). Skip this on macOS and on a machine with an "
     "NVIDIA GPU.", CPU_TORCH),
    ("Install the notebooks' libraries and the `course` package.", "pip install -e ."),
)
LAB_COMMAND = "jupyter lab 00_vjp_contract/00_vjp_contract.ipynb"
VALIDATE_COMMAND = "python -m course validate NOTEBOOK"

# The Colab start: the first cell of a notebook opened in Colab. It installs the bundle into Colab's own Python
# (`%pip` installs into the kernel's interpreter) and leaves the notebooks in /content/TOP; it can run again after
# a restart. The README and the repository's README print it; tests/test_bundle_install.py runs its lines in a fresh
# virtual environment (`!` and `%pip` as shell commands, `%cd` as cd, /content as a scratch folder).
BUNDLE_ZIP = "student-bundle.zip"
COLAB_CELL = f"""%cd /content
# Upload {BUNDLE_ZIP} in the Files pane (left) first, or download it from the address your instructor
# gives: remove the # at the start of the next line and put that address between the quotes.
# !wget -q -O {BUNDLE_ZIP} "ADDRESS-FROM-YOUR-INSTRUCTOR"
!unzip -qo {BUNDLE_ZIP}
%pip install -q -e {TOP}
%cd {TOP}"""
COLAB_VALIDATE = "!python -m course validate 00_vjp_contract/00_vjp_contract.ipynb"


def numbered(steps: tuple[tuple[str, str], ...]) -> str:
    """Markdown's numbered list, each step's command on its own indented line (a code block in the list item)."""
    return "\n".join(f"{textwrap.fill(f'{i}. {why}', 100, subsequent_indent='   ')}\n\n       {command}\n"
                     for i, (why, command) in enumerate(steps, 1))


# The lessons handed out, as their release folders name them: the README counts them.
LESSONS = sorted(p.name[:2] for p in (ROOT / "release").glob("[0-9][0-9]_*") if p.is_dir())

COLAB_SECTION = f"""## Run on Colab

Colab's free GPU is a T4 (sm_75, 64 KB of shared memory per block). In Colab: Runtime → Change
runtime type → T4 GPU. Open a notebook of the bundle (File → Upload notebook, from this folder
unzipped on your computer), insert a code cell above its first cell (`import course`), paste
this into it and run it:

```python
{COLAB_CELL}
```

It installs the bundle's libraries and `course` into Colab's Python (a few minutes when pip
fetches the PyTorch version the course pins) and unpacks every notebook in
`/content/{TOP}`. If Colab asks to restart the session, restart it and run the cell again
(quick the second time), then the rest of the notebook. `import course` then names the GPU:
`course: running on cuda:0 — Tesla T4, sm_75, 64 KB shared memory per block — …`.

What works on the T4: every notebook, 00 to {LESSONS[-1]}; their Triton kernels compile for it (more
slowly than on an L4 or A100: before sm_80 Triton's `tl.dot` uses no tensor cores). float16 and
float32: yes. bfloat16: no — the T4 has no bfloat16 hardware (Triton emulates it, and the
course compile-checks bfloat16 kernels on sm_80 and newer only), so use float16 where a
notebook offers bfloat16. A kernel whose blocks need more shared memory than the T4 has stops
before it launches with one sentence: the kernel, what it needs, what the GPU has, what to shrink.

Validate on Colab: the check cells work as everywhere (Runtime → Run all runs them all). For
the table, `python -m course validate` reads a file: File → Download → Download .ipynb, upload
that file in the Files pane, and run in a cell

```python
!python -m course validate /content/00_vjp_contract.ipynb
```

(a notebook kept in Google Drive validates after `from google.colab import drive;
drive.mount("/content/drive")`, by its path under `/content/drive/MyDrive`). The bundle's
untouched copy validates too, failing every check: `{COLAB_VALIDATE}`.
"""

README = f"""# Backprop for Kernel Writers — student bundle

{len(LESSONS)} notebooks (`{LESSONS[0]}_…` to `{LESSONS[-1]}_…`) and `course`, the package whose checks tell you what is
wrong with an answer. You need **Python 3.10, 3.11, 3.12 or 3.13** (CI installs this bundle
with {TESTED_PYTHON}) and about 2.5 GB of disk. No GPU is needed: without one, `import course`
runs the Triton kernels on the CPU in Triton's interpreter.

**Triton runs on Linux only** (it publishes no macOS or Windows packages). Notebooks 00–02 do not
use it and run anywhere; notebooks 03–{LESSONS[-1]} write Triton kernels and need Linux: on Windows use WSL2,
on a Mac a Linux container (Docker or Podman) or a Linux machine. On macOS `pip install -e .`
skips Triton, so 00–02 install and run there; it needs a Mac with Apple silicon, since PyTorch
builds this version for no Intel Mac.

## Install on Linux or macOS (a virtual environment)

{numbered(VENV_STEPS)}
A virtual environment is needed: Debian's and Ubuntu's own `python3` refuse `pip install`
(`externally-managed-environment`), and it keeps the course's libraries apart from yours.

## Install on Windows (WSL2)

1. In PowerShell: `wsl --install`, restart, and open the "Ubuntu" app it installs.
2. In Ubuntu: `sudo apt update && sudo apt install -y python3-venv unzip`
3. Unzip the bundle in Ubuntu's home, not under `/mnt/c` (it works there, slowly):
   `cd ~ && unzip /mnt/c/Users/YOU/Downloads/student-bundle.zip`, then follow the Linux steps above.

## Install with conda or mamba

1. `cd {TOP}`
2. `mamba env create -f environment.yml` (or `conda env create -f environment.yml`)
3. `mamba activate backprop-student`

On Linux this installs PyPI's torch, which carries CUDA (several GB). On a laptop without an NVIDIA
GPU, instead run `mamba create -n backprop-student python={TESTED_PYTHON} pip`,
`mamba activate backprop-student`, then steps 4 and 5 of the Linux steps.

{COLAB_SECTION}
## Work through the notebooks

1. Start JupyterLab from this folder, with the environment active:

       {LAB_COMMAND}

   It opens in your browser (or prints a URL with a token: open it).
2. Each exercise is a function whose body is `raise course.todo()`. Replace it with your code
   and run the test cell below it: it prints a line starting with ✓, or a `diagnosis:` that says
   what kind of bug it found.
3. To check a whole notebook at once, in a terminal with the environment active:

       {VALIDATE_COMMAND}

   for example `python -m course validate 00_vjp_contract/00_vjp_contract.ipynb`.
4. Submit the notebooks your instructor asks for.
"""


def requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower()


def student_requirements() -> list[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [d for d in deps if requirement_name(d) in STUDENT_PACKAGES]


def pyproject(requirements: list[str]) -> str:
    listed = "\n".join(f"    {json.dumps(r)}," for r in requirements)  # a JSON string is a TOML string
    return f"""[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "backprop-for-kernel-writers-student"
version = "0.1.0"
requires-python = "{STUDENT_PYTHON}"
dependencies = [
{listed}
]

[tool.setuptools.packages.find]
include = ["course*"]
"""


def environment(requirements: list[str]) -> str:
    listed = "\n".join(f"      - {r}" for r in requirements)
    return f"""# mamba env create -f environment.yml && mamba activate backprop-student  (README.md: a CPU-only torch)
name: backprop-student
channels:
  - conda-forge
dependencies:
  - python={TESTED_PYTHON}
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
