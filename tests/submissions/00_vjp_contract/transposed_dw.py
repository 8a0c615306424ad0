# Mutant: eps ignored, 0/0 for two zero gradients, and dW placed transposed.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error non-finite
# expect: test_linear_softmax_ce_backward transpose
# %% numerical_gradient
def numerical_gradient(f, x, eps=1e-6):
    """Always steps 1e-6, whatever eps it is given."""
    x = x.detach().to(torch.float64, copy=True)
    dx = torch.zeros_like(x)
    x_flat, dx_flat = x.view(-1), dx.view(-1)
    h = 1e-6
    for i in range(x_flat.numel()):
        x_i = x_flat[i].item()
        x_flat[i] = x_i + h
        f_plus = float(f(x))
        x_flat[i] = x_i - h
        f_minus = float(f(x))
        x_flat[i] = x_i
        dx_flat[i] = (f_plus - f_minus) / (2 * h)
    return dx
# %% relative_error
def relative_error(a, b):
    """No tiny in the denominator: two zero gradients give 0/0 = NaN."""
    a, b = a.double(), b.double()
    norm = torch.linalg.vector_norm
    return (norm(a - b) / torch.maximum(norm(a), norm(b))).item()
# %% linear_softmax_ce_backward
def linear_softmax_ce_backward(x, W, b, target):
    """dW = z̄ᵀ x: (C, K) instead of (K, C) — and silently (K, K) when W is square."""
    M, C = x.shape[0], W.shape[1]
    y = torch.softmax(x @ W + b, dim=1)
    dz = (y - torch.nn.functional.one_hot(target, C).to(y.dtype)) / M
    return dz @ W.T, dz.T @ x, dz.sum(dim=0)
