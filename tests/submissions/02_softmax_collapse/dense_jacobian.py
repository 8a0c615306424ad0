# Mutant: the backward builds the full N×N Jacobian (right values), and the loss gradient is summed over the rows.
# expect: test_softmax_backward materialized-jacobian
# expect: test_softmax_cross_entropy_backward scale
# %% softmax_backward
def softmax_backward(y, dy):
    J = torch.diag_embed(y) - y[..., :, None] * y[..., None, :]  # (..., N, N)
    return (J @ dy[..., :, None])[..., 0]
# %% softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    C = logits.shape[-1]
    y = torch.softmax(logits, dim=-1)
    return y - torch.nn.functional.one_hot(target, C).to(y.dtype)  # forgot the 1/M of the mean
