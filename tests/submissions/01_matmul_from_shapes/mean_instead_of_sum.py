# Mutant: every reduction is a mean where the chain rule sums.
# expect: test_linear_backward scale
# expect: test_linear_bias_backward scale
# expect: test_reduce_to_shape scale
# %% linear_backward
def linear_backward(x, w, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    dx = dy @ w.mT
    dw = x_rows.mT @ dy_rows / x_rows.shape[0]  # bug: averaged over the batch
    return dx, dw
# %% linear_bias_backward
def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    dx = dy @ w.mT
    dw = x_rows.mT @ dy_rows
    db = dy_rows.mean(dim=0)  # bug: averaged over the rows
    return dx, dw, db
# %% reduce_to_shape
def reduce_to_shape(grad, shape):
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    if lead > 0:
        grad = grad.mean(dim=tuple(range(lead)))  # bug: mean over the copies
    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    if stretched:
        grad = grad.mean(dim=stretched, keepdim=True)  # bug: mean over the copies
    return grad
