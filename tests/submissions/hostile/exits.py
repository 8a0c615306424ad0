# Hostile: linear_backward calls sys.exit(); the linear_bias_backward cell calls sys.exit() at
# top level after defining its (right) function; the reduce_to_shape cell ends the kernel with
# os._exit(0). What was graded before the kernel died keeps its points.
# assignment: 01_matmul_from_shapes
# expect: test_linear_backward zero - error
# expect: test_linear_bias_backward full
# expect: test_reduce_to_shape zero - kernel died
# expect: test_name_the_bug zero - kernel died
# expect: test_batched_matmul_backward zero - kernel died
# %% linear_backward
import sys


def linear_backward(x, w, dy):
    sys.exit(0)
# %% linear_bias_backward
import sys


def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    dy_rows = dy.reshape(-1, N)
    return dy @ w.mT, x.reshape(-1, K).mT @ dy_rows, dy_rows.sum(dim=0)


sys.exit("stop reading here")  # IPython turns this into an error in this cell, nothing more
# %% reduce_to_shape
import os


def reduce_to_shape(grad, shape):
    return grad


os._exit(0)
