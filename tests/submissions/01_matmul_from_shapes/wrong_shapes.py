# Mutant: right values in the wrong shape — dx left flattened, db and the leading axes kept as size-1 axes, a (1, K, N) c squeezed — and name_the_bug answers with a tuple.
# expect: test_linear_backward shape
# expect: test_linear_bias_backward shape
# expect: test_reduce_to_shape shape
# expect: test_name_the_bug shape
# expect: test_batched_matmul_backward shape
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
# %% name_the_bug
def name_the_bug(backward):
    """Answers with one label per output, a tuple, where one class is asked for."""
    def close(got, ref):
        return got.shape == ref.shape and float(torch.linalg.vector_norm(got - ref)) <= 1e-9 * float(torch.linalg.vector_norm(ref))

    gen = torch.Generator().manual_seed(0)
    K, N, B = 3, 5, 7
    x, w, b, dy = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((B, K), (K, N), (N,), (B, N)))
    refs = (dy @ w.mT, x.mT @ dy, dy.sum(dim=0))
    return tuple("none" if close(got, ref) else "wrong" for got, ref in zip(backward(x, w, b, dy), refs))  # bug
# %% batched_matmul_backward
def batched_matmul_backward(a, c, dy):
    da = dy @ c.mT
    dc = a.mT @ dy
    if c.ndim == 2 or c.shape[0] == 1:
        dc = dc.sum(dim=0)  # bug: a (1, K, N) c comes back (K, N)
    return da, dc
