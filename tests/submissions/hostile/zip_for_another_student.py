# Hostile: a student's zip whose notebook is named as an LMS names another student's (victim_1_ASSIGNMENT.ipynb): it once created rows for "victim". A student's zip gives rows for that student only.
# assignment: 01_matmul_from_shapes
# delivery: zip
# member: victim_1_@@ASSIGNMENT@@.ipynb
# expect: test_linear_backward zero sign
# %% linear_backward
def linear_backward(x, w, dy):
    K, N = w.shape
    return -(dy @ w.mT), x.reshape(-1, K).mT @ dy.reshape(-1, N)
