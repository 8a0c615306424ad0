# Mutant: the hub is summed over the whole batch, every row gets -1 at every target, and J loses its diagonal.
# expect: test_softmax_jacobian wrong-values
# expect: test_softmax_backward broadcast-axis
# expect: test_softmax_cross_entropy_backward batch-reduction
# %% softmax_jacobian
def softmax_jacobian(y):
    return -(y.unsqueeze(-1) * y.unsqueeze(-2))
# %% softmax_backward
def softmax_backward(y, dy):
    s = (y * dy).sum()  # one number for the whole batch
    return y * (dy - s)
# %% softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    M, C = logits.shape
    grad = torch.softmax(logits, dim=-1).clone()
    grad[:, target] -= 1  # every row, every target
    return grad / M
