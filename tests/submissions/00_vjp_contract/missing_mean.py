# Mutant: a central difference divided by ε, a one-sided denominator, and the mean's 1/M forgotten.
# expect: test_numerical_gradient scale
# expect: test_relative_error wrong-values
# expect: test_linear_softmax_ce_backward scale
# %% numerical_gradient
def numerical_gradient(f, x, eps=1e-6):
    """Steps 2ε but divides by ε: twice the gradient."""
    x = x.detach().to(torch.float64, copy=True)
    dx = torch.zeros_like(x)
    x_flat, dx_flat = x.view(-1), dx.view(-1)
    for i in range(x_flat.numel()):
        x_i = x_flat[i].item()
        x_flat[i] = x_i + eps
        f_plus = float(f(x))
        x_flat[i] = x_i - eps
        f_minus = float(f(x))
        x_flat[i] = x_i
        dx_flat[i] = (f_plus - f_minus) / eps
    return dx
# %% relative_error
def relative_error(a, b):
    """Divides by ‖b‖ only: relative_error(a, b) ≠ relative_error(b, a)."""
    a, b = a.double(), b.double()
    return (torch.linalg.vector_norm(a - b) / max(torch.linalg.vector_norm(b).item(), 1e-300)).item()
# %% linear_softmax_ce_backward
def linear_softmax_ce_backward(x, W, b, target):
    """The loss is a mean, but the gradient is written for a sum: M times too large."""
    C = W.shape[1]
    y = torch.softmax(x @ W + b, dim=1)
    dz = y - torch.nn.functional.one_hot(target, C).to(y.dtype)
    return dz @ W.T, x.T @ dz, dz.sum(dim=0)
