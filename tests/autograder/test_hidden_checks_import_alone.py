"""The hidden checks import where the grader's sandbox hides ``kernels`` (hidden tests in the student's kernel)."""

import subprocess
import sys

from autograder.nbgrader_cli import ROOT

NO_KERNELS = """
import sys

class HideKernels:  # what the sandbox does to the student's kernel: the reference package is not there
    def find_spec(self, name, path=None, target=None):
        if name == "kernels" or name.startswith("kernels."):
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, HideKernels())
import autograder.check
print(len([n for n in dir(autograder.check) if not n.startswith("_")]))
"""


def test_autograder_check_imports_without_the_kernels_package():
    run = subprocess.run([sys.executable, "-c", NO_KERNELS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"autograder.check needs kernels, which the sandbox hides:\n{run.stderr[-2000:]}"
