# Hostile: the N×N Jacobian of each row in two halves, both alive at once, row by row: each allocation is
# N²/2 elements, under a single-allocation bound of N²; values right.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero materialized-jacobian
# %% softmax_backward
def softmax_backward(y, dy):
    N = y.shape[-1]
    half = N // 2
    out = torch.empty_like(y)
    flat_y, flat_dy, flat_out = y.reshape(-1, N), dy.reshape(-1, N), out.view(-1, N)
    for r in range(flat_y.shape[0]):
        yr = flat_y[r]
        parts = []
        for rows in (slice(0, half), slice(half, N)):
            J = -yr[rows, None] * yr[None, :]  # these rows of the Jacobian: N/2 × N
            i = torch.arange(J.shape[0])
            J[i, i + rows.start] += yr[rows]  # the diagonal
            parts.append(J)  # both halves alive together
        flat_out[r] = torch.cat([J @ flat_dy[r] for J in parts])
    return out
