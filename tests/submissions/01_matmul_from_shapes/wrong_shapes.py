# Mutant: right values in the wrong shape — dx left flattened, db and the leading axes kept as size-1 axes.
# expect: test_linear_backward shape
# expect: test_linear_bias_backward shape
# expect: test_reduce_to_shape shape
# %% linear_backward
def linear_backward(x, w, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    dx = dy_rows @ w.mT  # bug: (rows, K), never reshaped back to the shape of x
    dw = x_rows.mT @ dy_rows
    return dx, dw
# %% linear_bias_backward
def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    dx = dy @ w.mT
    dw = x_rows.mT @ dy_rows
    db = dy_rows.sum(dim=0, keepdim=True)  # bug: (1, N), but b has shape (N,)
    return dx, dw, db
# %% reduce_to_shape
def reduce_to_shape(grad, shape):
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    if lead > 0:
        grad = grad.sum(dim=tuple(range(lead)), keepdim=True)  # bug: the prepended axes stay, as size-1 axes
    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[lead + i] != 1)
    if stretched:
        grad = grad.sum(dim=tuple(lead + i for i in stretched), keepdim=True)
    return grad
