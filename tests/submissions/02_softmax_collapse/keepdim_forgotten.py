# Mutant: row reductions lose their last axis (keepdim forgotten), and the Jacobian has its sign flipped; the shift's row max loses its axis too.
# expect: test_softmax_jacobian sign
# expect: test_softmax_backward broadcast-axis
# expect: test_shifted_softmax_vjp broadcast-axis
# expect: test_softmax_cross_entropy_backward broadcast-axis
# %% softmax_jacobian
def softmax_jacobian(y):
    return y.unsqueeze(-1) * y.unsqueeze(-2) - torch.diag_embed(y)
# %% softmax_backward
def softmax_backward(y, dy):
    s = (y * dy).sum(dim=-1)  # shape (...,): broadcasts along the wrong axis
    return y * (dy - s)
# %% shifted_softmax_vjp
def shifted_softmax_vjp(x, c, dy):
    e = (x - x.amax(dim=-1)).exp()  # the bug: the row max of shape (...,) shifts along the wrong axis
    y = e / e.sum(dim=-1, keepdim=True)
    s = (y * dy).sum(dim=-1, keepdim=True)
    return y, y * (dy - s), torch.zeros_like(c)
# %% softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    C = logits.shape[-1]
    M = logits.numel() // C
    e = (logits - logits.amax(dim=-1, keepdim=True)).exp()
    y = e / e.sum(dim=-1)  # the normaliser lost its last axis
    return (y - torch.nn.functional.one_hot(target, C).to(y.dtype)) / M
