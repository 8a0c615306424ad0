# Mutant: a forward difference, an absolute error, and softmax − onehot turned around.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error scale
# expect: test_linear_softmax_ce_backward sign
# %% numerical_gradient
def numerical_gradient(f, x, eps=1e-6):
    """One-sided: (f(x + ε) − f(x))/ε, error O(ε) instead of O(ε²)."""
    x = x.detach().to(torch.float64, copy=True)
    dx = torch.zeros_like(x)
    x_flat, dx_flat = x.view(-1), dx.view(-1)
    f_x = float(f(x))
    for i in range(x_flat.numel()):
        x_i = x_flat[i].item()
        x_flat[i] = x_i + eps
        dx_flat[i] = (float(f(x)) - f_x) / eps
        x_flat[i] = x_i
    return dx
# %% relative_error
def relative_error(a, b):
    """The absolute error: no division by the size of the gradients."""
    return torch.linalg.vector_norm(a.double() - b.double()).item()
# %% linear_softmax_ce_backward
def linear_softmax_ce_backward(x, W, b, target):
    """onehot − softmax: every gradient negated."""
    M, C = x.shape[0], W.shape[1]
    y = torch.softmax(x @ W + b, dim=1)
    E = torch.nn.functional.one_hot(target, C).to(y.dtype)
    dz = (E - y) / M
    return dz @ W.T, x.T @ dz, dz.sum(dim=0)
