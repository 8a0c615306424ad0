# Mutant: J pairs entries of different rows, s is a mean instead of a sum, and the softmax skips the max shift; the shift's gradient differentiates only the numerator.
# expect: test_softmax_jacobian broadcast-axis
# expect: test_softmax_backward wrong-values
# expect: test_shifted_softmax_vjp wrong-values
# expect: test_softmax_cross_entropy_backward non-finite
# %% softmax_jacobian
def softmax_jacobian(y):
    return torch.diag_embed(y) - y.unsqueeze(0) * y.unsqueeze(1)
# %% softmax_backward
def softmax_backward(y, dy):
    s = (y * dy).mean(dim=-1, keepdim=True)
    return y * (dy - s)
# %% shifted_softmax_vjp
def shifted_softmax_vjp(x, c, dy):
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    y = e / e.sum(dim=-1, keepdim=True)
    s = (y * dy).sum(dim=-1, keepdim=True)
    return y, y * (dy - s), -s  # the bug: ∂y_i/∂c taken as −y_i, as if the denominator did not hold c
# %% softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    C = logits.shape[-1]
    M = logits.numel() // C
    e = logits.exp()  # no max shift: exp overflows for large logits
    y = e / e.sum(dim=-1, keepdim=True)
    return (y - torch.nn.functional.one_hot(target, C).to(y.dtype)) / M
