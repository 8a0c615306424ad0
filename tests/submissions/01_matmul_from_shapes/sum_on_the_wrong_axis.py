# Mutant: reductions over the wrong axes — dw keeps the leading axes of a 3-D x, db sums the features, keepdim lost.
# expect: test_linear_backward batch-reduction
# expect: test_linear_bias_backward broadcast-axis
# expect: test_reduce_to_shape shape
# %% linear_backward
def linear_backward(x, w, dy):
    dx = dy @ w.mT
    dw = x.mT @ dy  # bug: right for a 2-D x, but a 3-D x gives one W̄ per leading index, unsummed
    return dx, dw
# %% linear_bias_backward
def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    dx = dy @ w.mT
    dw = x_rows.mT @ dy_rows
    db = dy_rows.sum(dim=-1)  # bug: sums over the features instead of the rows
    return dx, dw, db
# %% reduce_to_shape
def reduce_to_shape(grad, shape):
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    if lead > 0:
        grad = grad.sum(dim=tuple(range(lead)))
    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    if stretched:
        grad = grad.sum(dim=stretched)  # bug: keepdim=True forgotten, the size-1 axes vanish
    return grad
