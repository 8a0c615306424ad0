# Mutant: the descent step's minus sign slips into the gradients, and sum(dim=()) sums everything.
# expect: test_linear_backward sign
# expect: test_linear_bias_backward sign
# expect: test_reduce_to_shape shape
# %% linear_backward
def linear_backward(x, w, dy):
    K, N = w.shape
    dx = -(dy @ w.mT)  # bug: the update direction is not the gradient
    dw = x.reshape(-1, K).mT @ dy.reshape(-1, N)
    return dx, dw
# %% linear_bias_backward
def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    dx = dy @ w.mT
    dw = -(x_rows.mT @ dy_rows)  # bug: the update direction is not the gradient
    db = dy_rows.sum(dim=0)
    return dx, dw, db
# %% reduce_to_shape
def reduce_to_shape(grad, shape):
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    grad = grad.sum(dim=tuple(range(lead)))  # bug: with lead == 0 this is sum(dim=()), which sums every axis
    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    if stretched:
        grad = grad.sum(dim=stretched, keepdim=True)
    return grad
