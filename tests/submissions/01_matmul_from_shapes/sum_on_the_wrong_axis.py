# Mutant: reductions over the wrong axes — dw keeps the leading axes of a 3-D x, db sums the features, keepdim lost, a (1, K, N) c not summed — and name_the_bug never looks at db.
# expect: test_linear_backward batch-reduction
# expect: test_linear_bias_backward broadcast-axis
# expect: test_reduce_to_shape shape
# expect: test_name_the_bug wrong-values
# expect: test_batched_matmul_backward batch-reduction
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
# %% name_the_bug
def name_the_bug(backward):
    """Compares dx and dw only: every bug in db comes back "none"."""
    def close(got, ref):
        return float(torch.linalg.vector_norm(got - ref)) <= 1e-9 * max(float(torch.linalg.vector_norm(ref)), 1e-300)

    gen = torch.Generator().manual_seed(0)
    K, N = 3, 5
    for B in (1, 7):
        x, w, b, dy = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((B, K), (K, N), (N,), (B, N)))
        dx, dw, db = backward(x, w, b, dy)
        for got, ref in zip((dx, dw), (dy @ w.mT, x.mT @ dy)):  # bug: db is never looked at
            if got.shape != ref.shape:
                return "transpose"
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
    dc = a.mT @ dy
    if c.ndim == 2:
        dc = dc.sum(dim=0)  # bug: a (1, K, N) c is one shared matrix too, and keeps (B, K, N)
    return da, dc
