# Mutant: every reduction is a mean where the chain rule sums, and name_the_bug spells a class its own way.
# expect: test_linear_backward scale
# expect: test_linear_bias_backward scale
# expect: test_reduce_to_shape scale
# expect: test_name_the_bug shape
# expect: test_batched_matmul_backward scale
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
# %% name_the_bug
def name_the_bug(backward):
    """Right procedure, but spells a class its own way: "batch_reduction" is not one of the grader's words."""
    def close(got, ref):
        return float(torch.linalg.vector_norm(got - ref)) <= 1e-9 * max(float(torch.linalg.vector_norm(ref)), 1e-300)

    gen = torch.Generator().manual_seed(0)
    K, N = 3, 5
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
            return "batch_reduction"  # bug: not the grader's word
    return "none"
# %% batched_matmul_backward
def batched_matmul_backward(a, c, dy):
    da = dy @ c.mT
    dc = a.mT @ dy
    if c.ndim == 2:
        dc = dc.mean(dim=0)  # bug: a shared c receives every element's gradient in full
    elif c.shape[0] == 1:
        dc = dc.mean(dim=0, keepdim=True)  # bug: the same
    return da, dc
