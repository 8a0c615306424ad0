"""The student bundle installs by its README's Linux steps in a fresh virtual environment, and notebook 00's first check passes.

The steps are ``tools.bundle.VENV_STEPS``, which the README prints (tests/test_bundle.py checks it does);
they run in one bash shell, as a student types them, with two substitutions for this machine:

- ``python3`` becomes the interpreter running the tests, the Python version CI tests;
- the CPU-torch step (``pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu``)
  becomes ``pip install --no-index --no-deps torch==2.13.0``: the same CPU build, from the wheel folder in
  pip's configuration (find-links); its dependencies come with the next step, ``pip install -e .``.
  download.pytorch.org is out of reach here, and PyPI's Linux torch is the multi-GB CUDA build, which this
  test must never fetch: with ``--no-index``, pip fails instead.

Then the release notebook 00 runs in a Jupyter kernel of that environment, from its first cell to its first
test cell, with the first exercise solved by the code below (written here, not taken from source/).

The README's Colab cell (``tools.bundle.COLAB_CELL``) runs in the same environment, standing in for Colab's Python
(one fresh environment for both: building it is most of this file's ~70 s): its ``!`` and ``%pip`` lines as shell
commands, ``%cd`` as cd, the scratch folder as /content. It unpacks the bundle over the same folder and installs it
again; then ``python -m course validate`` runs the untouched notebook 00 there and prints its table, no check
passing.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools.bundle import BUNDLE_ZIP, COLAB_CELL, COLAB_VALIDATE, CPU_TORCH, TOP, VENV_STEPS, write_bundle

pytestmark = pytest.mark.install

SUBSTITUTIONS = {
    "python3 -m venv .venv": f"{shlex.quote(sys.executable)} -m venv .venv",
    CPU_TORCH: "pip install --no-index --no-deps torch==2.13.0",
}

# Notebook 00's first exercise, solved: a central difference per entry, in float64, x left as it was.
NUMERICAL_GRADIENT = '''
def numerical_gradient(f, x, eps=1e-6):
    point = x.detach().to(torch.float64).clone(memory_format=torch.contiguous_format)
    grad = torch.zeros_like(point)
    flat, out = point.view(-1), grad.view(-1)
    for i in range(flat.numel()):
        centre = flat[i].item()
        flat[i] = centre + eps
        up = float(f(point))
        flat[i] = centre - eps
        down = float(f(point))
        flat[i] = centre
        out[i] = (up - down) / (2 * eps)
    return grad
'''

# Runs in the fresh environment: the notebook up to its first test cell, in a kernel of that environment.
RUN_FIRST_CHECK = '''
import json, sys
import nbformat
from nbclient import NotebookClient

path, solution = sys.argv[1], sys.argv[2]
nb = nbformat.read(path, as_version=4)
cells = []
for cell in nb.cells:
    if cell.cell_type != "code":
        continue
    meta = cell.metadata.get("nbgrader", {})
    if meta.get("solution"):
        cell.source = solution
        print("solved:", meta["grade_id"], file=sys.stderr)
    cells.append(cell)
    if meta.get("grade"):
        break
nb.cells = cells
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": path.rsplit("/", 1)[0]}}).execute()
# course's short tracebacks can leave a failed cell's reply "ok": read the outputs themselves.
errors = [o for cell in nb.cells for o in cell.outputs if o.output_type == "error"]
if errors:
    sys.exit("a cell failed: " + errors[0].ename + ": " + errors[0].evalue)
last = nb.cells[-1]
print(json.dumps({"grade_id": last.metadata["nbgrader"]["grade_id"],
                  "stdout": "".join(o.get("text", "") for o in last.outputs if o.get("name") == "stdout")}))
'''


def clean_environment() -> dict[str, str]:
    """This process's environment without the project's own venv: nothing installed there can leak in."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    own = Path(sys.prefix).resolve()
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p and not Path(p).resolve().is_relative_to(own))
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@dataclass(frozen=True)
class Installed:
    scratch: Path  # where the zip lies and was unpacked
    folder: Path  # the bundle's folder, with .venv inside
    python: Path
    readme: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """The bundle unpacked and installed by its README's Linux steps in a fresh virtual environment."""
    start = time.monotonic()
    tmp_path = tmp_path_factory.mktemp("bundle")
    with zipfile.ZipFile(write_bundle(tmp_path / BUNDLE_ZIP)) as zf:
        zf.extractall(tmp_path)
    folder = tmp_path / TOP
    readme = (folder / "README.md").read_text()

    commands = [SUBSTITUTIONS.get(command, command) for _, command in VENV_STEPS]
    assert all(command in readme for _, command in VENV_STEPS)
    script = " && ".join(commands)
    env = clean_environment()
    install = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, (
        f"the README's steps failed ({script}); if the torch step failed, pip's find-links hold no torch 2.13.0 CPU wheel "
        f"for this Python, and this test will not fetch PyPI's CUDA build:\n{install.stdout[-3000:]}\n{install.stderr[-3000:]}"
    )
    print(f"bundle install: {time.monotonic() - start:.0f} s")
    return Installed(tmp_path, folder, folder / ".venv" / "bin" / "python", readme, env)


