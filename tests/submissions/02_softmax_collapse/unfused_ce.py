# Mutant: the backward has its sign flipped, and cross-entropy is chained through -1/y_t instead of fused.
# expect: test_softmax_backward sign
# expect: test_softmax_cross_entropy_backward non-finite
# %% softmax_backward
def softmax_backward(y, dy):
    s = (y * dy).sum(dim=-1, keepdim=True)
    return y * (s - dy)
# %% softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    C = logits.shape[-1]
    M = logits.numel() // C
    y = torch.softmax(logits, dim=-1)
    onehot = torch.nn.functional.one_hot(target, C).to(y.dtype)
    dy = -onehot / (M * y)  # the backward of -log(y_t)/M: 1/y_t overflows when y_t underflows
    s = (y * dy).sum(dim=-1, keepdim=True)
    return y * (dy - s)
