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
test cell, with the first exercise solved by the code below (written here, not taken from source/); last,
the README's ``python -m course validate`` runs the untouched notebook in that environment.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tools.bundle import CPU_TORCH, TOP, VENV_STEPS, write_bundle

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


def test_bundle_installs_by_its_readme_and_runs_the_first_check(tmp_path):
    start = time.monotonic()
    with zipfile.ZipFile(write_bundle(tmp_path / "student-bundle.zip")) as zf:
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
    python = folder / ".venv" / "bin" / "python"
    installed = time.monotonic() - start

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

    # The README's validate command works in that environment: the untouched notebook runs to its end and
    # every check is reported, none passing.
    validate = subprocess.run([str(python), "-m", "course", "validate", str(notebook)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert "python -m course validate" in readme
    assert validate.returncode == 1, f"validate should fail an untouched notebook:\n{validate.stdout[-3000:]}\n{validate.stderr[-3000:]}"
    assert "not implemented yet" in validate.stdout and "0 of 8 points" in validate.stdout, validate.stdout
    print(f"bundle install: {installed:.0f} s to install, {time.monotonic() - start:.0f} s in all")
