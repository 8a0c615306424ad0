# Mutant: transposes placed by habit instead of by shape, the broadcast undone on the wrong side, and name_the_bug tests with square sizes only.
# expect: test_linear_backward transpose
# expect: test_linear_bias_backward transpose
# expect: test_reduce_to_shape broadcast-axis
# expect: test_name_the_bug wrong-values
# expect: test_batched_matmul_backward transpose
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
# %% name_the_bug
def name_the_bug(backward):
    """Runs with square sizes and looks for a transpose only in the shapes: a transposed dw goes unseen."""
    def close(got, ref):
        return float(torch.linalg.vector_norm(got - ref)) <= 1e-9 * max(float(torch.linalg.vector_norm(ref)), 1e-300)

    gen = torch.Generator().manual_seed(0)
    K = N = 4  # bug: square w, so a transposed dw keeps its shape
    for B in (1, 7):
        x, w, b, dy = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((B, K), (K, N), (N,), (B, N)))
        for got, ref in zip(backward(x, w, b, dy), (dy @ w.mT, x.mT @ dy, dy.sum(dim=0))):
            if got.shape != ref.shape:
                return "transpose" if ref.ndim == 2 and got.shape == ref.mT.shape else "broadcast-axis"
            if close(got, ref):
                continue
            if close(got, -ref):
                return "sign"
            factor = float((got * ref).sum() / (ref * ref).sum())
            if close(got, factor * ref):
                return "scale"
            return "batch-reduction"
    return "none"
# %% batched_matmul_backward
def batched_matmul_backward(a, c, dy):
    da = dy @ c.mT
    dc = dy.mT @ a  # bug: (..., N, K), the transpose of c̄
    while dc.ndim > c.ndim:
        dc = dc.sum(dim=0)
    if c.ndim == 3 and c.shape[0] == 1:
        dc = dc.sum(dim=0, keepdim=True)
    return da, dc
