# Hostile: a test cell deleted, a solution cell pasted twice (first a wrong copy, then the
# right one), and a test cell pasted twice. nbgrader restores the deleted test cell, grades
# the last copy of a duplicated cell, and every exercise is right.
# assignment: 01_matmul_from_shapes
# expect: * full
# %% delete:test_linear_bias_backward
# %% duplicate:linear_backward
def linear_backward(x, w, dy):
    return dy, w  # a wrong first draft, left above the real answer
# %% duplicate:test_reduce_to_shape
