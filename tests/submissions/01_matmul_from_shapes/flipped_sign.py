# Mutant: the descent step's minus sign slips into the gradients, sum(dim=()) sums everything, and name_the_bug blames a missing sum before it looks for a factor.
# expect: test_linear_backward sign
# expect: test_linear_bias_backward sign
# expect: test_reduce_to_shape shape
# expect: test_name_the_bug wrong-values
# expect: test_batched_matmul_backward sign
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
# %% name_the_bug
def name_the_bug(backward):
    """Asks "right at batch 1, wrong above?" before "a constant factor?": a mean becomes a batch-reduction."""
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
            if B > 1:  # bug: checked before the factor
                return "batch-reduction"
            return "scale"
    return "none"
# %% batched_matmul_backward
def batched_matmul_backward(a, c, dy):
    da = dy @ c.mT
    dc = -(a.mT @ dy)  # bug: the update direction is not the gradient
    while dc.ndim > c.ndim:
        dc = dc.sum(dim=0)
    if c.ndim == 3 and c.shape[0] == 1:
        dc = dc.sum(dim=0, keepdim=True)
    return da, dc
