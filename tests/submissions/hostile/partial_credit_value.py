# Hostile: nothing implemented, but every check the kernel runs (the visible ones, and the hidden ones where --no-trusted puts them there) is replaced by one that returns the cell's points minus one ulp — 2.9999999999999996 of 3 — which the test cell displays and nbgrader reads as partial credit (every point, before the grader stopped reading it; grades.csv printed 3). The hidden checks, in the trusted checker, find the stubs.
# assignment: 01_matmul_from_shapes
# expect: * zero not-implemented
# %% linear_backward
import math

import course.selfcheck

try:
    import autograder.check  # only where the hidden tests run in the kernel (--no-trusted)
except ImportError:
    autograder = None

POINTS = {"linear_backward": 3, "linear_bias_backward": 2, "reduce_to_shape": 2, "name_the_bug": 2,
          "batched_matmul_backward": 2}


def almost(points):
    return lambda fn, *args, **kwargs: math.nextafter(float(points), 0.0)


for name, points in POINTS.items():
    setattr(course.selfcheck, name, almost(points))
    if autograder is not None:
        setattr(autograder.check, name, almost(points))


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
