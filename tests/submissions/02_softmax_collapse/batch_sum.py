# Mutant: the hub is summed over the whole batch, every row gets -1 at every target, and J loses its diagonal; the shifted softmax subtracts one max for the whole batch.
# expect: test_softmax_jacobian wrong-values
# expect: test_softmax_backward broadcast-axis
# expect: test_shifted_softmax_vjp non-finite
# expect: test_softmax_cross_entropy_backward batch-reduction
# %% softmax_jacobian
def softmax_jacobian(y):
    return -(y.unsqueeze(-1) * y.unsqueeze(-2))
# %% softmax_backward
def softmax_backward(y, dy):
    s = (y * dy).sum()  # one number for the whole batch
    return y * (dy - s)
# %% shifted_softmax_vjp
def shifted_softmax_vjp(x, c, dy):
    e = (x - x.max()).exp()  # the bug: one shift for the whole batch underflows rows far below the largest
    y = e / e.sum(dim=-1, keepdim=True)
    s = (y * dy).sum(dim=-1, keepdim=True)
    return y, y * (dy - s), torch.zeros_like(c)
# %% softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    M, C = logits.shape
    grad = torch.softmax(logits, dim=-1).clone()
    grad[:, target] -= 1  # every row, every target
    return grad / M
