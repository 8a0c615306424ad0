# Mutant: J pairs entries of different rows, s is a mean instead of a sum, and the softmax skips the max shift.
# expect: test_softmax_jacobian broadcast-axis
# expect: test_softmax_backward wrong-values
# expect: test_softmax_cross_entropy_backward non-finite
# %% softmax_jacobian
def softmax_jacobian(y):
    return torch.diag_embed(y) - y.unsqueeze(0) * y.unsqueeze(1)
# %% softmax_backward
def softmax_backward(y, dy):
    s = (y * dy).mean(dim=-1, keepdim=True)
    return y * (dy - s)
# %% softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    C = logits.shape[-1]
    M = logits.numel() // C
    e = logits.exp()  # no max shift: exp overflows for large logits
    y = e / e.sum(dim=-1, keepdim=True)
    return (y - torch.nn.functional.one_hot(target, C).to(y.dtype)) / M
