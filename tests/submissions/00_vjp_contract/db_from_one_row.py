# Mutant: a float32 result, a crash when both gradients are zero, and db taken from the first row.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error error
# expect: test_linear_softmax_ce_backward batch-reduction
# %% numerical_gradient
def numerical_gradient(f, x, eps=1e-6):
    """Right differences, stored into a default-dtype tensor: float32."""
    x = x.detach().to(torch.float64, copy=True)
    dx = torch.zeros(x.shape)
    x_flat, dx_flat = x.view(-1), dx.view(-1)
    for i in range(x_flat.numel()):
        x_i = x_flat[i].item()
        x_flat[i] = x_i + eps
        f_plus = float(f(x))
        x_flat[i] = x_i - eps
        f_minus = float(f(x))
        x_flat[i] = x_i
        dx_flat[i] = (f_plus - f_minus) / (2 * eps)
    return dx
# %% relative_error
def relative_error(a, b):
    """max() hands back the plain float 1e-300 when both norms are zero, and floats have no .item()."""
    a, b = a.double(), b.double()
    norm = torch.linalg.vector_norm
    return norm(a - b).item() / max(norm(a), norm(b), 1e-300).item()
# %% linear_softmax_ce_backward
def linear_softmax_ce_backward(x, W, b, target):
    """db from row 0 alone: right at batch 1, wrong above it."""
    M, C = x.shape[0], W.shape[1]
    y = torch.softmax(x @ W + b, dim=1)
    dz = (y - torch.nn.functional.one_hot(target, C).to(y.dtype)) / M
    return dz @ W.T, x.T @ dz, dz[0]
