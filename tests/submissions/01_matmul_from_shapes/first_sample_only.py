# Mutant: the batch axis is never summed — one sample stands in for all of them; name_the_bug never looks above batch 1; the handed-over batched matmul left unrepaired.
# expect: test_linear_backward batch-reduction
# expect: test_linear_bias_backward batch-reduction
# expect: test_reduce_to_shape batch-reduction
# expect: test_name_the_bug wrong-values
# expect: test_batched_matmul_backward batch-reduction
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
# %% name_the_bug
def name_the_bug(backward):
    """Tests at batch 1 only: every batch-reduction bug comes back "none"."""
    def close(got, ref):
        return float(torch.linalg.vector_norm(got - ref)) <= 1e-9 * max(float(torch.linalg.vector_norm(ref)), 1e-300)

    gen = torch.Generator().manual_seed(0)
    K, N = 3, 5
    for B in (1,):  # bug: no run above batch 1
        x, w, b, dy = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((B, K), (K, N), (N,), (B, N)))
        for got, ref in zip(backward(x, w, b, dy), (dy @ w.mT, x.mT @ dy, dy.sum(dim=0))):
            if got.shape != ref.shape:
                return "transpose" if ref.ndim == 2 and got.shape == ref.mT.shape else "broadcast-axis"
            if close(got, ref):
                continue
            if close(got, -ref):
                return "sign"
            return "scale"
    return "none"
# %% batched_matmul_backward
def batched_matmul_backward(a, c, dy):
    """The handed-over function, unrepaired: dc summed over the batch even when c is per element."""
    K, N = c.shape[-2:]
    da = dy @ c.mT
    dc = a.reshape(-1, K).mT @ dy.reshape(-1, N)
    return da, dc.expand(c.shape)
