# Hostile: linear_backward never returns; reduce_to_shape allocates memory without bound.
# assignment: 01_matmul_from_shapes
# expect: test_linear_backward zero - timeout
# expect: test_linear_bias_backward full
# expect: test_reduce_to_shape zero error memory limit
# %% linear_backward
def linear_backward(x, w, dy):
    while True:
        pass
# %% reduce_to_shape
def reduce_to_shape(grad, shape):
    hoard = []
    while True:
        hoard.append(bytearray(1 << 28))  # 256 MiB at a time, until something gives
