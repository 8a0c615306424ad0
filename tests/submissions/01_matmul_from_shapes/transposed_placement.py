# Mutant: transposes placed by habit instead of by shape, and the broadcast undone on the wrong side.
# expect: test_linear_backward transpose
# expect: test_linear_bias_backward transpose
# expect: test_reduce_to_shape broadcast-axis
# %% linear_backward
def linear_backward(x, w, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    dx = dy @ w.mT
    dw = dy_rows.mT @ x_rows  # bug: (N, K), the transpose of W̄
    return dx, dw
# %% linear_bias_backward
def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    dx = w @ dy_rows.mT  # bug: (K, rows), the transpose of x̄
    dw = x_rows.mT @ dy_rows
    db = dy_rows.sum(dim=0)
    return dx, dw, db
# %% reduce_to_shape
def reduce_to_shape(grad, shape):
    shape = tuple(shape)
    while grad.ndim > len(shape):
        grad = grad.sum(dim=-1)  # bug: broadcasting prepends axes on the left, this sums from the right
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(dim=axis, keepdim=True)
    return grad
