# Hostile: a solution cell that looks for the hidden checks' source wherever the grader keeps it and prints every
# file it finds as one long line (the output caps count lines, not characters), so that the feedback would carry
# every closed-form reference. The kernel has no autograder: nothing is found, and every answer, right, keeps its
# points.
# assignment: 01_matmul_from_shapes
# needs: full-isolation (with limits only, the kernel runs as the grader's user and can read the grader's files)
# expect: * full
# %% cell-after:linear_backward
import glob
import importlib.util
import os
import sys

_where = {"@@COURSE@@/autograder", os.path.join(os.path.dirname("@@COURSE@@"), "autograder")}
_spec = importlib.util.find_spec("autograder")
if _spec is not None and _spec.submodule_search_locations:
    _where.update(_spec.submodule_search_locations)
for _path in sys.path:
    _where.add(os.path.join(_path, "autograder"))
_leaked = []
for _dir in sorted(_where):
    for _file in sorted(glob.glob(os.path.join(_dir, "check", "*.py"))):
        try:
            with open(_file) as _f:
                _leaked.append(_f.read().replace("\n", " ⏎ "))
        except OSError:
            pass
print("LEAKED:", " ".join(_leaked) if _leaked else "nothing")
