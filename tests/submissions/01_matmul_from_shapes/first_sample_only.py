# Mutant: the batch axis is never summed — one sample stands in for all of them.
# expect: test_linear_backward batch-reduction
# expect: test_linear_bias_backward batch-reduction
# expect: test_reduce_to_shape batch-reduction
# %% linear_backward
def linear_backward(x, w, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    dx = dy @ w.mT
    dw = torch.outer(x_rows[0], dy_rows[0])  # bug: the first sample only
    return dx, dw
# %% linear_bias_backward
def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    dx = dy @ w.mT
    dw = x_rows.mT @ dy_rows
    db = dy_rows[0]  # bug: the first row only
    return dx, dw, db
# %% reduce_to_shape
def reduce_to_shape(grad, shape):
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    # bug: only the stretched size-1 axes are summed; the prepended leading axes stay
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[lead + axis] != 1:
            grad = grad.sum(dim=lead + axis, keepdim=True)
    return grad