def test_bundle_installs_by_its_readme_and_runs_the_first_check(installed):
    start = time.monotonic()
    tmp_path, folder, python, env = installed.scratch, installed.folder, installed.python, installed.env

    # `pip install -e .` made the bundle's `course` importable from anywhere, and torch is the CPU build.
    where = subprocess.run([str(python), "-c", "import course, torch; print(course.__file__); print(torch.__version__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert where.returncode == 0, where.stderr
    course_file, torch_version = where.stdout.strip().splitlines()[-2:]
    assert Path(course_file).resolve().is_relative_to(folder.resolve()), course_file
    assert torch_version.startswith("2.13.0"), torch_version

    (tmp_path / "run_first_check.py").write_text(RUN_FIRST_CHECK)
    notebook = folder / "00_vjp_contract" / "00_vjp_contract.ipynb"
    run = subprocess.run([str(python), str(tmp_path / "run_first_check.py"), str(notebook), NUMERICAL_GRADIENT],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"notebook 00 failed in the fresh environment:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert "solved: numerical_gradient" in run.stderr, "notebook 00's first exercise is no longer numerical_gradient"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["grade_id"] == "test_numerical_gradient", result
    assert result["stdout"].startswith("✓ numerical_gradient passes the visible checks"), result["stdout"]
    print(f"first check: {time.monotonic() - start:.0f} s")


def colab_script(cell: str, content: Path) -> str:
    """The Colab cell as one bash script: ``!`` lines and ``%pip`` as typed, ``%cd`` as cd, ``content`` for /content."""
    commands = []
    for line in cell.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("!"):
            commands.append(line[1:])
        elif line.startswith("%pip "):
            commands.append(line[1:])
        elif line.startswith("%cd "):
            commands.append("cd " + shlex.quote(line[4:].replace("/content", str(content))))
        else:
            raise AssertionError(f"the Colab cell has a line this test does not know how to run: {line!r}")
    return " && ".join(commands)


def test_colab_cell_installs_into_that_python_and_validate_prints_the_table(installed):
    """The README's Colab cell, with the zip where a student uploads it, leaves `course` importable from the notebooks'
    folder and `python -m course validate` reports the untouched notebook 00: exit 1, a row per check, 0 points."""
    start = time.monotonic()
    assert COLAB_CELL in installed.readme and COLAB_VALIDATE in installed.readme
    script = colab_script(COLAB_CELL, installed.scratch)
    assert script.startswith(f"cd {installed.scratch}") and f"unzip -qo {BUNDLE_ZIP}" in script, script
    # The environment's Python stands in for Colab's: its bin first on PATH, as an activated venv (or Colab) has it.
    validate = COLAB_VALIDATE.removeprefix("!")
    shell = f"source {shlex.quote(str(installed.folder / '.venv' / 'bin' / 'activate'))} && {script} && {validate}"
    run = subprocess.run(["bash", "-c", shell], cwd=installed.scratch, env=installed.env, capture_output=True, text=True,
                         timeout=1200)
    out = run.stdout
    assert "validating 00_vjp_contract/00_vjp_contract.ipynb" in out, f"the Colab cell failed:\n{out[-3000:]}\n{run.stderr[-3000:]}"
    assert run.returncode == 1, f"validate should fail an untouched notebook:\n{out[-3000:]}\n{run.stderr[-3000:]}"
    assert "test cell" in out and "test_numerical_gradient" in out and "✗ not implemented yet" in out, out
    assert "0 of 8 points" in out, out
    assert "python -m course validate" in installed.readme
    print(f"Colab cell and validate: {time.monotonic() - start:.0f} s")
