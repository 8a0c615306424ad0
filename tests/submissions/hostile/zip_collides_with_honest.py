# Hostile: a student's zip whose member is named after an honest student's files (solution._x_ASSIGNMENT.ipynb: nbgrader's zip_collect failed with "Directory not empty" and stopped the class). Its rows are its own; the honest student's stay theirs.
# assignment: 01_matmul_from_shapes
# delivery: zip
# member: solution._x_@@ASSIGNMENT@@.ipynb
# expect: test_linear_backward zero sign
# %% linear_backward
def linear_backward(x, w, dy):
    K, N = w.shape
    return -(dy @ w.mT), x.reshape(-1, K).mT @ dy.reshape(-1, N)
