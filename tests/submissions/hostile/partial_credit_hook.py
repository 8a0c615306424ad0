# Hostile: nothing implemented; an IPython pre_run_cell hook calls the displayhook with the cell's points minus one ulp before each test cell runs, so the cell's first output is 2.9999999999999996 and the stub's error comes after it: nbgrader reads the first execute_result as the score (every point, before the grader stopped reading it).
# assignment: 01_matmul_from_shapes
# expect: * zero not-implemented
# %% linear_backward
import math
import re

POINTS = {"linear_backward": 3, "linear_bias_backward": 2, "reduce_to_shape": 2, "name_the_bug": 2,
          "batched_matmul_backward": 2}


def before(info):
    m = re.search(r"(?:course\.selfcheck|autograder\.check)\.(\w+)\(", info.raw_cell or "")
    if m and m.group(1) in POINTS:
        get_ipython().displayhook(math.nextafter(float(POINTS[m.group(1)]), 0.0))


get_ipython().events.register("pre_run_cell", before)


def linear_backward(x, w, dy):
    raise course.todo()
# %% linear_bias_backward
def linear_bias_backward(x, w, b, dy):
    raise course.todo()
# %% reduce_to_shape
def reduce_to_shape(grad, shape):
    raise course.todo()
# %% name_the_bug
def name_the_bug(backward):
    raise course.todo()
# %% batched_matmul_backward
def batched_matmul_backward(a, c, dy):
    raise course.todo()
