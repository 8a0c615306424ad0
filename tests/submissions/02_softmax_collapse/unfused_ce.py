# Mutant: the backward has its sign flipped, and cross-entropy is chained through -1/y_t instead of fused; the shift's gradient is left one per entry instead of summed over the row.
# expect: test_softmax_backward sign
# expect: test_shifted_softmax_vjp shape
# expect: test_softmax_cross_entropy_backward non-finite
# %% softmax_backward
def softmax_backward(y, dy):
    s = (y * dy).sum(dim=-1, keepdim=True)
    return y * (s - dy)
# %% shifted_softmax_vjp
def shifted_softmax_vjp(x, c, dy):
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    y = e / e.sum(dim=-1, keepdim=True)
    s = (y * dy).sum(dim=-1, keepdim=True)
    dx = y * (dy - s)
    return y, dx, -dx  # the bug: c is broadcast along the row, so its gradient sums over it
# %% softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    C = logits.shape[-1]
    M = logits.numel() // C
    y = torch.softmax(logits, dim=-1)
    onehot = torch.nn.functional.one_hot(target, C).to(y.dtype)
    dy = -onehot / (M * y)  # the backward of -log(y_t)/M: 1/y_t overflows when y_t underflows
    s = (y * dy).sum(dim=-1, keepdim=True)
    return y * (dy - s)
