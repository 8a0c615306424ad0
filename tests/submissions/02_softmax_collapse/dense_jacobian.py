# Mutant: the backward builds the full N×N Jacobian (right values), and the loss gradient is summed over the rows; the shifted softmax exponentiates x − c as handed in.
# expect: test_softmax_backward materialized-jacobian
# expect: test_shifted_softmax_vjp non-finite
# expect: test_softmax_cross_entropy_backward scale
# %% softmax_backward
def softmax_backward(y, dy):
    J = torch.diag_embed(y) - y[..., :, None] * y[..., None, :]  # (..., N, N)
    return (J @ dy[..., :, None])[..., 0]
# %% shifted_softmax_vjp
def shifted_softmax_vjp(x, c, dy):
    e = (x - c).exp()  # the bug: c = 0, or c far from the row, leaves exponents of ±1000
    y = e / e.sum(dim=-1, keepdim=True)
    s = (y * dy).sum(dim=-1, keepdim=True)
    return y, y * (dy - s), torch.zeros_like(c)
# %% softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    C = logits.shape[-1]
    y = torch.softmax(logits, dim=-1)
    return y - torch.nn.functional.one_hot(target, C).to(y.dtype)  # forgot the 1/M of the mean
