import os
import sys

from autograder.nbgrader_cli import ROOT

sys.path.insert(0, str(ROOT))  # make `tools` importable for the tests
os.environ.setdefault("MPLBACKEND", "Agg")
# Tiny tensors on a busy 2-core machine: torch's thread pool costs far more than it saves.
# Set before torch is imported, so notebook kernels started by the tests inherit it too.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Hidden checks draw their inputs from a fresh OS seed on every grading run, unless AUTOGRADER_SEED
# names one. In the tests every draw is replayable: seed 0 unless a test sets another or sweeps them
# (the `seeded` fixture, seed-sweep tests). Inherited by the kernels nbval and the grading tests start.
os.environ.setdefault("AUTOGRADER_SEED", "0")

# Before any test module imports triton: the interpreter must be on when triton's own library (tl.max, tl.sum...)
# is decorated, or a kernel calling it fails in whatever test runs after a module that imported triton first.
import course  # noqa: E402,F401
