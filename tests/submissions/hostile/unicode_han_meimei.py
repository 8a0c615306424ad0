# Hostile: a student folder named 韩梅梅 beside 李雷, with one wrong answer: the two keep their own grades.
# assignment: 01_matmul_from_shapes
# name: 韩梅梅
# expect: test_linear_backward zero sign
# %% linear_backward
def linear_backward(x, w, dy):
    K, N = w.shape
    return -(dy @ w.mT), x.reshape(-1, K).mT @ dy.reshape(-1, N)
