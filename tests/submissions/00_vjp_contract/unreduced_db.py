# Mutant: the caller's x nudged in place and never put back, norms per row, db not summed over the batch.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error shape
# expect: test_linear_softmax_ce_backward batch-reduction
# %% numerical_gradient
def numerical_gradient(f, x, eps=1e-6):
    """Perturbs the caller's tensor and forgets to restore each entry."""
    dx = torch.zeros(x.shape, dtype=torch.float64)
    x_flat, dx_flat = x.view(-1), dx.view(-1)
    for i in range(x_flat.numel()):
        x_flat[i] += eps
        f_plus = float(f(x))
        x_flat[i] -= 2 * eps
        f_minus = float(f(x))
        dx_flat[i] = (f_plus - f_minus) / (2 * eps)
    return dx
# %% relative_error
def relative_error(a, b):
    """Norms along the last axis only: one number per row instead of one in all."""
    a, b = a.double(), b.double()
    norm = torch.linalg.norm
    return norm(a - b, dim=-1) / torch.clamp(torch.maximum(norm(a, dim=-1), norm(b, dim=-1)), min=1e-300)
# %% linear_softmax_ce_backward
def linear_softmax_ce_backward(x, W, b, target):
    """db keeps one row per example: (M, C) instead of (C,)."""
    M, C = x.shape[0], W.shape[1]
    y = torch.softmax(x @ W + b, dim=1)
    dz = (y - torch.nn.functional.one_hot(target, C).to(y.dtype)) / M
    return dz @ W.T, x.T @ dz, dz
